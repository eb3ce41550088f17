"""Engine-internal identities and the seam between sessions and the stage machinery."""

from __future__ import annotations

import base64
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_ROLE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True)
class DuplexFence:
    """Which incarnation of a session's work something belongs to.

    ``epoch`` advances on every accepted cancel; anything bound to an older epoch is stale.
    """

    session_id: str
    epoch: int = 0
    turn_id: int = 0

    def is_older_than(self, other: DuplexFence) -> bool:
        return (self.epoch, self.turn_id) < (other.epoch, other.turn_id)


def stage_request_id(fence: DuplexFence, role: str) -> str:
    """``duplex-s.<b64 session id>.e.<epoch>.r.<role>``: one stage request of one epoch."""
    if not _ROLE.match(role):
        raise ValueError(f"invalid stage request role: {role!r}")
    encoded = base64.urlsafe_b64encode(fence.session_id.encode()).decode().rstrip("=")
    return f"duplex-s.{encoded}.e.{fence.epoch}.r.{role}"


@dataclass(frozen=True, slots=True)
class StageRequestId:
    """What a session's stage request id says: whose, of which epoch, for what."""

    session_id: str
    epoch: int
    role: str


def parse_stage_request_id(request_id: str) -> StageRequestId | None:
    """Read an id ``stage_request_id`` made; ``None`` if it is not a session's."""
    parts = request_id.split(".")
    if len(parts) != 6 or parts[0] != "duplex-s" or parts[2] != "e" or parts[4] != "r":
        return None
    if not parts[3].isdigit() or not _ROLE.match(parts[5]):
        return None
    padded = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        session_id = base64.urlsafe_b64decode(padded).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return StageRequestId(session_id, int(parts[3]), parts[5])


@dataclass(frozen=True, slots=True)
class StageSubmission:
    """One unit of session input for a stage: opens the request or updates it.

    ``fence`` is the fence ``request_id`` was made under: the session drops a submission
    that would open a request of an epoch a cancel already ended."""

    request_id: str
    stage_index: int
    data: dict[str, Any]
    fence: DuplexFence
    final: bool = False

    @classmethod
    def opening(
        cls, fence: DuplexFence, role: str, data: dict[str, Any], *, final: bool = False
    ) -> StageSubmission:
        """Stage 0 input of the request ``role`` of ``fence``'s epoch."""
        return cls(stage_request_id(fence, role), 0, data, fence, final)


class SessionStages(ABC):
    """The stages as a session sees them: open, feed and abort its own requests there;
    implemented by the orchestrator."""

    @property
    @abstractmethod
    def stage_count(self) -> int: ...

    @abstractmethod
    def submit(self, submission: StageSubmission) -> None:
        """Send input to a stage: the first submission of an id opens the request."""

    @abstractmethod
    def abort_requests(self, request_ids: Sequence[str]) -> None:
        """Abort requests in every stage; their later outputs are dropped."""

    @abstractmethod
    async def cleanup(self, request_ids: Sequence[str]) -> None:
        """Release everything the stages hold for these requests (abort + forget)."""
