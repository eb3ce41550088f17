"""``DuplexOmni``: the in-process duplex API, and ``DuplexSessionHandle``.

::

    async with DuplexOmni("loopback") as omni:
        async with await omni.open_session({"output_modalities": ["audio"]}) as session:
            session.submit(command)
            async for event in session.events():
                ...

The server allocates every session id (``duplex-<uuid4 hex>``). Each session's events
reach its handle in the order the engine emitted them. A handle's outbox is bounded
(DESIGN decision 13): when a ``response.done`` with status ``cancelled`` arrives, the
undelivered audio and transcript deltas of that response are dropped so the terminal
overtakes them, and a consumer that stops reading until the bound is hit is treated as
disconnected (a resumable session is detached, any other closed); what arrives after that
is dropped until the session is resumed, so the memory held per session stays bounded.
A resume after such a gap queues ``session.resync_required`` (reason ``outbox_overflow``)
behind the events the outbox still held.

A consumer that keeps its own bounded buffer (the Realtime route: one socket queue per
connection, a replay journal while detached) takes the events pushed instead
(``deliver_to``): then the outbox is not used at all, so the session's events cross one
buffer on their way to the socket, not two.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Coroutine, Mapping
from contextlib import aclosing
from types import TracebackType
from typing import Any, Self

from ..config.pipeline import PipelineConfig
from ..engine.duplex.errors import DuplexSessionError
from ..engine.duplex.messages import SessionEventMessage
from ..engine.duplex.plugin import ModelResult
from ..engine.duplex.runtime_config import DuplexSessionRuntimeConfig
from ..engine.duplex.session.lease import LeaseActivity
from ..engine.duplex.session.manager import OpenResult
from ..engine.duplex.turn_response import (
    StartTurnResponse,
    TurnResponseOutput,
    TurnResponseRequest,
    stage_failure,
)
from ..engine.duplex_omni_engine import DuplexOmniEngine
from ..engine.errors import EngineDeadError, EngineError, EngineNotRunningError
from ..protocol.duplex import cancelled_response_id, media_response_id
from ..protocol.duplex import events as ev
from .async_omni import AsyncOmni
from .event_queue import BoundedEventQueue

log = logging.getLogger(__name__)


def _event_bytes(event: Any) -> int:
    delta = getattr(event, "delta", None)
    return len(delta) if isinstance(delta, str | bytes) else 0


class EventConsumer(ABC):
    """Takes a session's events as they arrive, on the caller's loop (``deliver_to``).

    Both methods are called synchronously from the output pump: they must not block.
    """

    @abstractmethod
    def on_event(self, event: Any) -> None:
        """One event of the session, in order; ``session.closed`` is the last."""

    @abstractmethod
    def on_error(self, error: BaseException) -> None:
        """The engine can deliver nothing more (it died or shut down)."""

    def backlogged(self) -> bool:
        """Whether events wait for this consumer's own reader: the output pump then
        yields to the event loop after handing it one, so that reader runs before more
        arrive."""
        return False


class DuplexSessionHandle:
    """The caller's side of one engine-resident session.

    ``submit`` queues a typed command (one-way; refusals come back as ``error`` events);
    to send wire events, validated as on the wire, drive the handle with
    ``omniduplex.clients.InlineDuplexClient`` (``open`` or ``attach``). ``events()``
    yields the session's events and ends after ``session.closed`` / ``session.expired``.
    Used as an async context manager, the session is closed on exit.
    Only one consumer should iterate ``events()`` at a time.
    """

    def __init__(
        self,
        omni: DuplexOmni,
        session_id: str,
        *,
        max_events: int,
        max_bytes: int,
    ) -> None:
        self.omni = omni
        self.session_id = session_id
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.open_result: OpenResult | None = None
        self.lease_generation = 0
        # True while a consumer is expected to read; False once detached.
        self.attached = True
        # The outbox hit its bound: events are dropped until the session is resumed.
        self.overflowed = False
        self.dropped_events = 0
        self._outbox: BoundedEventQueue[Any] = BoundedEventQueue(
            max_events=max_events,
            max_bytes=max_bytes,
            size_of=_event_bytes,
            media_of=media_response_id,
        )
        self._wakeup = asyncio.Event()
        self._terminal_queued = False
        self._ended = False
        self._error: BaseException | None = None
        self._consumer: EventConsumer | None = None

    # ---- caller side ------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """The session's terminal event has arrived (it may still be in the outbox)."""
        return self._terminal_queued

    @property
    def pending_events(self) -> int:
        return len(self._outbox)

    @property
    def capabilities(self) -> dict[str, Any]:
        return dict(self.open_result.capabilities) if self.open_result else {}

    def submit(self, command: Any) -> None:
        if self._terminal_queued:
            raise DuplexSessionError(
                f"Duplex session is closed: {self.session_id}", code="session_closed"
            )
        self.omni.engine.submit_command(self.session_id, command)

    def deliver_to(self, consumer: EventConsumer) -> None:
        """Push every event to ``consumer`` instead of the outbox, from now on; what the
        outbox already holds goes first. ``events()`` yields nothing after this."""
        self._consumer = consumer
        for event in self._outbox.take_all():
            consumer.on_event(event)
        if self._error is not None:
            consumer.on_error(self._error)

    async def events(self) -> AsyncIterator[Any]:
        while not self._ended:
            while not self._outbox:
                if self._error is not None:
                    self._ended = True
                    raise self._error
                self._wakeup.clear()
                await self._wakeup.wait()
            event = self._outbox.pop()
            if isinstance(event, ev.SessionClosed):
                self._ended = True
            yield event

    async def close(self, reason: str = "client_close") -> None:
        """Close the session (no-op once it ended); ``session.closed`` is its last event."""
        if self._terminal_queued or self._error is not None:
            return
        await self.omni.close_session(self.session_id, reason)

    async def detach(self) -> int:
        return await self.omni.detach_session(self.session_id, self.lease_generation)

    async def resume(self) -> Self:
        await self.omni.resume_session(self.session_id, self.lease_generation)
        return self

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(EngineError, DuplexSessionError):
            await self.close()

    # ---- engine side (the output pump, on the caller's loop) ---------------------------

    def _opened(self, result: OpenResult) -> None:
        self.open_result = result
        self.lease_generation = result.lease_generation

    def _resumed(self, result: OpenResult) -> None:
        self._opened(result)
        self.attached = True
        if self.overflowed and not self._terminal_queued:
            # Events were dropped while the consumer was away: say so, in order.
            gap = ev.SessionResyncRequired(session_id=self.session_id, reason="outbox_overflow")
            self._outbox.push(gap)
            self._wakeup.set()
        self.overflowed = False

    def _detached(self, generation: int | None = None) -> None:
        self.attached = False
        if generation is not None:
            self.lease_generation = generation

    def _deliver(self, event: Any) -> None:
        if self._terminal_queued:
            log.debug("session %s: event after its terminal dropped", self.session_id)
            return
        terminal = isinstance(event, ev.SessionClosed)
        if self._consumer is not None:
            self._terminal_queued = terminal
            self._consumer.on_event(event)
            return
        cancelled = cancelled_response_id(event)
        if cancelled is not None:
            self._outbox.drop_media_of(cancelled)
        if not terminal:
            if self.overflowed:
                self.dropped_events += 1
                return
            if not self._outbox.fits(event):
                self.dropped_events += 1
                self._overflow()
                return
        else:
            self._terminal_queued = True
        self._outbox.push(event)
        self._wakeup.set()

    def _overflow(self) -> None:
        self.overflowed = True
        if not self.attached:
            return  # already treated as disconnected
        self.attached = False
        resumable = bool(self.capabilities.get("supports_session_resume", False))
        log.warning(
            "session %s: outbox bound hit (%d events); %s",
            self.session_id,
            len(self._outbox),
            "detaching" if resumable else "closing",
        )
        if resumable:
            self.omni._spawn(self.omni._detach_quietly(self.session_id, self.lease_generation))
        else:
            self.omni._spawn(self.omni._close_quietly(self.session_id, "outbox_overflow"))

    def _fail(self, error: BaseException) -> None:
        if self._terminal_queued or self._error is not None:
            return
        self._error = error
        if self._consumer is not None:
            self._consumer.on_error(error)
        self._wakeup.set()


