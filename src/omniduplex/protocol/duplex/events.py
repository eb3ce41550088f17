"""The whole server-event vocabulary a duplex consumer uses: 54 classes.

* Tier 1 (34): OpenAI's events re-exported unchanged from ``protocol.realtime.events``.
* Tier 2 (8): OpenAI names carrying our additive keys. Each subclasses its Tier 1 twin
  under the same class name and declares only the fields it adds, so the OpenAI surface
  stays pure and a stock client simply ignores the extra keys.
* Tier 3 (12): ours alone (``extension_events``).

``DuplexEvent`` is ``RealtimeEvent``: an event has no engine-internal half. A class is
named after its GA wire type in CamelCase (``response.output_audio.delta`` ->
``ResponseOutputAudioDelta``), except ``ErrorEvent`` and ``RawDuplexEvent``.

That is the reference vocabulary's 42, the 8 events of remote MCP tools and a few more:
the reference has no partial input transcript, while our cascade model streams its ASR
hypotheses while the user speaks (``conversation.item.input_audio_transcription.delta``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, ClassVar, Final

from ..realtime import events as tier1
from ..realtime.base import RealtimeEvent
from ..realtime.errors import RealtimeProtocolError
from ..realtime.event_decoding import decode_event, event_type_registry
from ..realtime.events import (
    ConversationItemAdded,
    ConversationItemCreated,
    ConversationItemDone,
    ConversationItemInputAudioTranscriptionCompleted,
    ConversationItemInputAudioTranscriptionDelta,
    ConversationItemRetrieved,
    InputAudioBufferCleared,
    InputAudioBufferSpeechStarted,
    InputAudioBufferSpeechStopped,
    InputAudioBufferTimeoutTriggered,
    McpListToolsCompleted,
    McpListToolsFailed,
    McpListToolsInProgress,
    OutputAudioBufferCleared,
    OutputAudioBufferStarted,
    OutputAudioBufferStopped,
    RateLimitsUpdated,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    ResponseFunctionCallArgumentsDelta,
    ResponseFunctionCallArgumentsDone,
    ResponseMcpCallArgumentsDelta,
    ResponseMcpCallArgumentsDone,
    ResponseMcpCallCompleted,
    ResponseMcpCallFailed,
    ResponseMcpCallInProgress,
    ResponseOutputAudioDone,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseOutputTextDelta,
    ResponseOutputTextDone,
    SessionUpdated,
    error_kwargs,
)
from .errors import error_class_for
from .extension_events import (
    TIER3_EVENT_CLASSES,
    OverlapDecision,
    PlaybackAcknowledged,
    RawDuplexEvent,
    ResponseListen,
    ResponseSpeak,
    SessionClosed,
    SessionExpired,
    SessionHeartbeatAck,
    SessionReplaced,
    SessionResumed,
    SessionResyncRequired,
    TurnEvent,
    raw_event_class,
)

DuplexEvent = RealtimeEvent

# ---- Tier 2 --------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class SessionCreated(tier1.SessionCreated):
    """Plus the resume credentials, when the model supports resume."""

    tier: ClassVar[int] = 2
    optional_fields: ClassVar[frozenset[str]] = frozenset({"attachment_generation", "resume_token"})

    attachment_generation: int | None = None
    resume_token: str | None = None


@dataclass(kw_only=True, slots=True)
class ResponseCreated(tier1.ResponseCreated):
    """Plus a top-level ``response_id`` (defaults to ``response.id``), where every other
    response-scoped event has it."""

    tier: ClassVar[int] = 2

    response_id: str | None = None

    def __post_init__(self) -> None:
        tier1.ResponseCreated.__post_init__(self)
        if self.response_id is None:
            self.response_id = _id_of(self.response)

    @classmethod
    def failure_class(cls, code: str) -> str:
        return error_class_for(code)


@dataclass(kw_only=True, slots=True)
class ResponseDone(tier1.ResponseDone):
    """Plus a top-level ``response_id`` (defaults to ``response.id``); a failed
    response's error is classed by our code table."""

    tier: ClassVar[int] = 2

    response_id: str | None = None

    def __post_init__(self) -> None:
        tier1.ResponseDone.__post_init__(self)
        if self.response_id is None:
            self.response_id = _id_of(self.response)

    @classmethod
    def failure_class(cls, code: str) -> str:
        return error_class_for(code)


def _id_of(response: Any) -> str | None:
    response_id = response.get("id") if isinstance(response, dict) else None
    return response_id if isinstance(response_id, str) else None


