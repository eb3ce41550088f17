"""The thread-based stage worker."""

from __future__ import annotations

import pytest
from worker_events import WorkerEvents

from omniduplex.engine.stage import (
    AbortRequest,
    AddRequest,
    InProcessStageWorker,
    StageInput,
    StageModelSpec,
    StageWorkerError,
    UpdateRequest,
)


def make_worker(factory: str, events: WorkerEvents, max_batch: int = 4, **kwargs: object):
    spec = StageModelSpec(f"stage_models:{factory}", dict(kwargs))
    return InProcessStageWorker(0, spec, max_batch=max_batch, on_event=events, name="t")


def test_serves_streams_and_batches_on_its_thread():
    events = WorkerEvents()
    worker = make_worker("StepRecorder", events, max_batch=3)
    # Submitted before start: kept and served once the model is up.
    for i in range(4):
        worker.submit(
            AddRequest(f"r{i}", StageInput({"text": str(i), "wait_for_peers": 4}, final=True))
        )
    worker.start()
    worker.wait_ready(5)
    assert worker.alive
    events.wait_finished("r0", "r1", "r2", "r3")
    assert worker.model.batch_sizes == [3, 1]
    assert max(o.metrics.batch_size for o in events.outputs()) == 3
    worker.stop()
    assert not worker.alive
    assert events.deaths() == []


def test_resumable_updates_and_abort():
    events = WorkerEvents()
    worker = make_worker("StepRecorder", events)
    worker.start()
    worker.wait_ready(5)
    worker.submit(AddRequest("s", StageInput({"text": "a"})))
    worker.submit(UpdateRequest("s", StageInput({"text": "b"})))
    worker.submit(UpdateRequest("s", StageInput({"text": "c"}, final=True)))
    worker.submit(AddRequest("gone", StageInput({"text": "x", "wait_for_peers": 99})))
    worker.submit(AbortRequest("gone"))
    events.wait_finished("s")
    assert [o.data["text"] for o in events.outputs("s")] == ["a", "b", "c"]
    assert worker.model.observed.wait_aborted("gone")
    assert events.outputs("gone") == []
    worker.stop()


def test_model_error_fails_the_request_and_the_worker_keeps_serving():
    events = WorkerEvents()
    worker = make_worker("UpperChunker", events, poison_word="poison")
    worker.start()
    worker.wait_ready(5)
    worker.submit(AddRequest("bad", StageInput({"text": "poison"}, final=True)))
    worker.submit(AddRequest("good", StageInput({"text": "fine"}, final=True)))
    events.wait_finished("bad", "good")
    assert "poisoned" in events.outputs("bad")[-1].error
    assert events.outputs("good")[-1].data == {"text": "FINE"}
    assert worker.alive
    worker.stop()


def test_constructor_failure_is_reported():
    events = WorkerEvents()
    worker = make_worker("RaiseInConstructorDouble", events, message="no weights here")
    worker.start()
    with pytest.raises(StageWorkerError, match="no weights here"):
        worker.wait_ready(5)
    (death,) = events.deaths()
    assert "model construction failed" in death.reason
    assert death.request_ids_in_flight == ()
    worker.stop()


def test_scheduler_crash_is_reported_as_worker_death():
    events = WorkerEvents()
    worker = make_worker("BrokenReadinessDouble", events)
    worker.start()
    worker.wait_ready(5)
    worker.submit(AddRequest("a", StageInput({"text": "x"})))
    events.wait_for(lambda _: events.deaths())
    (death,) = events.deaths()
    assert death.request_ids_in_flight == ("a",)
    assert "scheduler crashed: RuntimeError: readiness bookkeeping is corrupt" in death.reason
    assert not worker.alive
    worker.stop()


def test_paced_model_wakes_the_idle_worker_by_itself():
    events = WorkerEvents()
    worker = make_worker("PacedTicker", events, interval_s=0.002)
    worker.start()
    worker.wait_ready(5)
    worker.submit(AddRequest("p", StageInput({"ticks": 3}, final=True)))
    # No message follows: only the model's wake_after_s can get ticks 2 and 3 out.
    events.wait_finished("p")
    assert [o.data["tick"] for o in events.outputs("p")] == [1, 2, 3]
    worker.stop()