class DuplexOmni(AsyncOmni):
    """The duplex deployment's in-process API; turn-based ``generate`` works as well."""

    def __init__(self, pipeline: PipelineConfig | str | os.PathLike[str], **engine_kwargs: Any):
        self._handles: dict[str, DuplexSessionHandle] = {}
        self._side_tasks: set[asyncio.Task[Any]] = set()
        super().__init__(pipeline, **engine_kwargs)

    engine: DuplexOmniEngine

    def _create_engine(self, *, pipeline: PipelineConfig, **engine_kwargs: Any) -> DuplexOmniEngine:
        return DuplexOmniEngine(pipeline, **engine_kwargs)

    @property
    def runtime_config(self) -> DuplexSessionRuntimeConfig:
        config = self.engine.runtime_config
        if config is None:
            return DuplexSessionRuntimeConfig.from_mapping(self.pipeline.duplex_session)
        return config

    # ---- sessions ---------------------------------------------------------------------

    async def open_session(self, session: Mapping[str, Any] | None = None) -> DuplexSessionHandle:
        """Open a session; its first event is ``session.created``.

        An ``id`` / ``session_id`` in ``session`` is ignored: the server allocates the id.
        Raises ``DuplexSessionError`` (``resource_exhausted`` when the deployment is full).
        """
        await self.start()
        if self._dead_reason is not None:
            raise EngineDeadError(self._dead_reason)
        payload = {k: v for k, v in dict(session or {}).items() if k not in ("id", "session_id")}
        session_id = f"duplex-{uuid.uuid4().hex}"
        # Registered before the RPC: session.created may be pumped before it returns.
        handle = self._new_handle(session_id)
        try:
            result = await self.engine.open_session(session_id, payload)
        except BaseException:
            if self._handles.get(session_id) is handle:
                del self._handles[session_id]
            raise
        handle._opened(result)
        return handle

    def get_session(self, session_id: str) -> DuplexSessionHandle | None:
        return self._handles.get(session_id)

    async def resume_session(
        self, session_id: str, expected_lease_generation: int
    ) -> DuplexSessionHandle:
        """Re-attach a (detached) session; the lease generation is a compare-and-swap.

        Raises ``DuplexSessionError`` (``session_resume_conflict``, ``unknown_session``).
        """
        await self.start()
        result = await self.engine.resume_session(session_id, expected_lease_generation)
        handle = self._handles.get(session_id) or self._new_handle(session_id)
        handle._resumed(result)
        return handle

    def _new_handle(self, session_id: str) -> DuplexSessionHandle:
        """A registered handle with the deployment's outbox bounds."""
        runtime = self.runtime_config
        handle = DuplexSessionHandle(
            self,
            session_id,
            max_events=runtime.max_outbox_events_per_session,
            max_bytes=runtime.max_outbox_bytes_per_session,
        )
        self._handles[session_id] = handle
        return handle

    async def detach_session(
        self, session_id: str, expected_lease_generation: int | None = None
    ) -> int:
        """The consumer went away: the engine keeps the session for its disconnect grace.

        ``expected_lease_generation`` names the lease given up; if a resume took a newer
        one meanwhile, ``DuplexSessionError`` (``session_resume_conflict``) and nothing
        changes.
        """
        generation = await self.engine.touch_session(
            session_id, LeaseActivity.DETACH, expected_lease_generation=expected_lease_generation
        )
        handle = self._handles.get(session_id)
        if handle is not None:
            handle._detached(generation)
        return generation

    async def close_session(self, session_id: str, reason: str = "client_close") -> bool:
        """Close a session; its ``session.closed`` is its handle's last event."""
        return await self.engine.close_session(session_id, reason)

    async def _detach_quietly(self, session_id: str, expected_lease_generation: int) -> None:
        with contextlib.suppress(EngineError, DuplexSessionError):
            await self.detach_session(session_id, expected_lease_generation)

    async def _close_quietly(self, session_id: str, reason: str) -> None:
        with contextlib.suppress(EngineError, DuplexSessionError):
            await self.close_session(session_id, reason)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    # ---- turn responses (no session) ---------------------------------------------------

    async def respond(self, request: TurnResponseRequest) -> AsyncIterator[ModelResult]:
        """Run one turn response on the engine and yield its model results.

        The orchestrator plans it with the plugin and projects its stage outputs (see
        ``engine/duplex/turn_response.py``); no session slot is held. Raises
        ``TurnResponseError`` when it does not complete, ``EngineDeadError`` /
        ``EngineNotRunningError`` when the engine cannot serve. Leaving the iteration
        early aborts it in every stage.
        """
        message = StartTurnResponse(request)
        async with aclosing(self._request_stream(request.request_id, message)) as outputs:
            async for output in outputs:
                failure = None
                if isinstance(output, TurnResponseOutput):
                    for result in output.results:
                        yield result
                    failure = output.failure
                if output.error is not None:
                    # No typed failure only when the orchestrator could not dispatch it.
                    raise failure or stage_failure(output.error)

    # ---- the output pump ----------------------------------------------------------------

    def _let_consumers_run(self, message: object) -> bool:
        # A burst of engine output must not overflow a reader that keeps up: once an
        # outbox (or a pushed-to consumer's own queue) is half full, its reader gets to run.
        if not isinstance(message, SessionEventMessage):
            return False
        handle = self._handles.get(message.session_id)
        if handle is None:
            return False
        if handle._consumer is not None:
            return handle._consumer.backlogged()
        return handle.pending_events * 2 >= handle.max_events

    def _route_engine_message(self, message: object) -> bool:
        if isinstance(message, SessionEventMessage):
            handle = self._handles.get(message.session_id)
            if handle is None:
                log.debug("event for a session with no handle: %s", message.session_id)
                return True
            handle._deliver(message.event)
            if handle.closed:
                del self._handles[message.session_id]
            return True
        return super()._route_engine_message(message)

    def _on_engine_dead(self, reason: str) -> None:
        super()._on_engine_dead(reason)
        self._fail_handles(EngineDeadError(reason))

    def _fail_handles(self, error: BaseException) -> None:
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            handle._fail(error)

    async def shutdown(self) -> None:
        if self._closed:
            return
        if self.started and self._dead_reason is None:
            for session_id in list(self._handles):
                with contextlib.suppress(EngineError, DuplexSessionError):
                    await self.engine.close_session(session_id, "shutdown")
        side = list(self._side_tasks)
        for task in side:
            task.cancel()
        await asyncio.gather(*side, return_exceptions=True)
        await super().shutdown()
        self._drain_outputs()
        self._fail_handles(EngineNotRunningError(f"{type(self).__name__} shut down"))

    def _drain_outputs(self) -> None:
        """Route what the engine emitted after the pump stopped (terminal events)."""
        try:
            outputs = self.engine.outputs
        except EngineNotRunningError:
            return
        while not outputs.empty():
            message = outputs.get_nowait()
            try:
                self._route_engine_message(message)
            except Exception:
                log.exception("routing %s failed", type(message).__name__)
