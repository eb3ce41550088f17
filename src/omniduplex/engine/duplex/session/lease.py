"""The session lease: idle TTL, disconnect grace, and the resume generation.

Time is read from an injected clock so expiry is tested by moving the clock, not by
sleeping. Every resume is a compare-and-swap on ``generation``: a connection that
resumes with a stale generation lost a race to another connection and is refused.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

Clock = Callable[[], float]


class LeaseActivity(enum.StrEnum):
    APPEND = "append"
    SIGNAL = "signal"
    PLAYBACK_ACK = "playback_ack"
    HEARTBEAT = "heartbeat"
    ATTACH = "attach"
    DETACH = "detach"
    RESUME = "resume"
    MODEL_OUTPUT = "model_output"


class LeaseTerminalError(RuntimeError):
    """The lease already ended; the session is closing or closed."""


class LeaseGenerationMismatch(ValueError):
    """A resume named a generation other than the current one."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"lease generation mismatch: expected {expected}, current {actual}")
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    idle_ttl_s: float | None = 300.0
    disconnect_grace_s: float = 30.0
    # The deployment's bound on what a session's ``idle_timeout_s`` may ask (decision 11).
    max_idle_ttl_s: float | None = None

    def with_idle_timeout(self, idle_timeout_s: float) -> LeaseConfig:
        """This config with the session's ``idle_timeout_s``, bounded by the maximum."""
        bound = self.max_idle_ttl_s
        ttl = idle_timeout_s if bound is None else min(idle_timeout_s, bound)
        return replace(self, idle_ttl_s=ttl)

    def __post_init__(self) -> None:
        if self.idle_ttl_s is not None and self.idle_ttl_s <= 0:
            raise ValueError("idle_ttl_s must be positive or null")
        if self.disconnect_grace_s <= 0:
            raise ValueError("disconnect_grace_s must be positive")


@dataclass(slots=True)
class DuplexLeaseState:
    """Liveness of one session, mutated only by its runner (on the orchestrator loop)."""

    config: LeaseConfig
    last_activity: float
    generation: int = 0
    detached_at: float | None = None
    terminal_reason: str | None = None

    @property
    def terminal(self) -> bool:
        return self.terminal_reason is not None

    @property
    def detached(self) -> bool:
        return self.detached_at is not None

    def _require_live(self) -> None:
        if self.terminal_reason is not None:
            raise LeaseTerminalError(f"duplex lease is terminal: {self.terminal_reason}")

    def touch(self, now: float, activity: LeaseActivity) -> None:
        if not isinstance(activity, LeaseActivity):
            raise TypeError(f"unknown lease activity: {activity!r}")
        self._require_live()
        self.last_activity = now

    def detach(self, now: float, *, expected_generation: int | None = None) -> None:
        """Start the disconnect grace of lease ``expected_generation`` (if given): a
        consumer that went away gives up its own lease, never a newer one that a resume
        from another connection took meanwhile."""
        if expected_generation is not None and expected_generation != self.generation:
            raise LeaseGenerationMismatch(expected_generation, self.generation)
        self.touch(now, LeaseActivity.DETACH)
        self.detached_at = now

    def resume(self, now: float, *, expected_generation: int) -> int:
        self._require_live()
        if expected_generation != self.generation:
            raise LeaseGenerationMismatch(expected_generation, self.generation)
        self.generation += 1
        self.detached_at = None
        self.last_activity = now
        return self.generation

    def disconnect_grace_expired(self, now: float) -> bool:
        return (
            self.terminal_reason is None
            and self.detached_at is not None
            and now >= self.detached_at + self.config.disconnect_grace_s
        )

    def idle_expired(self, now: float) -> bool:
        return (
            self.terminal_reason is None
            and self.config.idle_ttl_s is not None
            and now >= self.last_activity + self.config.idle_ttl_s
        )

    def mark_terminal(self, reason: str) -> bool:
        """End the lease; False when it had already ended."""
        if self.terminal_reason is not None:
            return False
        self.terminal_reason = reason
        self.generation += 1
        self.detached_at = None
        return True