@dataclass(kw_only=True, slots=True)
class ResponseOutputAudioDelta(tier1.ResponseOutputAudioDelta):
    """Plus the chunk's own ``format`` and rate and the duplex playback ``metadata``."""

    tier: ClassVar[int] = 2
    optional_fields: ClassVar[frozenset[str]] = frozenset({"sample_rate_hz", "metadata"})

    format: str = "pcm16"
    sample_rate_hz: int | None = None
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        tier1.ResponseOutputAudioDelta.__post_init__(self)
        if not self.metadata:
            self.metadata = None  # an empty metadata object is left off the wire


@dataclass(kw_only=True, slots=True)
class InputAudioBufferCommitted(tier1.InputAudioBufferCommitted):
    """Plus ``event``: the session's own account of the commit (turn, flags)."""

    tier: ClassVar[int] = 2

    event: dict[str, Any]


@dataclass(kw_only=True, slots=True)
class ConversationItemDeleted(tier1.ConversationItemDeleted):
    """Plus ``event``: whether the engine's history entry was removed."""

    tier: ClassVar[int] = 2

    event: dict[str, Any]


@dataclass(kw_only=True, slots=True)
class ConversationItemTruncated(tier1.ConversationItemTruncated):
    """Plus ``event``: whether the engine's history was truncated."""

    tier: ClassVar[int] = 2

    event: dict[str, Any]


