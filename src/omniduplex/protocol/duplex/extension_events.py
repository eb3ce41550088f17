"""Tier 3 server events: ours alone, for what only a duplex session has.

The model decides when to listen and when to speak, the client reports what it played,
overlapping speech gets a recorded decision, and a dropped socket re-attaches to a live
session. OpenAI has no such events, so no OpenAI schema constrains them; both dialects
use the same names. ``session_id`` and ``epoch`` appear on the wire only where a class
lists them in ``rendered_identity``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from ..realtime.base import Dialect, RealtimeEvent
from ..realtime.errors import RealtimeProtocolError
from ..realtime.event_decoding import expect
from ..realtime.event_shapes import beta_session

_SESSION_ID: Final = frozenset({"session_id"})
_SESSION_ID_AND_EPOCH: Final = frozenset({"session_id", "epoch"})


@dataclass(kw_only=True, slots=True)
class SessionResumed(RealtimeEvent):
    """A new socket re-attached; ``resume_token`` is the rotated credential."""

    type: ClassVar[str] = "session.resumed"
    beta_type: ClassVar[str | None] = "session.resumed"
    tier: ClassVar[int] = 3
    optional_fields: ClassVar[frozenset[str]] = frozenset({"attachment_generation", "resume_token"})
    rendered_identity: ClassVar[frozenset[str]] = _SESSION_ID

    session: dict[str, Any]
    attachment_generation: int | None = None
    resume_token: str | None = None

    def adapt_beta(self, rendered: dict[str, Any]) -> dict[str, Any]:
        # A beta client reads this session object exactly like session.created's.
        rendered["session"] = beta_session(rendered["session"])
        return rendered


@dataclass(kw_only=True, slots=True)
class SessionReplaced(RealtimeEvent):
    """Sent to the superseded socket when another one took the session over."""

    type: ClassVar[str] = "session.replaced"
    beta_type: ClassVar[str | None] = "session.replaced"
    tier: ClassVar[int] = 3
    rendered_identity: ClassVar[frozenset[str]] = _SESSION_ID

    attachment_generation: int = 0


@dataclass(kw_only=True, slots=True)
class SessionResyncRequired(RealtimeEvent):
    """The replay journal cannot bridge the gap (``journal_gap`` / ``journal_overflow``)."""

    type: ClassVar[str] = "session.resync_required"
    beta_type: ClassVar[str | None] = "session.resync_required"
    tier: ClassVar[int] = 3
    rendered_identity: ClassVar[frozenset[str]] = _SESSION_ID

    reason: str = "journal_gap"


@dataclass(kw_only=True, slots=True)
class SessionClosed(RealtimeEvent):
    """The session's last event. ``event`` carries the close details (``{}`` if none)."""

    type: ClassVar[str] = "session.closed"
    beta_type: ClassVar[str | None] = "session.closed"
    tier: ClassVar[int] = 3
    terminal: ClassVar[bool] = True
    rendered_identity: ClassVar[frozenset[str]] = _SESSION_ID

    reason: str = "closed"
    event: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True, slots=True)
class SessionExpired(SessionClosed):
    """The lease ran out (``disconnect_grace_expired``, ``idle_ttl_expired`` ...).

    A kind of close, so whatever handles ``SessionClosed`` handles this; it has no
    ``event`` on the wire.
    """

    type: ClassVar[str] = "session.expired"
    beta_type: ClassVar[str | None] = "session.expired"

    def wire_fields(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "reason": self.reason}

    @classmethod
    def from_wire_fields(cls, obj: Mapping[str, Any]) -> RealtimeEvent:
        kwargs = {
            "event_id": expect(obj, "event_id", str, required=False),
            "session_id": expect(obj, "session_id", str, required=False),
            "reason": expect(obj, "reason", str),
        }
        return cls(**{k: v for k, v in kwargs.items() if v is not None})


@dataclass(kw_only=True, slots=True)
class SessionHeartbeatAck(RealtimeEvent):
    type: ClassVar[str] = "session.heartbeat_ack"
    beta_type: ClassVar[str | None] = "session.heartbeat_ack"
    tier: ClassVar[int] = 3
    rendered_identity: ClassVar[frozenset[str]] = _SESSION_ID


@dataclass(kw_only=True, slots=True)
class TurnEvent(RealtimeEvent):
    """A turn signal was applied: ``event`` is the signal, ``turn_state`` the result."""

    type: ClassVar[str] = "turn.event"
    beta_type: ClassVar[str | None] = "turn.event"
    tier: ClassVar[int] = 3
    rendered_identity: ClassVar[frozenset[str]] = _SESSION_ID_AND_EPOCH

    event: str
    turn_state: str


