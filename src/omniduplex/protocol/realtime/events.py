"""OpenAI's 42 Realtime server events as typed events (Tier 1).

34 of them are what a duplex session sends unchanged; 8 (``session.created``,
``response.created``, ``response.done``, ``response.output_audio.delta``,
``input_audio_buffer.committed``, ``conversation.item.deleted``,
``conversation.item.truncated``, ``error``) are extended by Tier 2 twins in
``protocol.duplex.events``. Every class here renders exactly OpenAI's fields, in the
dialect asked for, in a shape the ``openai`` package's own models accept.

Response-scoped events live in ``response_events``, remote MCP tools' in ``mcp_events``;
nested shapes in ``event_shapes``;
parsing rendered events back in ``event_decoding``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .base import RealtimeEvent
from .errors import INVALID_REQUEST_ERROR, error_body
from .event_decoding import decode_event, event_type_registry, expect
from .event_shapes import beta_item, beta_session, ga_item
from .mcp_events import (
    MCP_EVENT_CLASSES,
    McpListToolsCompleted,
    McpListToolsFailed,
    McpListToolsInProgress,
    ResponseMcpCallArgumentsDelta,
    ResponseMcpCallArgumentsDone,
    ResponseMcpCallCompleted,
    ResponseMcpCallFailed,
    ResponseMcpCallInProgress,
)
from .response_events import (
    RESPONSE_EVENT_CLASSES,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    ResponseCreated,
    ResponseDone,
    ResponseFunctionCallArgumentsDelta,
    ResponseFunctionCallArgumentsDone,
    ResponseOutputAudioDelta,
    ResponseOutputAudioDone,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseOutputTextDelta,
    ResponseOutputTextDone,
)
from .transcription_session import TRANSCRIPTION_UPDATED_TYPE, is_transcription

# ---- session -------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _SessionEvent(RealtimeEvent):
    """An event carrying the session object, canonical in OpenAI GA's shape (wire §6)."""

    session: dict[str, Any]

    def adapt_beta(self, rendered: dict[str, Any]) -> dict[str, Any]:
        rendered["session"] = beta_session(rendered["session"])
        return rendered


@dataclass(kw_only=True, slots=True)
class SessionCreated(_SessionEvent):
    """``session.created``: the first event of a session."""

    type: ClassVar[str] = "session.created"
    beta_type: ClassVar[str | None] = "session.created"


@dataclass(kw_only=True, slots=True)
class SessionUpdated(_SessionEvent):
    """``session.updated``: the effective session object after an accepted update."""

    type: ClassVar[str] = "session.updated"
    beta_type: ClassVar[str | None] = "session.updated"

    def adapt_beta(self, rendered: dict[str, Any]) -> dict[str, Any]:
        """Beta answers a transcription session's update with its own event type; its
        SDK's model of that session requires a ``client_secret``, which OpenAI mints only
        over REST: a socket's update carries it empty."""
        transcribing = is_transcription(rendered.get("session"))
        rendered = _SessionEvent.adapt_beta(self, rendered)
        if transcribing:
            rendered["type"] = TRANSCRIPTION_UPDATED_TYPE
            rendered["session"].setdefault("client_secret", {"value": "", "expires_at": 0})
        return rendered


# ---- input audio buffer --------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class InputAudioBufferSpeechStarted(RealtimeEvent):
    type: ClassVar[str] = "input_audio_buffer.speech_started"
    beta_type: ClassVar[str | None] = "input_audio_buffer.speech_started"

    audio_start_ms: int = 0
    item_id: str


@dataclass(kw_only=True, slots=True)
class InputAudioBufferSpeechStopped(RealtimeEvent):
    type: ClassVar[str] = "input_audio_buffer.speech_stopped"
    beta_type: ClassVar[str | None] = "input_audio_buffer.speech_stopped"

    audio_end_ms: int = 0
    item_id: str


