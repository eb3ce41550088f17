"""What a client reads: event type names, typed-event helpers, and the client errors.

Clients consume the protocol's own typed events (``omniduplex.protocol.duplex.events``):
the in-process client gets them straight from the engine, a network client parses each
wire object with :func:`parse_server_event`. Every event has ``.type`` (the GA name,
whatever dialect it arrived in), ``.event_id`` and, in process, ``.session_id`` and
``.epoch``. This module adds the few accessors a client needs on top (``response_id_of``,
``decode_output_audio``) and the exceptions every client raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from ..protocol.duplex import (
    RealtimeProtocolError,
    b64decode_strict,
    decode_audio,
    encode_audio,
    event_from_realtime,
)
from ..protocol.duplex import events as ev

__all__ = [
    "AUDIO_DELTA",
    "CANCEL_COMMANDS",
    "ERROR",
    "RESPONSE_CREATED",
    "RESPONSE_DONE",
    "SESSION_CLOSED",
    "SESSION_CREATED",
    "SESSION_EXPIRED",
    "TERMINAL_TYPES",
    "TEXT_DELTA",
    "TRANSCRIPT_DELTA",
    "DuplexClientError",
    "DuplexConnectionError",
    "DuplexEventOverflowError",
    "DuplexProtocolError",
    "DuplexSessionClosedError",
    "EventMatcher",
    "UnparsedEvent",
    "decode_output_audio",
    "event_matcher",
    "parse_server_event",
    "response_id_of",
]

# ---- event type names (GA spelling; the typed events always carry these) ----------------

SESSION_CREATED: Final = ev.SessionCreated.type
SESSION_UPDATED: Final = ev.SessionUpdated.type
SESSION_RESUMED: Final = ev.SessionResumed.type
SESSION_CLOSED: Final = ev.SessionClosed.type
SESSION_EXPIRED: Final = ev.SessionExpired.type
RESPONSE_CREATED: Final = ev.ResponseCreated.type
RESPONSE_DONE: Final = ev.ResponseDone.type
RESPONSE_SPEAK: Final = ev.ResponseSpeak.type
RESPONSE_LISTEN: Final = ev.ResponseListen.type
AUDIO_DELTA: Final = ev.ResponseOutputAudioDelta.type
TRANSCRIPT_DELTA: Final = ev.ResponseOutputAudioTranscriptDelta.type
TEXT_DELTA: Final = ev.ResponseOutputTextDelta.type
OUTPUT_ITEM_ADDED: Final = ev.ResponseOutputItemAdded.type
INPUT_COMMITTED: Final = ev.InputAudioBufferCommitted.type
PLAYBACK_ACKNOWLEDGED: Final = ev.PlaybackAcknowledged.type
ERROR: Final = ev.ErrorEvent.type

#: A session's stream ends with exactly one of these.
TERMINAL_TYPES: Final[frozenset[str]] = frozenset({SESSION_CLOSED, SESSION_EXPIRED})
#: Client commands that cancel the active response (for latency accounting).
CANCEL_COMMANDS: Final[frozenset[str]] = frozenset({"response.cancel", "barge_in", "input.cancel"})


# ---- errors ------------------------------------------------------------------------------


class DuplexClientError(Exception):
    """Base of every error a duplex client raises."""


class DuplexProtocolError(DuplexClientError):
    """The server answered with an ``error`` event.

    ``code`` (e.g. ``response_cancel_not_active``), ``message``, ``param``, ``event_id`` (the
    *client* event it answers, when the server could tell), ``error_type`` (the OpenAI
    class: ``invalid_request_error`` ...) and ``event`` (the typed error event).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        event_id: str | None = None,
        error_type: str | None = None,
        event: Any = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.message = message
        self.code = code
        self.param = param
        self.event_id = event_id
        self.error_type = error_type
        self.event = event

    @classmethod
    def from_event(cls, event: Any) -> DuplexProtocolError:
        """From a typed ``error`` event (``ErrorEvent``) or its wire dict."""
        if isinstance(event, Mapping):
            body = event.get("error")
            body = body if isinstance(body, Mapping) else {}
            return cls(
                str(body.get("message", "")),
                code=body.get("code"),
                param=body.get("param"),
                event_id=body.get("event_id"),
                error_type=body.get("type"),
                event=event,
            )
        resolve = getattr(event, "resolved_error_class", None)
        return cls(
            str(getattr(event, "message", "") or ""),
            code=getattr(event, "code", None),
            param=getattr(event, "param", None),
            event_id=getattr(event, "client_event_id", None),
            error_type=resolve() if callable(resolve) else getattr(event, "error_class", None),
            event=event,
        )


