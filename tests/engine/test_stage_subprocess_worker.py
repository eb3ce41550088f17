"""The subprocess stage worker: same scheduling as the thread worker, crash isolation."""

from __future__ import annotations

import os
import signal

import pytest
from worker_events import WorkerEvents

from omniduplex.engine.stage import (
    AddRequest,
    StageInput,
    StageModelSpec,
    StageWorkerError,
    SubprocessStageWorker,
    UpdateRequest,
)


def make_worker(
    factory: str, events: WorkerEvents, max_batch: int = 4, generation: int = 0, **kwargs: object
) -> SubprocessStageWorker:
    spec = StageModelSpec(f"stage_models:{factory}", dict(kwargs))
    return SubprocessStageWorker(
        1, spec, max_batch=max_batch, on_event=events, generation=generation, name="p"
    )


def test_serves_batches_updates_and_isolates_model_errors():
    events = WorkerEvents()
    worker = make_worker("StepRecorder", events, max_batch=3, poison_word="poison")
    worker.start()
    try:
        worker.wait_ready(30)
        assert worker.alive and worker.pid != os.getpid()

        # Batching: four requests wait for each other, so steps of 3 then 1.
        for i in range(4):
            worker.submit(
                AddRequest(f"b{i}", StageInput({"text": str(i), "wait_for_peers": 4}, final=True))
            )
        events.wait_finished("b0", "b1", "b2", "b3")
        sizes = sorted(o.metrics.batch_size for o in events.outputs() if o.request_id[0] == "b")
        assert sizes == [1, 3, 3, 3]

        # A resumable request: one add, several updates, one request.
        worker.submit(AddRequest("s", StageInput({"text": "x"})))
        worker.submit(UpdateRequest("s", StageInput({"text": "y"})))
        worker.submit(UpdateRequest("s", StageInput({"text": "z"}, final=True)))
        events.wait_finished("s")
        assert [o.data["input_index"] for o in events.outputs("s")] == [0, 1, 2]
        assert events.outputs("s")[-1].data["updates"] == 2

        # A model exception fails only the poisoned request of the batch.
        for rid, text in (("ok1", "fine"), ("bad", "poison"), ("ok2", "fine")):
            worker.submit(
                AddRequest(rid, StageInput({"text": text, "wait_for_peers": 3}, final=True))
            )
        events.wait_finished("ok1", "bad", "ok2")
        assert "poisoned input in bad" in events.outputs("bad")[-1].error
        assert events.outputs("ok1")[-1].error is None
        assert events.outputs("ok2")[-1].error is None
        assert worker.alive
    finally:
        worker.stop()
    assert not worker.alive
    assert events.deaths() == []


def test_sigkill_reports_worker_died_with_requests_in_flight():
    events = WorkerEvents()
    worker = make_worker("HoldThenEchoDouble", events, generation=2)
    worker.start()
    try:
        worker.wait_ready(30)
        worker.submit(AddRequest("held", StageInput({"hold": True})))
        worker.submit(AddRequest("done", StageInput({"text": "x"}, final=True)))
        events.wait_for(lambda _: events.outputs("held") and events.finished("done"))
        os.kill(worker.pid, signal.SIGKILL)
        events.wait_for(lambda _: events.deaths())
    finally:
        worker.stop()
    (death,) = events.deaths()
    assert death.stage_index == 1 and death.worker_generation == 2
    assert death.request_ids_in_flight == ("held",)
    assert "killed by SIGKILL" in death.reason
    assert not worker.alive
    worker.submit(AddRequest("late", StageInput({"text": "x"})))  # dropped, no error


def test_constructor_os_exit_is_reported():
    events = WorkerEvents()
    worker = make_worker("ExitInConstructorDouble", events, code=7)
    worker.submit(AddRequest("queued", StageInput({"text": "x"})))
    worker.start()
    with pytest.raises(StageWorkerError, match="exited with code 7"):
        worker.wait_ready(30)
    events.wait_for(lambda _: events.deaths())
    (death,) = events.deaths()
    assert death.request_ids_in_flight == ("queued",)
    worker.stop()


def test_constructor_exception_is_reported_with_its_message():
    events = WorkerEvents()
    worker = make_worker("RaiseInConstructorDouble", events, message="no weights here")
    worker.start()
    with pytest.raises(StageWorkerError, match="FileNotFoundError: no weights here"):
        worker.wait_ready(30)
    worker.stop()


def test_paced_model_wakes_the_idle_child_by_itself():
    events = WorkerEvents()
    worker = make_worker("PacedTicker", events, interval_s=0.002)
    worker.start()
    try:
        worker.wait_ready(30)
        worker.submit(AddRequest("p", StageInput({"ticks": 3}, final=True)))
        events.wait_finished("p")
        assert [o.data["tick"] for o in events.outputs("p")] == [1, 2, 3]
    finally:
        worker.stop()
