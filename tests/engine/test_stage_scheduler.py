"""The per-stage scheduler, driven directly (no threads, no processes)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from stage_models import StepRecorder, UpperChunker

from omniduplex.engine.stage import (
    AbortRequest,
    AddRequest,
    StageInbox,
    StageInput,
    StageModel,
    StageOutput,
    StageScheduler,
    UpdateRequest,
    run_scheduler_loop,
)
from omniduplex.engine.stage.messages import StopWorker


class Collector:
    def __init__(self) -> None:
        self.outputs: list[StageOutput] = []

    def __call__(self, outputs: list[StageOutput]) -> None:
        self.outputs.extend(outputs)

    def for_request(self, request_id: str) -> list[StageOutput]:
        return [o for o in self.outputs if o.request_id == request_id]


def make(model: StageModel, max_batch: int = 8) -> tuple[StageScheduler, Collector]:
    sink = Collector()
    return StageScheduler(model, stage_index=3, max_batch=max_batch, emit=sink), sink


def add(scheduler: StageScheduler, rid: str, final: bool = True, **data: object) -> None:
    scheduler.handle(AddRequest(rid, StageInput(dict(data), final=final)))


def drain(scheduler: StageScheduler, limit: int = 100) -> int:
    ticks = 0
    while scheduler.tick():
        ticks += 1
        assert ticks < limit
    return ticks


def test_one_step_advances_every_ready_request_together():
    model = StepRecorder()
    scheduler, sink = make(model, max_batch=8)
    for i in range(5):
        add(scheduler, f"r{i}", text=str(i))
    assert drain(scheduler) == 1
    assert model.batch_sizes == [5]
    assert {o.metrics.worker_step for o in sink.outputs} == {1}
    assert all(o.metrics.batch_size == 5 and o.finished for o in sink.outputs)
    assert all(o.stage_index == 3 for o in sink.outputs)
    assert scheduler.in_flight == ()


def test_batches_are_bounded_and_fair():
    model = UpperChunker(chunk_size=1)
    scheduler, sink = make(model, max_batch=2)
    for i in range(5):
        add(scheduler, f"r{i}", text="abc")
    # Three steps cover every request once: the longest-waiting go first.
    for _ in range(3):
        scheduler.tick()
    assert {o.request_id for o in sink.outputs} == {f"r{i}" for i in range(5)}
    drain(scheduler)
    batch_sizes = {o.metrics.worker_step: o.metrics.batch_size for o in sink.outputs}
    assert max(batch_sizes.values()) == 2
    assert sum(batch_sizes.values()) == 15  # 5 requests x 3 chunks, all served
    assert all(len(sink.for_request(f"r{i}")) == 3 for i in range(5))


def test_resumable_request_takes_updates_and_stays_one_request():
    scheduler, sink = make(StepRecorder())
    add(scheduler, "s", final=False, text="a")
    drain(scheduler)
    for text in ("b", "c"):
        scheduler.handle(UpdateRequest("s", StageInput({"text": text})))
        drain(scheduler)
    assert scheduler.in_flight == ("s",)
    scheduler.handle(UpdateRequest("s", StageInput({"text": "d"}, final=True)))
    drain(scheduler)
    outs = sink.for_request("s")
    assert [o.data["text"] for o in outs] == ["a", "b", "c", "d"]
    assert [o.data["updates"] for o in outs] == [0, 1, 2, 3]
    assert [o.finished for o in outs] == [False, False, False, True]
    assert outs[-1].metrics.inputs_received == 4
    assert outs[-1].metrics.step_count == 4
    assert scheduler.in_flight == ()


def test_update_for_unknown_request_is_ignored():
    scheduler, sink = make(StepRecorder())
    scheduler.handle(UpdateRequest("ghost", StageInput({"text": "x"})))
    assert drain(scheduler) == 0
    assert sink.outputs == []


def test_step_error_fails_only_the_poisoned_request_of_a_batch():
    model = StepRecorder(poison_word="poison")
    scheduler, sink = make(model)
    for rid, text in (("a", "fine"), ("bad", "poison pill"), ("b", "also fine")):
        add(scheduler, rid, text=text)
    drain(scheduler)
    (failed,) = sink.for_request("bad")
    assert failed.finished and "poisoned input in bad" in failed.error
    assert [o.data["text"] for o in sink.for_request("a")] == ["fine"]
    assert [o.data["text"] for o in sink.for_request("b")] == ["also fine"]
    assert sink.for_request("a")[0].error is None
    # The failed batch of 3 was retried one request at a time.
    assert model.batch_sizes == [3, 1, 1, 1]
    assert model.observed.aborted == ["bad"]
    add(scheduler, "later", text="still serving")
    drain(scheduler)
    assert sink.for_request("later")[0].data["text"] == "still serving"


class FailingAddDouble(StepRecorder):
    """Test double: refuses requests whose text is 'refuse'."""

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        if inputs.data.get("text") == "refuse":
            raise ValueError("refused at add")
        super().add_request(request_id, inputs)


def test_add_error_fails_that_request_only():
    scheduler, sink = make(FailingAddDouble())
    add(scheduler, "x", text="refuse")
    add(scheduler, "y", text="ok")
    drain(scheduler)
    (failed,) = sink.for_request("x")
    assert failed.error == "ValueError: refused at add" and failed.finished
    assert sink.for_request("y")[0].data["text"] == "ok"


def test_duplicate_add_fails_the_request():
    model = StepRecorder()
    scheduler, sink = make(model)
    add(scheduler, "dup", final=False, text="a")
    add(scheduler, "dup", final=False, text="b")
    (failed,) = sink.for_request("dup")
    assert "already open" in failed.error
    assert scheduler.in_flight == ()
    assert model.observed.aborted == ["dup"]


def test_abort_drops_the_request_silently():
    model = StepRecorder()
    scheduler, sink = make(model)
    add(scheduler, "a", final=False, text="x")
    scheduler.handle(AbortRequest("a"))
    scheduler.handle(AbortRequest("never-added"))
    assert drain(scheduler) == 0
    assert sink.outputs == []
    assert model.observed.aborted == ["a"]


class StrayOutputDouble(StepRecorder):
    """Test double: also emits an output for a request it was never given."""

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        return [*super().step(request_ids), self.output("stray", {"x": 1})]


def test_outputs_for_unknown_requests_are_dropped():
    scheduler, sink = make(StrayOutputDouble())
    add(scheduler, "a", text="x")
    drain(scheduler)
    assert [o.request_id for o in sink.outputs] == ["a"]


def test_max_batch_must_be_positive():
    with pytest.raises(ValueError, match="max_batch"):
        make(StepRecorder(), max_batch=0)


class ScriptedInboxDouble(StageInbox):
    """Test double: hands out scripted message batches and records how it was asked."""

    def __init__(self, *batches: list[object]) -> None:
        self.batches = list(batches)
        self.calls: list[tuple[bool, float | None]] = []

    def get_many(self, *, block: bool, timeout: float | None = None) -> list[object]:
        self.calls.append((block, timeout))
        return self.batches.pop(0) if self.batches else [StopWorker()]


class WakeDouble(StepRecorder):
    """Test double: reports a fixed paced wake-up while it holds requests."""

    def wake_after_s(self) -> float | None:
        return 0.25 if self._requests else None


def test_loop_blocks_only_when_idle_and_only_until_the_paced_wake_up():
    model = WakeDouble()
    scheduler, sink = make(model)
    held = AddRequest("h", StageInput({"text": "x", "wait_for_peers": 2}, final=True))
    inbox = ScriptedInboxDouble([AddRequest("a", StageInput({"text": "a"}, final=True))], [held])
    run_scheduler_loop(scheduler, inbox)
    # Idle and empty: block without limit. "a" stepped. Idle again with "h" waiting for
    # a peer that never comes: block, but only until the model's wake-up.
    assert inbox.calls == [(True, None), (True, None), (True, 0.25)]
    assert [o.request_id for o in sink.outputs] == ["a"]


def test_loop_does_not_block_while_requests_are_ready():
    scheduler, _ = make(UpperChunker(chunk_size=1))
    inbox = ScriptedInboxDouble([AddRequest("a", StageInput({"text": "abc"}, final=True))])
    run_scheduler_loop(scheduler, inbox)
    assert inbox.calls[0] == (True, None)
    assert inbox.calls[1] == (False, None)  # "a" still has chunks: poll, do not wait