class DuplexSessionClosedError(DuplexClientError):
    """The session ended (``session.closed`` / ``session.expired``) or was never open."""

    def __init__(self, reason: str = "closed", *, event: Any = None) -> None:
        super().__init__(f"duplex session closed: {reason}")
        self.reason = reason
        self.event = event


class DuplexConnectionError(DuplexClientError):
    """The transport failed: a lost socket, a dead engine, a failed send."""


class DuplexEventOverflowError(DuplexClientError):
    """A subscriber fell too far behind and its bounded queue overflowed.

    Raised by that subscriber's iterator at the point where events were lost (everything
    before the gap was delivered); other subscribers and the client are unaffected.
    """

    def __init__(self, message: str, *, dropped: int = 0) -> None:
        super().__init__(message)
        self.dropped = dropped


# ---- accessors ---------------------------------------------------------------------------


class UnparsedEvent:
    """A server object the codec does not know (a newer server's event): kept as is."""

    __slots__ = ("epoch", "event_id", "raw", "session_id", "type")

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = dict(raw)
        kind = raw.get("type")
        self.type = kind if isinstance(kind, str) else ""
        event_id = raw.get("event_id")
        self.event_id = event_id if isinstance(event_id, str) else None
        session_id = raw.get("session_id")
        self.session_id = session_id if isinstance(session_id, str) else None
        self.epoch = None

    def to_realtime(self, dialect: str = "ga") -> dict[str, Any]:
        return dict(self.raw)

    def __repr__(self) -> str:
        return f"UnparsedEvent(type={self.type!r})"


def parse_server_event(obj: Mapping[str, Any]) -> Any:
    """A server wire object (either dialect) as its typed event; unknown ones as
    :class:`UnparsedEvent`, so a newer server never breaks an older client."""
    try:
        return event_from_realtime(obj)
    except RealtimeProtocolError:
        return UnparsedEvent(obj)


def response_id_of(event: Any) -> str | None:
    """The response an event belongs to: ``response_id``, else ``response.id``."""
    response_id = getattr(event, "response_id", None)
    if isinstance(response_id, str):
        return response_id
    response = getattr(event, "response", None)
    if isinstance(response, Mapping):
        rid = response.get("id")
        if isinstance(rid, str):
            return rid
    return None


def decode_output_audio(event: Any, default_rate_hz: int = 24_000) -> tuple[bytes, int]:
    """An audio delta's samples as PCM16 little-endian mono bytes, and their rate.

    The delta's own ``format`` / ``sample_rate_hz`` decide how its base64 is read (pcm16
    passes through; G.711, float and WAV are converted); without them ``pcm16`` at
    ``default_rate_hz`` is assumed, as for a stock OpenAI server.
    """
    raw = b64decode_strict(getattr(event, "delta", "") or "")
    fmt = getattr(event, "format", None) or "pcm16"
    rate = getattr(event, "sample_rate_hz", None) or default_rate_hz
    if fmt in ("pcm16", "pcm_s16le", "s16le", "audio/pcm"):
        return raw, rate
    samples, rate = decode_audio(raw, fmt, rate)
    return encode_audio(samples, "pcm16", rate), rate


EventMatcher = Callable[[Any], bool]


def event_matcher(spec: str | type | EventMatcher | tuple[Any, ...]) -> EventMatcher:
    """A predicate from a type name, an event class, a predicate, or a tuple of those."""
    if isinstance(spec, tuple):
        parts = [event_matcher(part) for part in spec]
        return lambda event: any(part(event) for part in parts)
    if isinstance(spec, str):
        return lambda event: getattr(event, "type", None) == spec
    if isinstance(spec, type):
        return lambda event: isinstance(event, spec)
    if callable(spec):
        return spec
    raise TypeError(f"cannot match events with {spec!r}")
