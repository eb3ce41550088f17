"""The seam between the orchestrator and wherever a stage model runs."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from .messages import StageRequestMessage, WorkerEvent

# Called from the worker's own thread (never the orchestrator loop): the receiver must
# only hand the event over, e.g. with ``loop.call_soon_threadsafe``.
WorkerEventCallback = Callable[[WorkerEvent], None]


class StageWorkerError(RuntimeError):
    """A stage worker could not start, or was used after it stopped."""


class StartupGate:
    """Whether a worker's model came up: settled once, with the reason if it never will."""

    def __init__(self) -> None:
        self._settled = threading.Event()
        self.error: str | None = None

    @property
    def settled(self) -> bool:
        return self._settled.is_set()

    def open(self) -> None:
        self._settled.set()

    def fail(self, reason: str) -> None:
        if not self._settled.is_set():
            self.error = reason
            self._settled.set()

    def wait(self, name: str, timeout: float | None) -> None:
        """Block until settled; raise ``StageWorkerError`` if it failed or took too long."""
        if not self._settled.wait(timeout):
            raise StageWorkerError(f"{name}: model not ready after {timeout} s")
        if self.error is not None:
            raise StageWorkerError(f"{name}: {self.error}")


class StageWorker(ABC):
    """Runs one stage model and its scheduler somewhere (a thread, a process, a node).

    Only plain picklable messages go in (``submit``) and come out (the event callback
    given at construction: ``StageOutput`` and ``WorkerDied``), so an implementation may
    live across any boundary. ``start`` only launches; ``wait_ready`` reports whether the
    model came up. Messages submitted before the model is ready are kept and served in
    order once it is.
    """

    stage_index: int
    generation: int

    @abstractmethod
    def start(self) -> None:
        """Launch the worker without waiting for its model to be built."""

    @abstractmethod
    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until the model is built; raise ``StageWorkerError`` if it never will be."""

    @abstractmethod
    def submit(self, message: StageRequestMessage) -> None:
        """Queue a message for the scheduler; never blocks on the model."""

    @abstractmethod
    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and release the model. Idempotent; no ``WorkerDied`` follows."""

    @property
    @abstractmethod
    def alive(self) -> bool:
        """Started, not stopped, and not dead."""
