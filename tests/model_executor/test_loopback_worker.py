"""The loopback deploy files, and the model served by the real in-process stage worker."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from omniduplex.config import load_deploy_config
from omniduplex.engine.duplex.plugin import load_duplex_plugin
from omniduplex.engine.duplex.runtime_config import DuplexSessionRuntimeConfig
from omniduplex.engine.stage import (
    AbortRequest,
    AddRequest,
    InProcessStageWorker,
    StageInput,
    StageOutput,
    StageWorker,
    SubprocessStageWorker,
    WorkerEvent,
)
from omniduplex.model_executor.models.loopback import LoopbackStageModel

# Generous: only a hung worker should ever reach it (no test asserts on elapsed time).
EVENT_TIMEOUT_S = 30.0


def tone(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * 16_000)) / 16_000
    return (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)


def add(request_id: str, seconds: float) -> AddRequest:
    data = {"audio": tone(seconds), "response_id": f"resp-{request_id}"}
    return AddRequest(request_id, StageInput(data=data))


def start_worker(
    deploy: str,
    *messages: AddRequest,
    worker_cls: type[InProcessStageWorker | SubprocessStageWorker] = InProcessStageWorker,
) -> tuple[StageWorker, queue.Queue[WorkerEvent]]:
    """A worker for the deploy file's stage; ``messages`` are queued before it starts,
    so its first step sees all of them."""
    stage = load_deploy_config(deploy).stages[0]
    events: queue.Queue[WorkerEvent] = queue.Queue()
    worker = worker_cls(0, stage.model, max_batch=stage.max_batch, on_event=events.put)
    for message in messages:
        worker.submit(message)
    worker.start()
    worker.wait_ready(EVENT_TIMEOUT_S)
    return worker, events


def collect(events: queue.Queue[WorkerEvent], request_ids: set[str]) -> list[StageOutput]:
    """Outputs until every one of ``request_ids`` has finished."""
    outputs: list[StageOutput] = []
    open_ids = set(request_ids)
    while open_ids:
        event = events.get(timeout=EVENT_TIMEOUT_S)
        assert isinstance(event, StageOutput), event
        assert event.error is None, event.error
        outputs.append(event)
        if event.finished:
            open_ids.discard(event.request_id)
    return outputs


@pytest.mark.parametrize(("name", "realtime"), [("loopback", True), ("loopback-fast", False)])
def test_deploy_files(name: str, realtime: bool) -> None:
    config = load_deploy_config(name)
    assert config.session_mode == "duplex"
    assert config.served_model_name == "loopback"
    session = DuplexSessionRuntimeConfig.from_mapping(config.duplex_session)
    assert (session.max_sessions, session.idle_ttl_s, session.disconnect_grace_s) == (64, 300, 30)
    (stage,) = config.stages
    assert stage.worker == "thread"
    model = stage.model.build()
    assert isinstance(model, LoopbackStageModel)
    assert model.options.realtime is realtime
    plugin = load_duplex_plugin(config.duplex_plugin or "")
    assert plugin.capabilities(max_sessions=64).chunk_period_ms == model.options.unit_ms


@pytest.mark.parametrize("worker_cls", [InProcessStageWorker, SubprocessStageWorker])
def test_fast_worker_batches_sessions_in_one_step(
    worker_cls: type[InProcessStageWorker | SubprocessStageWorker],
) -> None:
    worker, events = start_worker(
        "loopback-fast", add("a", 0.5), add("b", 0.3), add("c", 0.3), worker_cls=worker_cls
    )
    try:
        outputs = collect(events, {"a", "b", "c"})
    finally:
        worker.stop()
    per_request = {rid: [o for o in outputs if o.request_id == rid] for rid in "abc"}
    assert [len(per_request[rid]) for rid in "abc"] == [5, 3, 3]
    assert all(o.data["end_of_turn"] == o.finished for o in outputs)
    # All three were queued before the first step, so the first three steps carry them all.
    first_step = [o for o in outputs if o.metrics.worker_step == 1]
    assert sorted(o.request_id for o in first_step) == ["a", "b", "c"]
    assert {o.metrics.batch_size for o in first_step} == {3}
    assert outputs[0].data["audio"].dtype == np.float32  # arrays survive the process hop
    if isinstance(worker, InProcessStageWorker):
        assert isinstance(worker.model, LoopbackStageModel)
        assert worker.model.stats.max_batch_size == 3


def test_worker_abort_drops_the_request() -> None:
    worker, events = start_worker(
        "loopback-fast", AddRequest("a", StageInput(data={"audio": tone(0.2)})), add("b", 0.3)
    )
    try:
        # "a" never gets its response_id, so it only waits; abort it and serve "b".
        worker.submit(AbortRequest("a"))
        outputs = collect(events, {"b"})
    finally:
        worker.stop()
    assert {o.request_id for o in outputs} == {"b"}
    assert events.empty()


def test_realtime_worker_delivers_every_unit() -> None:
    # Paced at 100 ms a unit; this only checks that the pacing never stalls the worker.
    worker, events = start_worker("loopback", add("a", 0.3), add("b", 0.2))
    try:
        outputs = collect(events, {"a", "b"})
    finally:
        worker.stop()
    assert [o.data["unit_index"] for o in outputs if o.request_id == "a"] == [0, 1, 2]
    assert [o.data["unit_index"] for o in outputs if o.request_id == "b"] == [0, 1]
