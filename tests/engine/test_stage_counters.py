"""Stage model counters: reported by the scheduler after steps (rate-limited), kept
monotonic by the engine across worker restarts, and carried out of a child process."""

from __future__ import annotations

import pytest
from stage_models import StepRecorder
from worker_events import WorkerEvents

from omniduplex.engine.stage import (
    AddRequest,
    InProcessStageWorker,
    StageCounters,
    StageInput,
    StageModelSpec,
    StageScheduler,
    SubprocessStageWorker,
)
from omniduplex.engine.stage.counters import StageCounterBook
from omniduplex.engine.stage.scheduler import COUNTERS_EVERY_S


class CountingRecorder(StepRecorder):
    def counters(self) -> dict[str, float]:
        return {"steps": float(self.step_calls)}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_scheduler_reports_counters_after_a_step_at_most_every_interval() -> None:
    clock = FakeClock()
    reports: list[dict[str, float]] = []
    scheduler = StageScheduler(
        CountingRecorder(),
        stage_index=0,
        max_batch=4,
        emit=lambda outputs: None,
        clock=clock,
        report=reports.append,
    )
    for i in range(3):
        scheduler.handle(AddRequest(f"r{i}", StageInput({"text": "x"}, final=True)))
        assert scheduler.tick()
        clock.now += COUNTERS_EVERY_S / 4
    assert reports == [{"steps": 1.0}]  # the first step reports; the next two are too soon
    clock.now += COUNTERS_EVERY_S
    scheduler.handle(AddRequest("late", StageInput({"text": "x"}, final=True)))
    assert scheduler.tick()
    assert reports == [{"steps": 1.0}, {"steps": 4.0}]
    assert not scheduler.tick()  # nothing stepped: nothing reported
    assert len(reports) == 2


def test_counters_stay_monotonic_across_a_worker_restart() -> None:
    book = StageCounterBook()
    book.record(StageCounters(1, {"drops": 5.0, "steps": 10.0}, worker_generation=0))
    book.record(StageCounters(1, {"drops": 7.0, "steps": 12.0}, worker_generation=0))
    book.record(StageCounters(1, {"steps": 3.0}, worker_generation=1))  # restarted at 0
    book.record(StageCounters(1, {"drops": 99.0}, worker_generation=0))  # late, ignored
    assert book.totals({1: "pp"}) == {"pp": {"drops": 7.0, "steps": 15.0}}


@pytest.mark.parametrize("worker_cls", [InProcessStageWorker, SubprocessStageWorker])
def test_a_worker_reports_its_model_counters(worker_cls) -> None:
    events = WorkerEvents()
    spec = StageModelSpec("test_stage_counters:CountingRecorder", {})
    worker = worker_cls(0, spec, max_batch=4, on_event=events, generation=3, name="c")
    worker.start()
    try:
        worker.wait_ready(30)
        worker.submit(AddRequest("r", StageInput({"text": "x"}, final=True)))
        events.wait_for(lambda seen: any(isinstance(e, StageCounters) for e in seen))
    finally:
        worker.stop()
    (report,) = [e for e in events.events if isinstance(e, StageCounters)]
    assert report.stage_index == 0 and report.worker_generation == 3
    assert report.counters == {"steps": 1.0}
