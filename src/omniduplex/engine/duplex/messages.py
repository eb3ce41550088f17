"""Queue envelopes between the caller's loop and the duplex orchestrator.

RPCs (awaited through ``engine.call``): ``OpenSessionMessage``, ``CloseSessionMessage``,
``ResumeSessionMessage``, ``TouchSessionMessage``. One-way (``engine.submit``):
``SessionCommandMessage`` and ``AbandonOpenMessage``. Back on the engine output queue:
``SessionEventMessage``, one per event of a session's ordered stream.

They travel within one process (the orchestrator thread), so they may carry any object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .session.lease import LeaseActivity
from .session.manager import DuplexSessionError, OpenResult

__all__ = [
    "AbandonOpenMessage",
    "CloseSessionMessage",
    "DuplexSessionError",
    "OpenResult",
    "OpenSessionMessage",
    "ResumeSessionMessage",
    "SessionCommandMessage",
    "SessionEventMessage",
    "TouchSessionMessage",
]


@dataclass(frozen=True, slots=True)
class OpenSessionMessage:
    """Admit a session under a server-allocated id; answered with an ``OpenResult``."""

    session_id: str
    session: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CloseSessionMessage:
    """Close a session; answered with True, or False when the id was not open."""

    session_id: str
    reason: str = "client_close"


@dataclass(frozen=True, slots=True)
class ResumeSessionMessage:
    """Lease compare-and-swap; answered with an ``OpenResult`` (new lease generation)."""

    session_id: str
    expected_lease_generation: int


@dataclass(frozen=True, slots=True)
class TouchSessionMessage:
    """Lease activity (``DETACH`` starts the disconnect grace); answered with the generation.

    ``expected_lease_generation`` fences a ``DETACH``: only that lease is given up."""

    session_id: str
    activity: LeaseActivity = LeaseActivity.HEARTBEAT
    expected_lease_generation: int | None = None


@dataclass(frozen=True, slots=True)
class SessionCommandMessage:
    """One client command for a session (one-way; refusals come back as error events)."""

    session_id: str
    command: Any


@dataclass(frozen=True, slots=True)
class AbandonOpenMessage:
    """The caller of an open went away: release its admission slot (DESIGN decision 12)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class SessionEventMessage:
    """One event of a session's ordered stream, on the engine output queue."""

    session_id: str
    event: Any