@dataclass(kw_only=True, slots=True)
class ErrorEvent(tier1.RealtimeErrorEvent):
    """Our error codes, classed by the one code table, plus extra ``error`` keys
    (``retryable`` ...). An explicit ``error_class`` still wins over the table."""

    tier: ClassVar[int] = 2

    extra: dict[str, Any] | None = None

    def resolved_error_class(self) -> str:
        return self.error_class or error_class_for(self.code)

    def error_extra(self) -> dict[str, Any] | None:
        return self.extra

    @classmethod
    def from_wire_fields(cls, obj: Mapping[str, Any]) -> RealtimeEvent:
        return cls(**error_kwargs(obj))

    @classmethod
    def build(
        cls,
        code: str,
        message: str,
        *,
        event_id: str | None = None,
        param: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> ErrorEvent:
        """An error for ``code``. As in ``RealtimeProtocolError``, ``event_id`` is the
        *client's* event id being answered; the event's own id is generated."""
        return cls(
            code=code,
            message=message,
            param=param,
            client_event_id=event_id,
            extra=dict(extra) if extra else None,
        )

    @classmethod
    def from_exception(cls, exc: RealtimeProtocolError, **extra: Any) -> ErrorEvent:
        """The error answering ``exc``; ``extra`` keys are merged into ``error``."""
        return cls.build(exc.code, exc.message, event_id=exc.event_id, param=exc.param, extra=extra)


TIER1_EVENT_CLASSES: Final[tuple[type[RealtimeEvent], ...]] = (
    SessionUpdated,
    InputAudioBufferSpeechStarted,
    InputAudioBufferSpeechStopped,
    InputAudioBufferTimeoutTriggered,
    InputAudioBufferCleared,
    OutputAudioBufferStarted,
    OutputAudioBufferStopped,
    OutputAudioBufferCleared,
    ConversationItemAdded,
    ConversationItemCreated,
    ConversationItemDone,
    ConversationItemRetrieved,
    ConversationItemInputAudioTranscriptionDelta,
    ConversationItemInputAudioTranscriptionCompleted,
    RateLimitsUpdated,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    ResponseOutputAudioDone,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputTextDelta,
    ResponseOutputTextDone,
    ResponseFunctionCallArgumentsDelta,
    ResponseFunctionCallArgumentsDone,
    McpListToolsInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    ResponseMcpCallArgumentsDelta,
    ResponseMcpCallArgumentsDone,
    ResponseMcpCallInProgress,
    ResponseMcpCallCompleted,
    ResponseMcpCallFailed,
)
TIER2_EVENT_CLASSES: Final[tuple[type[RealtimeEvent], ...]] = (
    SessionCreated,
    ResponseCreated,
    ResponseDone,
    ResponseOutputAudioDelta,
    InputAudioBufferCommitted,
    ConversationItemDeleted,
    ConversationItemTruncated,
    ErrorEvent,
)
#: All 54 classes a duplex session can emit.
DUPLEX_EVENT_CLASSES: Final = TIER1_EVENT_CLASSES + TIER2_EVENT_CLASSES + TIER3_EVENT_CLASSES

#: Every accepted wire type (GA and beta spellings) -> the class the duplex surface uses.
#: ``duplex.<internal_type>`` is matched by prefix (``RawDuplexEvent``), not listed.
DUPLEX_EVENT_TYPES: Final[Mapping[str, type[RealtimeEvent]]] = event_type_registry(
    cls for cls in DUPLEX_EVENT_CLASSES if cls is not RawDuplexEvent
)

#: The session's last event: exactly one of these ends every session.
TERMINAL_SESSION_EVENTS: Final[frozenset[type[RealtimeEvent]]] = frozenset(
    {SessionClosed, SessionExpired}
)
#: Model output scoped to one response: what an epoch advance (a cancel) makes stale.
MODEL_OUTPUT_EVENTS: Final[frozenset[type[RealtimeEvent]]] = frozenset(
    {
        tier1.ResponseCreated,
        ResponseCreated,
        ResponseListen,
        ResponseSpeak,
        ResponseOutputItemAdded,
        ResponseContentPartAdded,
        tier1.ResponseOutputAudioDelta,
        ResponseOutputAudioDelta,
        ResponseOutputAudioDone,
        ResponseOutputAudioTranscriptDelta,
        ResponseOutputAudioTranscriptDone,
        ResponseOutputTextDelta,
        ResponseOutputTextDone,
        ResponseFunctionCallArgumentsDelta,
        ResponseFunctionCallArgumentsDone,
        ResponseMcpCallArgumentsDelta,
        ResponseMcpCallArgumentsDone,
        ResponseMcpCallInProgress,
        ResponseMcpCallCompleted,
        ResponseMcpCallFailed,
        ResponseContentPartDone,
        ResponseOutputItemDone,
        tier1.ResponseDone,
        ResponseDone,
    }
)


def event_from_realtime(obj: Any) -> RealtimeEvent:
    """Parse a rendered event (either dialect) back into the typed event that renders it.

    An OpenAI name carrying none of its Tier 2 keys parses to the Tier 1 twin, so the
    round trip is exact either way. Raises ``RealtimeProtocolError`` with
    ``unknown_event`` or ``bad_event``, never anything else.
    """
    return decode_event(obj, DUPLEX_EVENT_TYPES, raw_event_class, refine=_twin_for)


def _added_fields(cls: type[RealtimeEvent]) -> frozenset[str]:
    twin = cls.__mro__[1]
    return frozenset({f.name for f in fields(cls)} - {f.name for f in fields(twin)})


#: What each Tier 2 class adds to its Tier 1 twin (``cls.__mro__[1]``).
TIER2_ADDED_FIELDS: Final[Mapping[type[RealtimeEvent], frozenset[str]]] = MappingProxyType(
    {cls: _added_fields(cls) for cls in TIER2_EVENT_CLASSES}
)


def _twin_for(cls: type[RealtimeEvent], obj: Mapping[str, Any]) -> type[RealtimeEvent]:
    # An error's additions sit inside ``error``, and ErrorEvent renders a Tier 1 error
    # exactly, so errors always parse to ErrorEvent.
    added = TIER2_ADDED_FIELDS.get(cls)
    if added is None or cls is ErrorEvent or any(key in obj for key in added):
        return cls
    return cls.__mro__[1]


__all__ = [
    "DUPLEX_EVENT_CLASSES",
    "DUPLEX_EVENT_TYPES",
    "MODEL_OUTPUT_EVENTS",
    "TERMINAL_SESSION_EVENTS",
    "TIER1_EVENT_CLASSES",
    "TIER2_ADDED_FIELDS",
    "TIER2_EVENT_CLASSES",
    "TIER3_EVENT_CLASSES",
    "ConversationItemAdded",
    "ConversationItemCreated",
    "ConversationItemDeleted",
    "ConversationItemDone",
    "ConversationItemInputAudioTranscriptionCompleted",
    "ConversationItemInputAudioTranscriptionDelta",
    "ConversationItemRetrieved",
    "ConversationItemTruncated",
    "DuplexEvent",
    "ErrorEvent",
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
    "OverlapDecision",
    "PlaybackAcknowledged",
    "RateLimitsUpdated",
    "RawDuplexEvent",
    "RealtimeEvent",
    "ResponseContentPartAdded",
    "ResponseContentPartDone",
    "ResponseCreated",
    "ResponseDone",
    "ResponseFunctionCallArgumentsDelta",
    "ResponseFunctionCallArgumentsDone",
    "ResponseListen",
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
    "ResponseSpeak",
    "SessionClosed",
    "SessionCreated",
    "SessionExpired",
    "SessionHeartbeatAck",
    "SessionReplaced",
    "SessionResumed",
    "SessionResyncRequired",
    "SessionUpdated",
    "TurnEvent",
    "event_from_realtime",
]
