"""The per-stage scheduler: apply inbox messages, step ready requests in batches.

It knows nothing about threads or processes. A worker owns one scheduler and one inbox
and runs ``run_scheduler_loop`` on whatever thread (or child process) it uses, so the
in-process and subprocess workers share every scheduling rule.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from .messages import (
    AbortRequest,
    AddRequest,
    StageMetrics,
    StageOutput,
    StopWorker,
    UpdateRequest,
)
from .model import StageModel

log = logging.getLogger(__name__)

OutputEmitter = Callable[[list[StageOutput]], None]
# Receives the model's counters (``StageModel.counters``) after a step, rate-limited.
CounterReporter = Callable[[dict[str, float]], None]
#: The most often a worker reports its model's counters (seconds).
COUNTERS_EVERY_S = 0.5


class StageInbox(ABC):
    """Where a worker's messages wait for its scheduler."""

    @abstractmethod
    def get_many(self, *, block: bool, timeout: float | None = None) -> list[object]:
        """Every message queued so far.

        ``block=True`` waits until there is one, or at most ``timeout`` seconds when it
        is set (then the result may be empty).
        """


@dataclass(slots=True)
class _RequestBook:
    inputs_received: int = 1
    step_count: int = 0
    total_compute_s: float = 0.0
    # Worker step that last advanced this request; oldest first keeps batching fair.
    last_step: int = -1


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class StageScheduler:
    """Drives one ``StageModel``; every method runs on the worker's single thread."""

    def __init__(
        self,
        model: StageModel,
        *,
        stage_index: int,
        max_batch: int,
        emit: OutputEmitter,
        clock: Callable[[], float] = time.perf_counter,
        report: CounterReporter | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.model = model
        self.stage_index = stage_index
        self.max_batch = max_batch
        self._emit = emit
        self._clock = clock
        self._books: dict[str, _RequestBook] = {}
        self.worker_step = 0
        self._report = report
        self._reported_at: float | None = None
        model.stage_index = stage_index

    @property
    def in_flight(self) -> tuple[str, ...]:
        """Requests the model holds: added, not yet finished, failed or aborted."""
        return tuple(self._books)

    # ---- inbox messages -------------------------------------------------------------

    def handle(self, message: object) -> None:
        if isinstance(message, AddRequest):
            self._add(message)
        elif isinstance(message, UpdateRequest):
            self._update(message)
        elif isinstance(message, AbortRequest):
            self._abort(message.request_id)
        else:
            log.error("stage %d: ignoring unknown message %r", self.stage_index, message)

    def _add(self, message: AddRequest) -> None:
        rid = message.request_id
        if rid in self._books:
            # The orchestrator decides add vs update; a second add means it lost track,
            # so neither copy can be trusted.
            self._fail(rid, f"request {rid!r} is already open on stage {self.stage_index}")
            return
        try:
            self.model.add_request(rid, message.inputs)
        except Exception as exc:
            log.warning("stage %d: add_request(%s) failed: %s", self.stage_index, rid, exc)
            self._fail(rid, _describe(exc))
            return
        self._books[rid] = _RequestBook()

    def _update(self, message: UpdateRequest) -> None:
        book = self._books.get(message.request_id)
        if book is None:
            # Normal after an abort or a finish that crossed this update in flight.
            log.debug("stage %d: update for unknown %s", self.stage_index, message.request_id)
            return
        book.inputs_received += 1
        try:
            self.model.update_request(message.request_id, message.inputs)
        except Exception as exc:
            log.warning(
                "stage %d: update_request(%s) failed: %s", self.stage_index, message.request_id, exc
            )
            self._fail(message.request_id, _describe(exc))

    def _abort(self, request_id: str) -> None:
        if self._books.pop(request_id, None) is None:
            return
        try:
            self.model.abort(request_id)
        except Exception:
            log.exception("stage %d: abort(%s) raised", self.stage_index, request_id)

    def _fail(self, request_id: str, error: str) -> None:
        book = self._books.pop(request_id, _RequestBook())
        try:
            self.model.abort(request_id)
        except Exception:
            log.debug("stage %d: abort(%s) after failure raised", self.stage_index, request_id)
        self._emit(
            [
                StageOutput(
                    request_id=request_id,
                    stage_index=self.stage_index,
                    data={},
                    finished=True,
                    error=error,
                    metrics=self._metrics(book, batch_size=0, compute_s=0.0),
                )
            ]
        )

    # ---- stepping -------------------------------------------------------------------

    def ready_batch(self) -> list[str]:
        """The requests the next step advances: at most ``max_batch``, longest-waiting first."""
        ready = [rid for rid in self.model.ready_request_ids() if rid in self._books]
        if len(ready) > self.max_batch:
            ready.sort(key=lambda rid: self._books[rid].last_step)
            del ready[self.max_batch :]
        return ready

    def has_ready(self) -> bool:
        return any(rid in self._books for rid in self.model.ready_request_ids())

    def idle_timeout(self) -> float | None:
        """How long an idle loop may sleep: until the model's next paced wake-up."""
        wake = self.model.wake_after_s()
        return None if wake is None else max(0.0, wake)

    def tick(self) -> bool:
        """Run one step over the ready requests; False when none was ready."""
        batch = self.ready_batch()
        if not batch:
            return False
        self._step(batch)
        self._report_counters()
        return True

    def _report_counters(self) -> None:
        if self._report is None:
            return
        now = self._clock()
        if self._reported_at is not None and now - self._reported_at < COUNTERS_EVERY_S:
            return
        self._reported_at = now
        try:
            counters = self.model.counters()
        except Exception:
            log.exception("stage %d: counters() raised", self.stage_index)
            return
        if counters:
            self._report(counters)

    def _step(self, batch: Sequence[str]) -> None:
        self.worker_step += 1
        started = self._clock()
        try:
            outputs = self.model.step(list(batch))
        except Exception as exc:
            if len(batch) == 1:
                log.warning("stage %d: step failed for %s: %s", self.stage_index, batch[0], exc)
                self._fail(batch[0], _describe(exc))
                return
            # Which request broke the batch is unknown: isolate by stepping each alone,
            # so one poisoned request does not fail the sessions sharing its batch.
            log.warning(
                "stage %d: step of %d requests failed (%s); retrying one by one",
                self.stage_index,
                len(batch),
                exc,
            )
            for rid in batch:
                if rid in self._books:
                    self._step([rid])
            return
        compute_s = self._clock() - started
        for rid in batch:
            book = self._books.get(rid)
            if book is not None:
                book.step_count += 1
                book.total_compute_s += compute_s
                book.last_step = self.worker_step
        stamped: list[StageOutput] = []
        for output in outputs:
            book = self._books.get(output.request_id)
            if book is None:
                log.warning(
                    "stage %d: model emitted output for unknown request %s",
                    self.stage_index,
                    output.request_id,
                )
                continue
            finished = output.finished or output.error is not None
            stamped.append(
                replace(
                    output,
                    stage_index=self.stage_index,
                    finished=finished,
                    metrics=self._metrics(book, batch_size=len(batch), compute_s=compute_s),
                )
            )
            if finished:
                del self._books[output.request_id]
        if stamped:
            self._emit(stamped)

    def _metrics(self, book: _RequestBook, *, batch_size: int, compute_s: float) -> StageMetrics:
        return StageMetrics(
            step_count=book.step_count,
            batch_size=batch_size,
            compute_s=compute_s,
            total_compute_s=book.total_compute_s,
            worker_step=self.worker_step,
            inputs_received=book.inputs_received,
        )


def run_scheduler_loop(scheduler: StageScheduler, inbox: StageInbox) -> None:
    """Serve until a ``StopWorker`` message: drain the inbox, then step what is ready.

    Blocks on the inbox only while nothing is ready (and at most until the model's next
    paced wake-up), so an idle stage sleeps and a busy one still picks up new requests
    between steps (they join the next batch).
    """
    while True:
        if scheduler.has_ready():
            messages = inbox.get_many(block=False)
        else:
            messages = inbox.get_many(block=True, timeout=scheduler.idle_timeout())
        for message in messages:
            if isinstance(message, StopWorker):
                return
            scheduler.handle(message)
        scheduler.tick()
