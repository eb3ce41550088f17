"""The whole client vocabulary and THE decoder of client events.

Tier 1 (OpenAI's commands, unchanged) is re-exported from ``protocol.realtime.commands``.
Tier 2 twins subclass their Tier 1 class and add only their extensions: ``AppendAudio``
(speech verdict, client hints, camera frames) and ``Commit`` (``final``,
``create_response``, ``is_speech``, ``item_id``). Tier 3 is ours: text input, input
cancel, barge-in, turn signals, playback acks, heartbeat, close, and the two transport
commands ``session.resume`` / ``session.event_ack``.

``command_from_realtime`` turns one client object into one command or raises
``DuplexCommandError`` (a ``RealtimeProtocolError``) carrying the client's ``event_id``,
whatever the JSON. ``parse_client_frame`` does the envelope checks on the raw frame first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, Self

import orjson

from ..realtime import commands as tier1
from ..realtime.audio import b64encode_str
from ..realtime.audio_input import speech_hint
from ..realtime.base import Dialect, RealtimeCommand
from ..realtime.capabilities import RealtimeProtocolCapabilities
from ..realtime.commands import (
    CancelResponse,
    ClearInput,
    ClearOutputAudio,
    CreateItem,
    CreateResponse,
    DecodeContext,
    DeleteItem,
    RetrieveItem,
    TruncateItem,
    UpdateSession,
    decode_append,
    wire_envelope,
)
from ..realtime.errors import RealtimeProtocolError
from ..realtime.session import RealtimeInputDefaults, next_input_defaults
from ..realtime.wire_values import (
    MAX_ID_CHARS,
    fail,
    json_copy,
    optional_bool,
    optional_id,
    quote,
)
from .errors import DuplexCommandError
from .extension_commands import (
    AckEvents,
    AckPlayback,
    AppendText,
    BargeIn,
    CancelInput,
    CloseSession,
    Heartbeat,
    ResumeSession,
    SignalTurn,
)

MAX_EVENT_BYTES: Final = 15 * 1024 * 1024
# The decoder's default consumer: every codec format, and turn detection limited to what
# the duplex engine runs (server_vad or null).
DUPLEX_REALTIME_CAPABILITIES: Final = RealtimeProtocolCapabilities(validate_turn_detection=True)

__all__ = [
    "CANONICAL_TYPES",
    "COMMAND_CLASSES",
    "COMMAND_TYPES",
    "DUPLEX_REALTIME_CAPABILITIES",
    "MAX_EVENT_BYTES",
    "REMAPPED_SIGNALS",
    "AckEvents",
    "AckPlayback",
    "AppendAudio",
    "AppendText",
    "BargeIn",
    "CancelInput",
    "CancelResponse",
    "ClearInput",
    "ClearOutputAudio",
    "CloseSession",
    "Commit",
    "CreateItem",
    "CreateResponse",
    "DecodeContext",
    "DeleteItem",
    "DuplexCommandError",
    "Heartbeat",
    "RealtimeCommand",
    "RealtimeProtocolError",
    "ResumeSession",
    "RetrieveItem",
    "SignalTurn",
    "TruncateItem",
    "UpdateSession",
    "command_from_realtime",
    "decode_client_frame",
    "next_input_defaults",
    "parse_client_frame",
]


# ---- Tier 2 -----------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class AppendAudio(tier1.AppendAudio):
    """``input_audio_buffer.append`` + our extensions.

    ``is_speech``: the client's speech verdict from its hints (``None`` when it gave none;
    ``False`` for a frames-only append). ``hints``: the client hint keys of wire.md 5.8,
    as sent. ``video_frames``: bare base64 JPEG/PNG camera frames riding this append.
    """

    tier: ClassVar[int] = 2

    is_speech: bool | None = None
    video_frames: tuple[str, ...] = field(default=(), repr=False)  # megabytes of base64
    hints: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        append = decode_append(obj, ctx)
        return cls(
            event_id=ctx.event_id,
            audio=append.audio,
            format=append.format,
            sample_rate_hz=append.sample_rate_hz,
            is_speech=append.is_speech,
            video_frames=tuple(append.video_frames),
            hints=dict(append.hints),
        )

    def to_realtime(self, dialect: Dialect = "ga") -> dict[str, Any]:
        out = wire_envelope(self)
        out.update(json_copy(self.hints, "hints"))
        if self.is_speech is not None and self.is_speech != self._implied_speech():
            out["is_speech"] = self.is_speech
        out["audio"] = b64encode_str(self.audio)
        out["format"] = self.format
        out["sample_rate_hz"] = self.sample_rate_hz
        if self.video_frames:
            out["video_frames"] = list(self.video_frames)
        return out

    def _implied_speech(self) -> bool | None:
        # What decoding the rendered hints will conclude; only a verdict that differs from
        # it needs stating.
        verdict = speech_hint(self.hints)
        if verdict is None and not self.audio:
            return False
        return verdict


@dataclass(kw_only=True, slots=True)
class Commit(tier1.Commit):
    """``input_audio_buffer.commit`` (alias ``input.commit``) + our extensions.

    ``final``: the utterance is complete (default true). ``create_response``: answer it
    (``None``: the session's turn policy decides, decision 16; ``input.commit`` defaults to
    true). Under the session's ``extra_body.auto_response: true`` every committed turn is
    answered, whatever ``create_response`` says, as in the reference; ``auto_response``
    on the commit itself overrides the session's for this turn. ``is_speech``: the
    client's verdict on the buffered audio. ``item_id``: the user item id to commit under
    (else the server allocates one). ``response_create`` is read as a spelling of
    ``create_response``.
    """

    tier: ClassVar[int] = 2
    aliases: ClassVar[tuple[str, ...]] = ("input.commit",)

    final: bool = True
    create_response: bool | None = None
    auto_response: bool | None = None
    is_speech: bool | None = None
    item_id: str | None = None

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        final = optional_bool(obj.get("final"), "final")
        key = "response_create" if obj.get("response_create") is not None else "create_response"
        create_response = optional_bool(obj.get(key), key)
        if create_response is None and ctx.wire_type == "input.commit":
            create_response = True
        return cls(
            event_id=ctx.event_id,
            final=True if final is None else final,
            create_response=create_response,
            auto_response=optional_bool(obj.get("auto_response"), "auto_response"),
            is_speech=optional_bool(obj.get("is_speech"), "is_speech"),
            item_id=optional_id(obj.get("item_id"), "item_id"),
        )


# ---- the vocabulary ---------------------------------------------------------------------

COMMAND_CLASSES: Final[tuple[type[RealtimeCommand], ...]] = (
    # Tier 1
    UpdateSession,
    ClearInput,
    ClearOutputAudio,
    CreateResponse,
    CancelResponse,
    CreateItem,
    DeleteItem,
    TruncateItem,
    RetrieveItem,
    # Tier 2
    AppendAudio,
    Commit,
    # Tier 3
    AppendText,
    CancelInput,
    BargeIn,
    SignalTurn,
    AckPlayback,
    Heartbeat,
    CloseSession,
    ResumeSession,
    AckEvents,
)


def _by_wire_type() -> dict[str, type[RealtimeCommand]]:
    table: dict[str, type[RealtimeCommand]] = {}
    for cls in COMMAND_CLASSES:
        for name in (cls.type, *cls.aliases):
            table[name] = cls
    return table


# Every accepted wire type (canonical names and aliases) -> its class.
COMMAND_TYPES: Final[Mapping[str, type[RealtimeCommand]]] = MappingProxyType(_by_wire_type())
CANONICAL_TYPES: Final[frozenset[str]] = frozenset(cls.type for cls in COMMAND_CLASSES)
# turn.signal events that are really one of our commands: decoded as that command, with
# the same validation as when it is sent directly.
REMAPPED_SIGNALS: Final[frozenset[str]] = frozenset(
    {
        CancelInput.type,
        BargeIn.type,
        CancelResponse.type,
        ClearOutputAudio.type,
        UpdateSession.type,
        CreateItem.type,
        DeleteItem.type,
        TruncateItem.type,
        RetrieveItem.type,
    }
)


# ---- decoding ---------------------------------------------------------------------------


def _client_event_id(obj: Any) -> str | None:
    """The event id to echo: a non-empty string of sane length, else none."""
    if not isinstance(obj, Mapping):
        return None
    raw = obj.get("event_id")
    if isinstance(raw, str) and 0 < len(raw) <= MAX_ID_CHARS:
        return raw
    return None


def _as_duplex_error(exc: RealtimeProtocolError, event_id: str | None) -> DuplexCommandError:
    if isinstance(exc, DuplexCommandError):
        exc.with_event_id(event_id)
        return exc
    return DuplexCommandError(
        exc.message, exc.code, event_id=event_id or exc.event_id, param=exc.param
    )


def command_from_realtime(
    obj: Any,
    *,
    defaults: RealtimeInputDefaults | None = None,
    capabilities: RealtimeProtocolCapabilities | None = None,
) -> RealtimeCommand:
    """Decode one client event object into its typed command.

    ``defaults``: the connection's negotiated formats (appends that name none use them).
    ``capabilities``: what the consumer serves; default ``DUPLEX_REALTIME_CAPABILITIES``.
    Raises ``DuplexCommandError`` for anything that is not a valid client event, with the
    client's ``event_id`` echoed when it is a usable string; raises nothing else.
    """
    event_id = _client_event_id(obj)
    try:
        return _decode_event(
            obj,
            event_id,
            defaults or RealtimeInputDefaults(),
            capabilities or DUPLEX_REALTIME_CAPABILITIES,
        )
    except RealtimeProtocolError as exc:
        raise _as_duplex_error(exc, event_id) from None
    except RecursionError:
        raise DuplexCommandError(
            "event is nested too deeply", "bad_event", event_id=event_id
        ) from None


def _decode_event(
    obj: Any,
    event_id: str | None,
    defaults: RealtimeInputDefaults,
    capabilities: RealtimeProtocolCapabilities,
) -> RealtimeCommand:
    if not isinstance(obj, Mapping):
        raise fail("event must be a JSON object with a type", "type")
    wire_type = obj.get("type")
    if not isinstance(wire_type, str):
        raise fail("event must be a JSON object with a type", "type")
    raw_event_id = obj.get("event_id")
    if raw_event_id is not None and (
        not isinstance(raw_event_id, str) or len(raw_event_id) > MAX_ID_CHARS
    ):
        raise fail(f"event_id must be a string of at most {MAX_ID_CHARS} characters", "event_id")
    cls = COMMAND_TYPES.get(wire_type)
    if cls is None:
        raise fail(f"Unknown client event type: {quote(wire_type)}", "type", "unknown_event")
    # From here on every reader sees plain JSON: str keys, finite numbers, bounded depth.
    event: dict[str, Any] = json_copy(obj, "event")
    ctx = DecodeContext(wire_type, event_id, defaults, capabilities)
    if cls is SignalTurn:
        return _decode_signal(event, ctx)
    command: RealtimeCommand = cls.from_realtime(event, ctx)  # type: ignore[attr-defined]
    return command


def _decode_signal(event: dict[str, Any], ctx: DecodeContext) -> RealtimeCommand:
    signal = SignalTurn.from_realtime(event, ctx)
    target = COMMAND_TYPES.get(signal.event) if signal.event in REMAPPED_SIGNALS else None
    if target is None:
        return signal
    inner: dict[str, Any] = dict(signal.signal_payload)
    inner["type"] = signal.event
    if target is CancelResponse and inner.get("response_id") is None:
        inner["response_id"] = event.get("response_id")
    inner_ctx = DecodeContext(signal.event, ctx.event_id, ctx.defaults, ctx.capabilities)
    command: RealtimeCommand = target.from_realtime(inner, inner_ctx)  # type: ignore[attr-defined]
    return command


def _utf8_length_exceeds(text: str, limit: int) -> bool:
    # A code point takes 1-4 bytes: most frames are decided without encoding them.
    if len(text) > limit:
        return True
    if len(text) * 4 <= limit:
        return False
    return len(text.encode("utf-8", "surrogatepass")) > limit


def parse_client_frame(text: str | bytes, *, max_bytes: int = MAX_EVENT_BYTES) -> dict[str, Any]:
    """The JSON object of one client text frame, after the envelope checks (wire.md 1.3).

    Over ``max_bytes`` of UTF-8 ⇒ ``event_too_large`` (checked before parsing); not JSON
    ⇒ ``invalid_json``; not an object with a string ``type`` ⇒ ``bad_event``.
    """
    if isinstance(text, bytes | bytearray | memoryview):
        too_large = len(text) > max_bytes
    elif isinstance(text, str):
        too_large = _utf8_length_exceeds(text, max_bytes)
    else:
        raise DuplexCommandError("a client frame must be text", "bad_event")
    if too_large:
        raise DuplexCommandError(f"event exceeds the {max_bytes}-byte limit", "event_too_large")
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise DuplexCommandError("event is not valid JSON", "invalid_json") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise DuplexCommandError(
            "event must be a JSON object with a type",
            "bad_event",
            event_id=_client_event_id(obj),
            param="type",
        )
    return obj


def decode_client_frame(
    text: str | bytes,
    *,
    defaults: RealtimeInputDefaults | None = None,
    capabilities: RealtimeProtocolCapabilities | None = None,
    max_bytes: int = MAX_EVENT_BYTES,
) -> RealtimeCommand:
    """``parse_client_frame`` then ``command_from_realtime``: one frame, one command."""
    obj = parse_client_frame(text, max_bytes=max_bytes)
    return command_from_realtime(obj, defaults=defaults, capabilities=capabilities)
