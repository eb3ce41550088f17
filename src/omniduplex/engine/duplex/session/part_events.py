"""What a part of a session runner tells the runner, which alone acts on it.

The parts (``InputFlow``, ``ResponseFlow``, ``LiveTranscription``) never call each other:
when something one of them saw concerns another (the user talked over the reply, a turn
is in and wants its answer, a model transcribed the user), the part hands the runner one
of these through ``SessionContext.tell``, at once and in order, and the runner routes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..plugin import ModelInputTranscript


@dataclass(frozen=True, slots=True)
class TalkedOver:
    """The user spoke over the assistant: stop what they have not heard."""

    reason: str


@dataclass(frozen=True, slots=True)
class AnswerTurn:
    """The user's turn (audio or text) is in and wants a response now; ``carried_by``:
    the stage request that already holds the committed turn (live transcription)."""

    carried_by: str | None = None


@dataclass(frozen=True, slots=True)
class HoldReply:
    """Speech started over the active response and is not yet judged (a backchannel or
    an interruption): release none of its audio until a ``ResumeReply`` or a cancel."""


@dataclass(frozen=True, slots=True)
class ResumeReply:
    """The held speech was a backchannel (or is gone): the reply plays on."""


@dataclass(frozen=True, slots=True)
class InputTranscribed:
    """A model reported a transcript of the user's input; ``request_id``: the utterance
    request that carried it, if any."""

    result: ModelInputTranscript
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseEnded:
    """A response ended: utterances its stage requests carried report nothing more."""

    request_ids: tuple[str, ...]


PartEvent = TalkedOver | AnswerTurn | HoldReply | ResumeReply | InputTranscribed | ResponseEnded
