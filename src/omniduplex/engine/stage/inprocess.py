"""A stage worker on a thread of the engine process."""

from __future__ import annotations

import logging
import threading
from collections import deque

from .messages import StageCounters, StageOutput, StageRequestMessage, StopWorker, WorkerDied
from .model import StageModel
from .scheduler import StageInbox, StageScheduler, run_scheduler_loop
from .spec import StageModelSpec
from .worker import StageWorker, StageWorkerError, StartupGate, WorkerEventCallback

log = logging.getLogger(__name__)


class _ThreadInbox(StageInbox):
    def __init__(self) -> None:
        self._items: deque[object] = deque()
        self._cond = threading.Condition()

    def put(self, message: object) -> None:
        with self._cond:
            self._items.append(message)
            self._cond.notify()

    def get_many(self, *, block: bool, timeout: float | None = None) -> list[object]:
        with self._cond:
            if block:
                self._cond.wait_for(lambda: bool(self._items), timeout)
            items = list(self._items)
            self._items.clear()
        return items


class InProcessStageWorker(StageWorker):
    """Builds the model on its own thread and runs the scheduler loop there.

    No crash isolation: a model that kills the process kills the engine. A model that
    raises only fails its requests (see ``StageScheduler``).
    """

    def __init__(
        self,
        stage_index: int,
        spec: StageModelSpec,
        *,
        max_batch: int,
        on_event: WorkerEventCallback,
        generation: int = 0,
        name: str | None = None,
    ) -> None:
        self.stage_index = stage_index
        self.generation = generation
        self.spec = spec
        self.max_batch = max_batch
        self.name = name or f"stage-{stage_index}"
        self._on_event = on_event
        self._inbox = _ThreadInbox()
        self._thread: threading.Thread | None = None
        self._model: StageModel | None = None
        self._scheduler: StageScheduler | None = None
        self._startup = StartupGate()
        self._stopping = False
        self._dead = False

    @property
    def model(self) -> StageModel | None:
        """The live model (for introspection; only the worker thread may call it)."""
        return self._model

    @property
    def alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopping and not self._dead

    def start(self) -> None:
        if self._thread is not None:
            raise StageWorkerError(f"{self.name}: already started")
        self._thread = threading.Thread(
            target=self._run, name=f"omni-{self.name}-g{self.generation}", daemon=True
        )
        self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> None:
        if self._thread is None:
            raise StageWorkerError(f"{self.name}: not started")
        self._startup.wait(self.name, timeout)

    def submit(self, message: StageRequestMessage) -> None:
        if self._dead or self._stopping:
            # The orchestrator fails what it routed here when it handles WorkerDied.
            log.debug("%s: dropping %r, worker is not serving", self.name, message)
            return
        self._inbox.put(message)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._inbox.put(StopWorker())
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("%s: thread still busy after %.1f s; leaving it", self.name, timeout)

    # ---- worker thread --------------------------------------------------------------

    def _run(self) -> None:
        try:
            model = self.spec.build()
        except BaseException as exc:
            reason = f"model construction failed: {type(exc).__name__}: {exc}"
            log.exception("%s: %s", self.name, reason)
            self._startup.fail(reason)
            self._die((), reason)
            return
        scheduler = StageScheduler(
            model,
            stage_index=self.stage_index,
            max_batch=self.max_batch,
            emit=self._emit,
            report=self._report,
        )
        self._model, self._scheduler = model, scheduler
        self._startup.open()
        try:
            run_scheduler_loop(scheduler, self._inbox)
        except BaseException as exc:
            log.exception("%s: scheduler loop crashed", self.name)
            self._die(scheduler.in_flight, f"scheduler crashed: {type(exc).__name__}: {exc}")
        finally:
            try:
                model.close()
            except Exception:
                log.exception("%s: model.close() raised", self.name)

    def _emit(self, outputs: list[StageOutput]) -> None:
        for output in outputs:
            self._on_event(output)

    def _report(self, counters: dict[str, float]) -> None:
        self._on_event(StageCounters(self.stage_index, counters, self.generation))

    def _die(self, in_flight: tuple[str, ...], reason: str) -> None:
        self._dead = True
        if self._stopping:
            return
        self._on_event(
            WorkerDied(
                stage_index=self.stage_index,
                request_ids_in_flight=tuple(in_flight),
                reason=reason,
                worker_generation=self.generation,
            )
        )
