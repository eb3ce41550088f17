"""Exceptions the engine raises to its callers."""

from __future__ import annotations


class EngineError(RuntimeError):
    """Base class of the engine's errors."""


class EngineStartupError(EngineError):
    """A stage could not be started; nothing is left running."""


class EngineNotRunningError(EngineError):
    """The engine was used before ``start`` or after ``shutdown``."""


class EngineDeadError(EngineError):
    """The engine can serve nothing more; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"engine is dead: {reason}")
        self.reason = reason


class RequestFailedError(EngineError):
    """A request failed in a stage; other requests are unaffected."""

    def __init__(self, request_id: str, error: str, *, stage_index: int = -1) -> None:
        where = f" in stage {stage_index}" if stage_index >= 0 else ""
        super().__init__(f"request {request_id} failed{where}: {error}")
        self.request_id = request_id
        self.error = error
        self.stage_index = stage_index


class EngineBusyError(EngineError):
    """A request refused because ``limit`` requests outside sessions are in flight
    (``PipelineConfig.max_requests``); it never started. Retrying later can succeed."""

    code = "resource_exhausted"

    def __init__(self, limit: int) -> None:
        super().__init__(f"the engine is busy: {limit} requests are in flight; retry shortly")
        self.limit = limit
