"""Helpers for the duplex session tests: real engine, loopback deployments, real plugin."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np

from omniduplex.config.pipeline import PipelineConfig, load_deploy_config
from omniduplex.model_executor.models.loopback.plugin import LoopbackDuplexPlugin
from omniduplex.protocol.duplex import command_from_realtime

# A guard against hangs only; no assertion depends on how long anything takes.
TIMEOUT_S = 30.0


def deployment(name: str = "loopback-fast", **duplex_session: Any) -> PipelineConfig:
    pipeline = load_deploy_config(name)
    if not duplex_session:
        return pipeline
    merged = {**pipeline.duplex_session, **duplex_session}
    return dataclasses.replace(pipeline, duplex_session=merged)


class StreamingInputTestPlugin(LoopbackDuplexPlugin):
    """Test plugin: loopback's outputs, but the engine treats it as a model that streams
    its input (as personaplex does); it plans no input units, so every model output the
    session sees is one the test injected."""

    plugin_id = "streaming-input-test"
    streams_input = True

    def plan_input_unit(self, state: Any, samples: Any, *, fence: Any) -> None:
        return None


def streaming_deployment() -> PipelineConfig:
    """loopback-fast served by ``StreamingInputTestPlugin``."""
    plugin = f"{__name__}:{StreamingInputTestPlugin.__name__}"
    return dataclasses.replace(deployment("loopback-fast"), duplex_plugin=plugin)


async def session_value(omni: Any, session_id: str, read: Callable[[Any], Any]) -> Any:
    """``read`` of the engine-resident session, on the engine's loop."""
    return await omni.engine.call(lambda o: read(o.manager.runners[session_id].session))


def sine_pcm16(ms: int, *, rate: int = 16_000, freq: float = 440.0, amp: float = 0.3) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    return (amp * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2").tobytes()


def append(pcm: bytes, *, rate: int = 16_000, event_id: str | None = None) -> Any:
    obj: dict[str, Any] = {
        "type": "input_audio_buffer.append",
        "audio": base64.b64encode(pcm).decode(),
        "format": {"type": "audio/pcm", "rate": rate},
    }
    if event_id is not None:
        obj["event_id"] = event_id
    return command_from_realtime(obj)


def commit(*, create_response: bool = True, event_id: str | None = None) -> Any:
    obj: dict[str, Any] = {"type": "input_audio_buffer.commit", "create_response": create_response}
    if event_id is not None:
        obj["event_id"] = event_id
    return command_from_realtime(obj)


def command(obj: dict[str, Any]) -> Any:
    return command_from_realtime(obj)


class EventReader:
    """Reads one handle's events; every wait is bounded by ``TIMEOUT_S``."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._it: AsyncIterator[Any] = handle.events().__aiter__()
        self.seen: list[Any] = []

    async def next(self) -> Any:
        try:
            event = await asyncio.wait_for(self._it.__anext__(), TIMEOUT_S)
        except TimeoutError:
            # Say what came and where the handle stood: a rare hang is then diagnosable.
            handle = self.handle
            state = {
                name: getattr(handle, name, None)
                for name in ("attached", "overflowed", "pending_events", "dropped_events")
            }
            seen = [getattr(e, "type", type(e).__name__) for e in self.seen[-12:]]
            message = f"no event in {TIMEOUT_S:g} s; handle {state}; last: {seen}"
            raise AssertionError(message) from None
        self.seen.append(event)
        return event

    async def until(self, predicate: Callable[[Any], bool]) -> list[Any]:
        """Events up to and including the first one ``predicate`` accepts."""
        out: list[Any] = []
        while True:
            event = await self.next()
            out.append(event)
            if predicate(event):
                return out

    async def rest(self) -> list[Any]:
        """Every event until the iterator ends (after session.closed / expired)."""
        out: list[Any] = []
        while True:
            try:
                out.append(await self.next())
            except StopAsyncIteration:
                return out


def is_type(*types: str) -> Callable[[Any], bool]:
    return lambda event: event.type in types


def response_done(response_id: str | None = None) -> Callable[[Any], bool]:
    def check(event: Any) -> bool:
        return event.type == "response.done" and (
            response_id is None or event.response_id == response_id
        )

    return check


async def wait_until(condition: Callable[[], bool]) -> None:
    """Poll a condition on the caller's loop (bounded by ``TIMEOUT_S``)."""

    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), TIMEOUT_S)


async def dispatch_together(omni: Any, handle: Any, *commands: Any) -> None:
    """Hand several commands to the session in one step of the orchestrator loop.

    ``handle.submit`` calls made one after another cross threads separately, so the
    engine may run between them; tests that need "B arrives while A is in flight" use
    this instead (the same ``manager.dispatch`` path a submitted command takes).
    """

    def dispatch(orchestrator: Any) -> None:
        for item in commands:
            orchestrator.manager.dispatch(handle.session_id, item)

    await omni.engine.call(dispatch)
