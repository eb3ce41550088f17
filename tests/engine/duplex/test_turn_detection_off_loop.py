"""Decision 10: server turn detection (the VAD's classifier and a turn-completion model)
runs in the append's offloaded work, never on the orchestrator loop, where ~50 ms of a
Smart Turn decision would stall every other session.

The plugin is loopback with two test doubles standing in for the cascade's models (Silero,
Smart Turn): each records the thread it was called on. ``plan_response`` runs on the loop,
so it names the thread the models must not run on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import numpy as np
from duplex_helpers import TIMEOUT_S, EventReader, append, deployment, sine_pcm16

from omniduplex.engine.duplex.vad import EnergyClassifier, TurnCompletionModel
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.loopback.plugin import LoopbackDuplexPlugin


class _Threads:
    """Which threads each part ran on, shared by one plugin's doubles."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.models: set[int] = set()
        self.loop: set[int] = set()

    def note(self, into: set[int]) -> None:
        with self.lock:
            into.add(threading.get_ident())


class RecordingClassifier(EnergyClassifier):
    """Test double of the Silero classifier: energy, plus where it was called."""

    def __init__(self, threads: _Threads) -> None:
        self.threads = threads

    def probability(self, frame: np.ndarray) -> float:
        self.threads.note(self.threads.models)
        return super().probability(frame)


class RecordingTurnModel(TurnCompletionModel):
    """Test double of Smart Turn: every turn sounds complete."""

    name = "recording-double"

    def __init__(self, threads: _Threads) -> None:
        self.threads = threads
        self.calls = 0

    def completion_probability(self, audio: np.ndarray, rate_hz: int) -> float:
        self.threads.note(self.threads.models)
        self.calls += 1
        return 1.0


class RecordingPlugin(LoopbackDuplexPlugin):
    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.threads = _Threads()
        self.turn_model = RecordingTurnModel(self.threads)

    def capabilities(self, *, max_sessions: int) -> Any:
        caps = super().capabilities(max_sessions=max_sessions)
        return dataclasses.replace(caps, supports_semantic_vad=True)

    def create_speech_classifier(self) -> RecordingClassifier:
        return RecordingClassifier(self.threads)

    def turn_completion_model(self) -> RecordingTurnModel:
        return self.turn_model

    def plan_response(self, state: Any, request: Any) -> dict[str, Any]:
        self.threads.note(self.threads.loop)
        return super().plan_response(state, request)


async def test_turn_detection_never_runs_on_the_orchestrator_loop() -> None:
    pipeline = dataclasses.replace(
        deployment(), duplex_plugin=f"{__name__}:{RecordingPlugin.__name__}"
    )
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session({"turn_detection": {"type": "semantic_vad"}})
        reader = EventReader(handle)
        await reader.until(lambda e: e.type == "session.created")
        for pcm in (bytes(6400), sine_pcm16(400), bytes(16000)):
            handle.submit(append(pcm))
        await reader.until(lambda e: e.type == "response.done")
        plugin = omni.engine.plugin  # type: ignore[attr-defined]
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
    threads = plugin.threads
    assert plugin.turn_model.calls >= 1  # the turn ended by the model's verdict
    assert threads.models and threads.loop
    assert not threads.models & threads.loop
