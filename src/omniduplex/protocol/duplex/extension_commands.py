"""Our own client commands (Tier 3): text input, cancels, turn signals, playback, lifecycle.

``session.resume`` and ``session.event_ack`` are transport commands: the serving layer
answers them itself (resume as a connection's first message only), but they decode here
like every other command so that one decoder covers the whole vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from ..realtime.base import Dialect, RealtimeCommand
from ..realtime.commands import DecodeContext, wire_envelope
from ..realtime.wire_values import (
    fail,
    json_copy,
    json_object,
    milliseconds,
    non_negative_int,
    optional_bool,
    optional_id,
    required_id,
)

__all__ = [
    "AckEvents",
    "AckPlayback",
    "AppendText",
    "BargeIn",
    "CancelInput",
    "CloseSession",
    "Heartbeat",
    "ResumeSession",
    "SignalTurn",
]


@dataclass(kw_only=True, slots=True)
class AppendText(RealtimeCommand):
    """``input.text.append``: user text into the current input turn."""

    type: ClassVar[str] = "input.text.append"
    aliases: ClassVar[tuple[str, ...]] = ("input_text.append", "push_text")
    tier: ClassVar[int] = 3

    text: str

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        if not ctx.capabilities.text_input:
            raise fail(
                "input.text.append is not supported by this model",
                "text",
                "native_text_append_unsupported",
            )
        text = obj.get("text")
        if not isinstance(text, str):
            raise fail("text is required and must be a string", "text")
        return cls(event_id=ctx.event_id, text=text)


@dataclass(kw_only=True, slots=True)
class CancelInput(RealtimeCommand):
    """``input.cancel``: drop the input turn and cancel what answers it."""

    type: ClassVar[str] = "input.cancel"
    tier: ClassVar[int] = 3

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        return cls(event_id=ctx.event_id)


@dataclass(kw_only=True, slots=True)
class BargeIn(RealtimeCommand):
    """``barge_in``: the user interrupts; cancel the response and the pending input."""

    type: ClassVar[str] = "barge_in"
    tier: ClassVar[int] = 3

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        return cls(event_id=ctx.event_id)


@dataclass(kw_only=True, slots=True)
class SignalTurn(RealtimeCommand):
    """``turn.signal`` (alias ``signal_turn``): an external turn signal.

    ``event`` is the signal name, echoed in ``turn.event``; ``signal_payload`` is the wire
    ``payload`` object. Signals that name one of our commands decode to that command
    instead (see ``REMAPPED_SIGNALS``).
    """

    type: ClassVar[str] = "turn.signal"
    aliases: ClassVar[tuple[str, ...]] = ("signal_turn",)
    tier: ClassVar[int] = 3

    event: str
    signal_payload: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        event = required_id(obj.get("event"), "event")
        payload = json_object(obj.get("payload"), "payload") or {}
        return cls(event_id=ctx.event_id, event=event, signal_payload=payload)

    def to_realtime(self, dialect: Dialect = "ga") -> dict[str, Any]:
        out = wire_envelope(self)
        out["event"] = self.event
        if self.signal_payload:
            out["payload"] = json_copy(self.signal_payload, "payload")
        return out


@dataclass(kw_only=True, slots=True)
class AckPlayback(RealtimeCommand):
    """``playback.ack`` (alias ``audio.playback_ack``): the client played ``played_ms``.

    ``committed_ms``: how much to keep in history (default: what was played).
    ``truncate``: cut the assistant turn at that point, as ``conversation.item.truncate``
    does (decision 5).
    """

    type: ClassVar[str] = "playback.ack"
    aliases: ClassVar[tuple[str, ...]] = ("audio.playback_ack",)
    tier: ClassVar[int] = 3

    played_ms: int
    committed_ms: int | None = None
    response_id: str | None = None
    item_id: str | None = None
    truncate: bool = False

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        played = obj.get("played_ms")
        if played is None:
            raise fail("played_ms is required", "played_ms")
        committed = obj.get("committed_ms")
        truncate = optional_bool(obj.get("truncate"), "truncate")
        return cls(
            event_id=ctx.event_id,
            played_ms=milliseconds(played, "played_ms"),
            committed_ms=None if committed is None else milliseconds(committed, "committed_ms"),
            response_id=optional_id(obj.get("response_id"), "response_id"),
            item_id=optional_id(obj.get("item_id"), "item_id"),
            truncate=bool(truncate),
        )


@dataclass(kw_only=True, slots=True)
class Heartbeat(RealtimeCommand):
    """``session.heartbeat``: keep the session's lease alive."""

    type: ClassVar[str] = "session.heartbeat"
    tier: ClassVar[int] = 3

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        return cls(event_id=ctx.event_id)


@dataclass(kw_only=True, slots=True)
class CloseSession(RealtimeCommand):
    """``session.close`` (aliases ``close``, ``close_session``): end the session."""

    type: ClassVar[str] = "session.close"
    aliases: ClassVar[tuple[str, ...]] = ("close", "close_session")
    tier: ClassVar[int] = 3

    reason: str = "client_close"

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        reason = optional_id(obj.get("reason"), "reason")
        return cls(event_id=ctx.event_id, reason=reason or "client_close")


@dataclass(kw_only=True, slots=True)
class ResumeSession(RealtimeCommand):
    """``session.resume``: reattach a new connection to a detached session (decision 9).

    Valid only as a connection's first message; the transport enforces that. Replays the
    journal after ``last_received_server_event_seq``.
    """

    type: ClassVar[str] = "session.resume"
    tier: ClassVar[int] = 3

    session_id: str
    # A credential: kept out of reprs and logs.
    resume_token: str = field(repr=False)
    last_received_server_event_seq: int = 0

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        code = "invalid_session_resume"
        seq = obj.get("last_received_server_event_seq")
        return cls(
            event_id=ctx.event_id,
            session_id=required_id(obj.get("session_id"), "session_id", code),
            resume_token=required_id(obj.get("resume_token"), "resume_token", code),
            last_received_server_event_seq=(
                0 if seq is None else non_negative_int(seq, "last_received_server_event_seq", code)
            ),
        )


@dataclass(kw_only=True, slots=True)
class AckEvents(RealtimeCommand):
    """``session.event_ack``: the client holds every event up to ``server_event_seq``."""

    type: ClassVar[str] = "session.event_ack"
    tier: ClassVar[int] = 3

    server_event_seq: int

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        seq = obj.get("server_event_seq")
        code = "invalid_event_ack"
        if seq is None:
            raise fail("server_event_seq is required", "server_event_seq", code)
        return cls(
            event_id=ctx.event_id, server_event_seq=non_negative_int(seq, "server_event_seq", code)
        )
