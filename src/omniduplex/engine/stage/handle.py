"""One stage slot of a running pipeline: its current worker and its restart budget."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .messages import StageRequestMessage
from .worker import StageWorker

log = logging.getLogger(__name__)

# Builds the worker of one generation; generation 0 is the first, each restart adds 1.
WorkerFactory = Callable[[int], StageWorker]


class StageHandle:
    """What the orchestrator holds for a stage.

    A worker that dies is replaced by a fresh one (a new model, so no request survives
    the restart) until ``max_restarts`` replacements have been used; after that the stage
    is unavailable for good.
    """

    def __init__(
        self,
        index: int,
        name: str,
        worker_factory: WorkerFactory,
        *,
        max_restarts: int = 0,
    ) -> None:
        self.index = index
        self.name = name
        self.max_restarts = max_restarts
        self.restarts = 0
        self.available = True
        self._factory = worker_factory
        self._worker: StageWorker | None = None

    @property
    def worker(self) -> StageWorker:
        if self._worker is None:
            raise RuntimeError(f"stage {self.index} ({self.name}) has not been started")
        return self._worker

    @property
    def generation(self) -> int:
        return self.worker.generation

    @property
    def can_restart(self) -> bool:
        """Whether a death of the current worker would be met by a restart."""
        return self.available and self.restarts < self.max_restarts

    def start(self) -> None:
        """Launch generation 0 without waiting for its model (see ``wait_ready``)."""
        self._worker = self._factory(0)
        self._worker.start()

    def wait_ready(self, timeout: float | None = None) -> None:
        self.worker.wait_ready(timeout)

    def submit(self, message: StageRequestMessage) -> None:
        self.worker.submit(message)

    def restart(self) -> bool:
        """Replace a dead worker; False (and unavailable) once the budget is spent.

        Does not wait for the new model: messages submitted meanwhile are queued, and a
        new worker that fails to come up is reported as another death.
        """
        old = self._worker
        if old is not None:
            old.stop(timeout=1.0)
        if self.restarts >= self.max_restarts:
            self.available = False
            return False
        self.restarts += 1
        generation = 0 if old is None else old.generation + 1
        log.warning(
            "restarting stage %d (%s): generation %d, restart %d of %d",
            self.index,
            self.name,
            generation,
            self.restarts,
            self.max_restarts,
        )
        self._worker = self._factory(generation)
        self._worker.start()
        return True

    def stop(self, timeout: float = 5.0) -> None:
        self.available = False
        if self._worker is not None:
            self._worker.stop(timeout)