@dataclass(kw_only=True, slots=True)
class ResponseListen(RealtimeEvent):
    """The model chose to listen. ``metadata`` is the decision (``reason``, ...).

    With ``response_id`` it ends that pre-created response (its ``response.done``
    follows); without one it stands alone.
    """

    type: ClassVar[str] = "response.listen"
    beta_type: ClassVar[str | None] = "response.listen"
    tier: ClassVar[int] = 3
    rendered_identity: ClassVar[frozenset[str]] = _SESSION_ID_AND_EPOCH

    response_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def wire_fields(self) -> dict[str, Any]:
        response: dict[str, Any] = {"object": "realtime.response", "status": "listening"}
        if self.response_id is not None:
            response["id"] = self.response_id
        response["metadata"] = self.metadata
        out: dict[str, Any] = {
            "session_id": self.session_id,
            "epoch": self.epoch,
            "response": response,
        }
        if self.response_id is not None:
            out["response_id"] = self.response_id
        return out

    @classmethod
    def from_wire_fields(cls, obj: Mapping[str, Any]) -> RealtimeEvent:
        response = expect(obj, "response", Mapping)
        kwargs = {
            "event_id": expect(obj, "event_id", str, required=False),
            "session_id": expect(obj, "session_id", str, required=False),
            "epoch": expect(obj, "epoch", int, required=False),
            "response_id": expect(obj, "response_id", str, required=False),
            "metadata": expect(response, "metadata", Mapping, param="response.metadata"),
        }
        if response.get("id") != kwargs["response_id"]:
            raise RealtimeProtocolError(
                "response.id and response_id disagree", "bad_event", param="response.id"
            )
        return cls(**{k: v for k, v in kwargs.items() if v is not None})


@dataclass(kw_only=True, slots=True)
class ResponseSpeak(RealtimeEvent):
    """The model chose to speak; at most once per response, before its first audio."""

    type: ClassVar[str] = "response.speak"
    beta_type: ClassVar[str | None] = "response.speak"
    tier: ClassVar[int] = 3

    response_id: str | None
    item_id: str | None
    output_index: int = 0
    content_index: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True, slots=True)
class OverlapDecision(RealtimeEvent):
    """What the server did with input that arrived while a response was in progress."""

    type: ClassVar[str] = "overlap.decision"
    beta_type: ClassVar[str | None] = "overlap.decision"
    tier: ClassVar[int] = 3
    rendered_identity: ClassVar[frozenset[str]] = _SESSION_ID_AND_EPOCH

    policy: str | None = None
    action: str | None = None
    reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True, slots=True)
class PlaybackAcknowledged(RealtimeEvent):
    """A ``playback.ack`` was applied; ``event`` is the resulting playback cursor."""

    type: ClassVar[str] = "playback.acknowledged"
    beta_type: ClassVar[str | None] = "playback.acknowledged"
    tier: ClassVar[int] = 3

    event: dict[str, Any]


RAW_TYPE_PREFIX: Final = "duplex."


@dataclass(kw_only=True, slots=True)
class RawDuplexEvent(RealtimeEvent):
    """An internal event with no typed projection, sent as ``duplex.<internal_type>``.

    ``internal_type`` defaults to ``event["type"]``.
    """

    type: ClassVar[str] = RAW_TYPE_PREFIX
    beta_type: ClassVar[str | None] = RAW_TYPE_PREFIX
    tier: ClassVar[int] = 3

    internal_type: str = ""
    event: dict[str, Any]

    def __post_init__(self) -> None:
        RealtimeEvent.__post_init__(self)
        if not self.internal_type:
            internal = self.event.get("type")
            self.internal_type = internal if isinstance(internal, str) else ""
        if not self.internal_type:
            raise ValueError("a raw duplex event needs an internal type")

    @property
    def wire_name(self) -> str:
        return RAW_TYPE_PREFIX + self.internal_type

    def to_realtime(self, dialect: Dialect = "ga") -> dict[str, Any] | None:
        return {"type": self.wire_name, "event_id": self.event_id, "event": self.event}

    def wire_fields(self) -> dict[str, Any]:
        return {"event": self.event}

    @classmethod
    def from_wire_fields(cls, obj: Mapping[str, Any]) -> RealtimeEvent:
        wire_type = expect(obj, "type", str)
        event_id = expect(obj, "event_id", str, required=False)
        return cls(
            internal_type=wire_type.removeprefix(RAW_TYPE_PREFIX),
            event=expect(obj, "event", Mapping),
            **({"event_id": event_id} if event_id is not None else {}),
        )


def raw_event_class(wire_type: str) -> type[RealtimeEvent] | None:
    """``RawDuplexEvent`` for a ``duplex.<something>`` type, else ``None``."""
    if wire_type.startswith(RAW_TYPE_PREFIX) and len(wire_type) > len(RAW_TYPE_PREFIX):
        return RawDuplexEvent
    return None


TIER3_EVENT_CLASSES: tuple[type[RealtimeEvent], ...] = (
    SessionResumed,
    SessionReplaced,
    SessionResyncRequired,
    SessionClosed,
    SessionExpired,
    SessionHeartbeatAck,
    TurnEvent,
    ResponseListen,
    ResponseSpeak,
    OverlapDecision,
    PlaybackAcknowledged,
    RawDuplexEvent,
)
