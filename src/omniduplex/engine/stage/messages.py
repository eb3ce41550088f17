"""Plain, picklable messages between the orchestrator and a stage worker.

Everything here crosses a process boundary (and later a Ray actor boundary), so the types
are frozen dataclasses of plain data: no callbacks, locks or shared objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class StageInput:
    """One piece of input for a stage request.

    ``final`` closes the request's input: no update follows, so the model may finish the
    request once it has produced everything it owes.
    """

    data: dict[str, Any]
    final: bool = False


@dataclass(frozen=True, slots=True)
class StageMetrics:
    """Accounting the scheduler stamps on every output."""

    # Steps this request has taken part in on this stage, including the current one.
    step_count: int = 0
    # Requests advanced together by the step that produced this output.
    batch_size: int = 0
    # Wall time of that step; the whole batch shares it.
    compute_s: float = 0.0
    # Sum of compute_s over every step this request took part in.
    total_compute_s: float = 0.0
    # The worker's step counter: outputs with equal values came from one forward pass.
    worker_step: int = 0
    # add_request plus update_request calls the request has received so far.
    inputs_received: int = 0


@dataclass(frozen=True, slots=True)
class StageOutput:
    """What a stage produced for one request.

    ``finished`` means the stage has dropped the request: no further output follows. An
    output with ``error`` is always finished.

    ``to_owner``: addressed to whoever drives the request (a session, or the client of a
    turn-based request), not to the next stage; e.g. a partial transcript an ASR stage
    reports while it is still listening. Only the final stage's outputs reach the owner
    otherwise.
    """

    request_id: str
    stage_index: int
    data: dict[str, Any]
    finished: bool = False
    error: str | None = None
    metrics: StageMetrics = field(default_factory=StageMetrics)
    to_owner: bool = False

    def __post_init__(self) -> None:
        if self.error is not None and not self.finished:
            object.__setattr__(self, "finished", True)


@dataclass(frozen=True, slots=True)
class AddRequest:
    """Open a request; ``inputs`` is its first input."""

    request_id: str
    inputs: StageInput


@dataclass(frozen=True, slots=True)
class UpdateRequest:
    """More input for an open (resumable) request; it stays one request."""

    request_id: str
    inputs: StageInput


@dataclass(frozen=True, slots=True)
class AbortRequest:
    """Drop a request; the stage emits nothing more for it. Unknown ids are ignored."""

    request_id: str


@dataclass(frozen=True, slots=True)
class StopWorker:
    """Internal: ends a worker's scheduler loop after the messages queued before it."""


@dataclass(frozen=True, slots=True)
class WorkerDied:
    """A stage worker stopped without being asked to.

    ``request_ids_in_flight`` are the requests it held (added, not yet finished or
    aborted); ``worker_generation`` tells a restarted worker's events from its
    predecessor's.
    """

    stage_index: int
    request_ids_in_flight: tuple[str, ...]
    reason: str
    worker_generation: int = 0


@dataclass(frozen=True, slots=True)
class StageCounters:
    """A stage model's cumulative counters (``StageModel.counters``), for ``/metrics``.

    Its worker reports them after a step, at most every ``COUNTERS_EVERY_S``; they start
    from zero again in a restarted worker (``worker_generation``).
    """

    stage_index: int
    counters: dict[str, float]
    worker_generation: int = 0


StageRequestMessage = AddRequest | UpdateRequest | AbortRequest
WorkerEvent = StageOutput | WorkerDied | StageCounters
