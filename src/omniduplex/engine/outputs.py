"""What the engine sends back to its caller's loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .stage.messages import StageMetrics


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """One output of a turn-based request: the final stage's output, or its failure.

    ``stage_index`` is the stage that produced it (the failing stage for an error);
    ``stage_metrics`` holds the latest metrics each stage reported for this request.
    """

    request_id: str
    data: dict[str, Any]
    finished: bool
    error: str | None = None
    stage_index: int = -1
    metrics: StageMetrics = field(default_factory=StageMetrics)
    stage_metrics: dict[int, StageMetrics] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EngineDead:
    """The engine can serve nothing more (a stage is gone for good, or it shut down)."""

    reason: str
