"""``RequestOwner``: whoever drives a stage request itself instead of the client sink.

A session's stage requests belong to the session, a turn response's to the turn
response; a plain client request has no owner. For an owned request the orchestrator
does the one routing step every owner needs (forward an output to the next stage, or
hand it to the owner; release the request when the owner says it ended) and the owner
only says what an output means to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .orchestrator import RequestState
    from .stage.messages import StageOutput


class RequestOwner(ABC):
    @abstractmethod
    def deliver(self, state: RequestState, stage_index: int, output: StageOutput) -> bool:
        """An output the stages did not pass on: the final stage's, one addressed to the
        owner (``to_owner``), an error, or a finished one no stage took further. Returns
        whether the request ended (the orchestrator then releases it)."""

    @abstractmethod
    def failed(self, state: RequestState, stage_index: int, error: str) -> None:
        """Stage ``stage_index`` could not take the request; it is already released."""
