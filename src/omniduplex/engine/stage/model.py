"""The model a stage runs: per-request state, advanced in batches."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from .messages import StageInput, StageOutput


class StageModel(ABC):
    """A stage's model, driven by exactly one scheduler thread.

    Contract with the scheduler:

    * ``add_request`` opens a request; ``update_request`` feeds more input to an open one
      (a resumable streaming request receives one update per input unit and stays the
      same request until an input with ``final=True`` has been consumed, or it is
      aborted).
    * Readiness changes inside these calls and ``step``, or with time for a paced model:
      while ``ready_request_ids()`` is empty the scheduler sleeps until a message arrives
      or ``wake_after_s()`` has passed.
    * ``step`` advances every given request in one call (one batched forward pass) and
      returns their outputs. A request whose output is ``finished`` (or carries
      ``error``) is over: the model must already have dropped its state.
    * If ``step`` raises, the scheduler assumes no request was advanced and retries the
      batch one request at a time, so only the requests that fail on their own are
      failed. A model that cannot promise that should catch per-request problems itself
      and return ``StageOutput(error=...)`` for the culprit.
    """

    # Stamped by the scheduler before the first call, so ``output()`` can fill it in.
    stage_index: int = -1
    # Standalone tasks a request addressed to this stage alone may ask for (``tasks.py``
    # holds each one's data contract).
    tasks: ClassVar[frozenset[str]] = frozenset()

    @abstractmethod
    def add_request(self, request_id: str, inputs: StageInput) -> None: ...

    @abstractmethod
    def update_request(self, request_id: str, inputs: StageInput) -> None: ...

    @abstractmethod
    def abort(self, request_id: str) -> None:
        """Drop a request's state; it must never appear in outputs afterwards."""

    @abstractmethod
    def ready_request_ids(self) -> list[str]:
        """Requests that ``step`` can advance now, in the model's preferred order."""

    @abstractmethod
    def step(self, request_ids: Sequence[str]) -> list[StageOutput]: ...

    def wake_after_s(self) -> float | None:
        """Seconds until some request becomes ready by time alone; None if none will.

        Asked only when nothing is ready. A paced model (one unit per 80 ms, say)
        returns the time to its next due unit, so the idle scheduler wakes for it.
        """
        return None

    def counters(self) -> dict[str, float]:
        """Cumulative counts worth exporting (``/metrics``), by snake_case name.

        Each value only grows while the model lives. Default: none.
        """
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook, most models hold nothing
        """Release resources when the worker stops. Default: nothing to release."""

    def output(
        self,
        request_id: str,
        data: dict[str, Any],
        *,
        finished: bool = False,
        error: str | None = None,
        to_owner: bool = False,
    ) -> StageOutput:
        """Build an output for ``request_id``; the scheduler fills in the metrics."""
        return StageOutput(
            request_id=request_id,
            stage_index=self.stage_index,
            data=data,
            finished=finished or error is not None,
            error=error,
            to_owner=to_owner,
        )
