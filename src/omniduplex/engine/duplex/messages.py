"""One-way envelopes between the caller's loop and the duplex orchestrator.

To the orchestrator (``engine.submit``): ``SessionCommandMessage`` and
``AbandonOpenMessage``. Back on the engine output queue: ``SessionEventMessage``, one per
event of a session's ordered stream. Opening, closing, resuming and touching a session
are calls (``DuplexOmniEngine``'s methods run them on the orchestrator with
``engine.call``), not envelopes.

They travel within one process (the orchestrator thread), so they may carry any object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