@dataclass(kw_only=True, slots=True)
class InputAudioBufferCommitted(RealtimeEvent):
    type: ClassVar[str] = "input_audio_buffer.committed"
    beta_type: ClassVar[str | None] = "input_audio_buffer.committed"

    previous_item_id: str | None = None
    item_id: str


@dataclass(kw_only=True, slots=True)
class InputAudioBufferTimeoutTriggered(RealtimeEvent):
    """The user stayed quiet for server VAD's ``idle_timeout_ms`` after the assistant's
    audio played out: ``[audio_start_ms, audio_end_ms)`` of the input clock is that
    silence, committed next as the user item ``item_id``. GA only: the beta SDK's union
    has no such event, so a beta client sees the commit and the response alone."""

    type: ClassVar[str] = "input_audio_buffer.timeout_triggered"
    beta_type: ClassVar[str | None] = None

    audio_start_ms: int
    audio_end_ms: int
    item_id: str


@dataclass(kw_only=True, slots=True)
class InputAudioBufferCleared(RealtimeEvent):
    type: ClassVar[str] = "input_audio_buffer.cleared"
    beta_type: ClassVar[str | None] = "input_audio_buffer.cleared"


@dataclass(kw_only=True, slots=True)
class OutputAudioBufferStarted(RealtimeEvent):
    """The server began playing a response's audio out (its first audio left)."""

    type: ClassVar[str] = "output_audio_buffer.started"
    beta_type: ClassVar[str | None] = "output_audio_buffer.started"

    response_id: str


@dataclass(kw_only=True, slots=True)
class OutputAudioBufferStopped(RealtimeEvent):
    """All of a response's audio has been played out; nothing more is coming."""

    type: ClassVar[str] = "output_audio_buffer.stopped"
    beta_type: ClassVar[str | None] = "output_audio_buffer.stopped"

    response_id: str


@dataclass(kw_only=True, slots=True)
class OutputAudioBufferCleared(RealtimeEvent):
    type: ClassVar[str] = "output_audio_buffer.cleared"
    beta_type: ClassVar[str | None] = "output_audio_buffer.cleared"

    response_id: str


# ---- conversation items --------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _ItemEvent(RealtimeEvent):
    """An event carrying one conversation item, snapshotted as it was when built."""

    item: dict[str, Any]

    def __post_init__(self) -> None:
        RealtimeEvent.__post_init__(self)
        self.item = ga_item(self.item)

    def adapt_beta(self, rendered: dict[str, Any]) -> dict[str, Any]:
        rendered["item"] = beta_item(rendered["item"])
        return rendered


@dataclass(kw_only=True, slots=True)
class ConversationItemAdded(_ItemEvent):
    """``conversation.item.added`` (GA only; beta clients get ``.created``)."""

    type: ClassVar[str] = "conversation.item.added"
    beta_type: ClassVar[str | None] = None

    previous_item_id: str | None = None


@dataclass(kw_only=True, slots=True)
class ConversationItemCreated(_ItemEvent):
    type: ClassVar[str] = "conversation.item.created"
    beta_type: ClassVar[str | None] = "conversation.item.created"

    previous_item_id: str | None = None


@dataclass(kw_only=True, slots=True)
class ConversationItemDone(_ItemEvent):
    """``conversation.item.done`` (GA only): the item is final."""

    type: ClassVar[str] = "conversation.item.done"
    beta_type: ClassVar[str | None] = None

    previous_item_id: str | None = None


@dataclass(kw_only=True, slots=True)
class ConversationItemRetrieved(_ItemEvent):
    type: ClassVar[str] = "conversation.item.retrieved"
    beta_type: ClassVar[str | None] = "conversation.item.retrieved"


@dataclass(kw_only=True, slots=True)
class ConversationItemDeleted(RealtimeEvent):
    type: ClassVar[str] = "conversation.item.deleted"
    beta_type: ClassVar[str | None] = "conversation.item.deleted"

    item_id: str


