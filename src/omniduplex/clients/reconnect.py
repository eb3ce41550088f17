"""``ReconnectPolicy``: how a network client retries a lost connection (standard library only)."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["ReconnectPolicy"]


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """Automatic resume after an unexpected socket drop.

    ``max_attempts`` resume attempts per drop. The first attempt is immediate (a dropped
    socket is usually a blip); attempt ``k >= 1`` waits an exponential backoff that starts
    at ``min_backoff_s`` and doubles up to ``max_backoff_s``; with ``jitter`` the wait is
    drawn uniformly from ``[min_backoff_s, that bound]`` so many clients do not reconnect
    in lockstep.
    """

    max_attempts: int = 5
    min_backoff_s: float = 0.25
    max_backoff_s: float = 4.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.min_backoff_s < 0 or self.max_backoff_s < self.min_backoff_s:
            raise ValueError("need 0 <= min_backoff_s <= max_backoff_s")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before attempt ``attempt`` (0-based) of one reconnection."""
        if attempt <= 0:
            return 0.0
        bound = min(self.max_backoff_s, self.min_backoff_s * 2 ** (attempt - 1))
        if not self.jitter:
            return bound
        return (rng or random).uniform(self.min_backoff_s, bound)
