"""A subprocess stage that dies: its requests fail, the worker restarts, service goes on.

Policy under test: the engine replaces a dead worker in place (a new process, a new
model) up to the stage's ``max_restarts``; after that the engine is dead.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

from omniduplex.config import PipelineConfig, StageConfig
from omniduplex.engine.async_omni_engine import AsyncOmniEngine
from omniduplex.engine.errors import EngineDeadError, EngineStartupError, RequestFailedError
from omniduplex.engine.orchestrator import Orchestrator
from omniduplex.engine.stage import StageModelSpec, WorkerDied
from omniduplex.entrypoints.async_omni import AsyncOmni

TIMEOUT_S = 30.0


class RecordingOrchestrator(Orchestrator):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deaths: list[WorkerDied] = []
        self.finished: list[str] = []

    def _on_worker_died(self, event: WorkerDied) -> None:
        self.deaths.append(event)
        super()._on_worker_died(event)

    def _on_request_finished(self, request_id: str) -> None:
        self.finished.append(request_id)


class RecordingEngine(AsyncOmniEngine):
    orchestrator: RecordingOrchestrator

    def _create_orchestrator(self, **kwargs: Any) -> RecordingOrchestrator:
        self.orchestrator = RecordingOrchestrator(**kwargs)
        return self.orchestrator


class RecordingOmni(AsyncOmni):
    def _create_engine(self, **kwargs: Any) -> RecordingEngine:
        return RecordingEngine(**kwargs)


def hold_pipeline(max_restarts: int) -> PipelineConfig:
    spec = StageModelSpec("stage_models:HoldThenEchoDouble")
    return PipelineConfig(
        name="death",
        stages=[StageConfig("proc", spec, worker="process", max_restarts=max_restarts)],
    )


async def first_output(stream):
    return await asyncio.wait_for(anext(stream), TIMEOUT_S)


async def test_dead_worker_fails_in_flight_requests_then_restarts_then_gives_up():
    async with RecordingOmni(hold_pipeline(max_restarts=1)) as omni:
        engine = omni.engine
        first_pid = engine.stages[0].worker.pid

        # SIGKILL while a request is in flight.
        held = omni.generate({"hold": True}, request_id="held")
        assert (await first_output(held)).data["held_by"] == [0]
        os.kill(first_pid, signal.SIGKILL)
        with pytest.raises(RequestFailedError) as failure:
            await first_output(held)
        assert failure.value.request_id == "held"
        assert "stage 0 (proc) worker died" in failure.value.error
        assert "killed by SIGKILL" in failure.value.error
        (death,) = engine.orchestrator.deaths
        assert death.request_ids_in_flight == ("held",) and death.worker_generation == 0
        assert "held" in engine.orchestrator.finished

        # The same engine serves new requests on a replacement process.
        outs = [o async for o in omni.generate({"text": "after restart"})]
        assert outs[-1].data == {"text": "after restart"} and outs[-1].finished
        assert engine.stages[0].worker.pid != first_pid
        assert engine.stages[0].generation == 1

        # os._exit inside step; the restart budget (1) is spent now.
        with pytest.raises(RequestFailedError, match="exited with code 3"):
            await first_output(omni.generate({"exit": 3}))
        assert len(engine.orchestrator.deaths) == 2
        with pytest.raises(EngineDeadError, match="restart budget"):
            await first_output(omni.generate({"text": "too late"}))
        assert not engine.alive


async def test_stage_that_cannot_start_fails_engine_start_cleanly():
    spec = StageModelSpec("stage_models:ExitInConstructorDouble", {"code": 5})
    config = PipelineConfig(name="broken", stages=[StageConfig("broken", spec, worker="process")])
    omni = AsyncOmni(config)
    with pytest.raises(EngineStartupError, match=r"stage 0 \(broken\).*exited with code 5"):
        await omni.start()
    assert not omni.engine.running
    await omni.shutdown()