@dataclass(kw_only=True, slots=True)
class ConversationItemTruncated(RealtimeEvent):
    type: ClassVar[str] = "conversation.item.truncated"
    beta_type: ClassVar[str | None] = "conversation.item.truncated"

    item_id: str
    content_index: int = 0
    audio_end_ms: int = 0


def _no_transcription_usage() -> dict[str, Any]:
    # OpenAI requires usage; our transcripts come from the model or the client's hints,
    # not from a billed transcription model, so nothing was spent.
    return {"type": "tokens", "input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


@dataclass(kw_only=True, slots=True)
class ConversationItemInputAudioTranscriptionDelta(RealtimeEvent):
    """A piece of the user's transcript while they speak (same name in both dialects).

    ``logprobs`` (``{"token", "logprob", "bytes"}`` per token of ``delta``) only when the
    session's ``include`` asks for them; otherwise it is left off the wire.
    """

    type: ClassVar[str] = "conversation.item.input_audio_transcription.delta"
    beta_type: ClassVar[str | None] = "conversation.item.input_audio_transcription.delta"
    optional_fields: ClassVar[frozenset[str]] = frozenset({"logprobs"})

    item_id: str
    content_index: int = 0
    delta: str
    logprobs: list[dict[str, Any]] | None = None


@dataclass(kw_only=True, slots=True)
class ConversationItemInputAudioTranscriptionCompleted(RealtimeEvent):
    type: ClassVar[str] = "conversation.item.input_audio_transcription.completed"
    beta_type: ClassVar[str | None] = "conversation.item.input_audio_transcription.completed"

    optional_fields: ClassVar[frozenset[str]] = frozenset({"logprobs"})

    item_id: str
    content_index: int = 0
    transcript: str
    usage: dict[str, Any] = field(default_factory=_no_transcription_usage)
    # Of the whole transcript, only when the session's ``include`` asks for them.
    logprobs: list[dict[str, Any]] | None = None


# ---- misc ----------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class RateLimitsUpdated(RealtimeEvent):
    type: ClassVar[str] = "rate_limits.updated"
    beta_type: ClassVar[str | None] = "rate_limits.updated"

    rate_limits: list[dict[str, Any]] = field(default_factory=list)


ERROR_BODY_KEYS = frozenset({"type", "code", "message", "param", "event_id"})


@dataclass(kw_only=True, slots=True)
class RealtimeErrorEvent(RealtimeEvent):
    """The ``error`` envelope. ``client_event_id`` is the id of the client event answered.

    The top-level ``event_id`` is our own; ``error.event_id`` echoes the client's.
    """

    type: ClassVar[str] = "error"
    beta_type: ClassVar[str | None] = "error"

    code: str = "internal_error"
    message: str
    error_class: str | None = None
    param: str | None = None
    client_event_id: str | None = None

    def resolved_error_class(self) -> str:
        """``error.type``. OpenAI's own layer knows no codes, so an unset class is a
        request error; the duplex twin classes codes by its table."""
        return self.error_class or INVALID_REQUEST_ERROR

    def error_extra(self) -> dict[str, Any] | None:
        return None

    def wire_fields(self) -> dict[str, Any]:
        return {
            "error": error_body(
                error_class=self.resolved_error_class(),
                code=self.code,
                message=self.message,
                event_id=self.client_event_id,
                param=self.param,
                extra=self.error_extra(),
            )
        }

    @classmethod
    def from_wire_fields(cls, obj: Mapping[str, Any]) -> RealtimeEvent:
        kwargs = error_kwargs(obj)
        kwargs.pop("extra", None)  # OpenAI's error object has no room for our keys
        return cls(**kwargs)


def error_kwargs(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor arguments of an error event read from its rendered envelope.

    Keys of the ``error`` object beyond OpenAI's five come back under ``extra`` for a
    class that can carry them.
    """
    body = expect(obj, "error", Mapping)
    kwargs: dict[str, Any] = {
        "event_id": expect(obj, "event_id", str, required=False),
        "code": expect(body, "code", str, required=False, param="error.code"),
        "message": expect(body, "message", str, param="error.message"),
        "error_class": expect(body, "type", str, param="error.type"),
        "param": expect(body, "param", str, required=False, param="error.param"),
        "client_event_id": expect(body, "event_id", str, required=False, param="error.event_id"),
        "extra": {k: v for k, v in body.items() if k not in ERROR_BODY_KEYS} or None,
    }
    return {k: v for k, v in kwargs.items() if v is not None}


REALTIME_EVENT_CLASSES: tuple[type[RealtimeEvent], ...] = (
    SessionCreated,
    SessionUpdated,
    InputAudioBufferSpeechStarted,
    InputAudioBufferSpeechStopped,
    InputAudioBufferCommitted,
    InputAudioBufferTimeoutTriggered,
    InputAudioBufferCleared,
    OutputAudioBufferStarted,
    OutputAudioBufferStopped,
    OutputAudioBufferCleared,
    ConversationItemAdded,
    ConversationItemCreated,
    ConversationItemDone,
    ConversationItemRetrieved,
    ConversationItemDeleted,
    ConversationItemTruncated,
    ConversationItemInputAudioTranscriptionDelta,
    ConversationItemInputAudioTranscriptionCompleted,
    RateLimitsUpdated,
    RealtimeErrorEvent,
    *RESPONSE_EVENT_CLASSES,
    *MCP_EVENT_CLASSES,
)

#: Every accepted wire type (GA and beta spellings) -> its Tier 1 class.
REALTIME_EVENT_TYPES: Mapping[str, type[RealtimeEvent]] = event_type_registry(
    REALTIME_EVENT_CLASSES
)


def realtime_event_from_realtime(obj: Any) -> RealtimeEvent:
    """Parse a rendered OpenAI event (either dialect) into its Tier 1 class.

    Raises ``RealtimeProtocolError`` (``unknown_event`` / ``bad_event``) and nothing else.
    """
    return decode_event(obj, REALTIME_EVENT_TYPES)


__all__ = [
    "REALTIME_EVENT_CLASSES",
    "REALTIME_EVENT_TYPES",
    "ConversationItemAdded",
    "ConversationItemCreated",
    "ConversationItemDeleted",
    "ConversationItemDone",
    "ConversationItemInputAudioTranscriptionCompleted",
    "ConversationItemInputAudioTranscriptionDelta",
    "ConversationItemRetrieved",
    "ConversationItemTruncated",
    "InputAudioBufferCleared",
    "InputAudioBufferCommitted",
    "InputAudioBufferSpeechStarted",
    "InputAudioBufferSpeechStopped",
    "InputAudioBufferTimeoutTriggered",
    "McpListToolsCompleted",
    "McpListToolsFailed",
    "McpListToolsInProgress",
    "OutputAudioBufferCleared",
    "OutputAudioBufferStarted",
    "OutputAudioBufferStopped",
    "RateLimitsUpdated",
    "RealtimeErrorEvent",
    "RealtimeEvent",
    "ResponseContentPartAdded",
    "ResponseContentPartDone",
    "ResponseCreated",
    "ResponseDone",
    "ResponseFunctionCallArgumentsDelta",
    "ResponseFunctionCallArgumentsDone",
    "ResponseMcpCallArgumentsDelta",
    "ResponseMcpCallArgumentsDone",
    "ResponseMcpCallCompleted",
    "ResponseMcpCallFailed",
    "ResponseMcpCallInProgress",
    "ResponseOutputAudioDelta",
    "ResponseOutputAudioDone",
    "ResponseOutputAudioTranscriptDelta",
    "ResponseOutputAudioTranscriptDone",
    "ResponseOutputItemAdded",
    "ResponseOutputItemDone",
    "ResponseOutputTextDelta",
    "ResponseOutputTextDone",
    "SessionCreated",
    "SessionUpdated",
    "realtime_event_from_realtime",
]
