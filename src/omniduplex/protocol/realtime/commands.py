"""OpenAI's client commands (Tier 1): typed, validated, and rendered back to the wire.

Each class decodes itself from a wire object (``from_realtime``) and renders itself back
(``to_realtime``) so that decoding the rendering gives an equal command. Decoding is driven
by ``protocol.duplex.commands.command_from_realtime``, which checks the envelope, picks the
class by ``type`` and echoes the client's ``event_id`` on every failure; the classes here
only read their own fields.

``conversation.item.retrieve`` is counted with OpenAI's commands: it is OpenAI's event,
answered from the conversation the session keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Self

from .audio import SAMPLE_WIDTH, b64encode_str
from .audio_input import RealtimeAudioAppend, decode_audio_append
from .base import Dialect, RealtimeCommand
from .capabilities import RealtimeProtocolCapabilities
from .errors import RealtimeProtocolError
from .formats import DEFAULT_INPUT_RATE_HZ, PCM16, AudioFormat
from .items import normalize_item
from .session import (
    MaxTokens,
    RealtimeInputDefaults,
    read_instructions,
    read_max_output_tokens,
    read_output_format,
    read_output_modalities,
    read_speed,
    read_temperature,
    read_voice,
    session_of_update,
    validate_session,
)
from .session_patch import FieldRejection, apply_partially
from .transcription_session import TRANSCRIPTION_SESSION_TYPE, TRANSCRIPTION_UPDATE_TYPE
from .wire_values import (
    check_metadata,
    fail,
    json_copy,
    json_object,
    milliseconds,
    non_negative_int,
    one_of,
    optional_id,
    required_id,
)

# What ``response.conversation`` may say: the default conversation, or none (out of band).
RESPONSE_CONVERSATIONS: Final = frozenset({"auto", "none"})
ITEM_REFERENCE: Final = "item_reference"

__all__ = [
    "AppendAudio",
    "CancelResponse",
    "ClearInput",
    "ClearOutputAudio",
    "Commit",
    "CreateItem",
    "CreateResponse",
    "DecodeContext",
    "DeleteItem",
    "RealtimeCommand",
    "RetrieveItem",
    "TruncateItem",
    "UpdateSession",
    "decode_append",
    "wire_envelope",
]


@dataclass(frozen=True, slots=True)
class DecodeContext:
    """What decoding one command may depend on besides the object itself.

    ``wire_type`` is the type as the client spelled it (an alias may change a default).
    """

    wire_type: str
    event_id: str | None
    defaults: RealtimeInputDefaults
    capabilities: RealtimeProtocolCapabilities


def wire_envelope(command: RealtimeCommand) -> dict[str, Any]:
    """``type`` and, when the client gave one, ``event_id``: the start of every rendering."""
    out: dict[str, Any] = {"type": command.type}
    if command.event_id is not None:
        out["event_id"] = command.event_id
    return out


def _prefixed(exc: RealtimeProtocolError, prefix: str) -> RealtimeProtocolError:
    # Readers name fields relative to the object they read; on the wire the error names
    # the field from the event's top level.
    if exc.param is not None:
        exc.param = f"{prefix}.{exc.param}"
    return exc


# ---- session ----------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class UpdateSession(RealtimeCommand):
    """``session.update``: ``patch`` is the client's session object, validated, as sent.

    A field the codec refuses is left out of ``patch`` and listed in ``rejected`` (the
    engine reports each as an ``error`` and applies the rest, ``session_patch``); only an
    update with nothing valid left is refused whole. Error params name fields relative to
    the session object (``turn_detection``, ``audio.input.format``), as OpenAI clients
    read them.
    """

    type: ClassVar[str] = "session.update"
    # Beta's update of a transcription session: the same fields, its type implied.
    aliases: ClassVar[tuple[str, ...]] = (TRANSCRIPTION_UPDATE_TYPE,)

    patch: dict[str, Any] = field(default_factory=dict)
    # A report of decoding, not content: a rendering carries only what was accepted.
    rejected: tuple[FieldRejection, ...] = field(default=(), compare=False)

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        patch = json_copy(session_of_update(obj), "session")
        if ctx.wire_type == TRANSCRIPTION_UPDATE_TYPE:
            patch["type"] = TRANSCRIPTION_SESSION_TYPE
        outcome = apply_partially(patch, lambda rest: validate_session(rest, ctx.capabilities))
        if not outcome.applied:
            first = outcome.rejected[0]
            raise RealtimeProtocolError(first.message, first.code, param=first.param)
        return cls(event_id=ctx.event_id, patch=outcome.patch, rejected=outcome.rejected)

    def to_realtime(self, dialect: Dialect = "ga") -> dict[str, Any]:
        out = wire_envelope(self)
        out["session"] = json_copy(self.patch, "session")
        return out


# ---- input audio buffer -----------------------------------------------------------------


def decode_append(obj: Mapping[str, Any], ctx: DecodeContext) -> RealtimeAudioAppend:
    """Decode an append once (shared by the Tier 1 and Tier 2 classes)."""
    append = decode_audio_append(obj, ctx.defaults)
    if append.audio and not ctx.capabilities.accepts_input_format(append.format):
        raise fail(
            f"Unsupported input_audio_format: {append.format}", "format", "unsupported_audio_format"
        )
    return append


@dataclass(kw_only=True, slots=True)
class AppendAudio(RealtimeCommand):
    """``input_audio_buffer.append``: raw audio bytes in the client's format and rate.

    The rendering states ``format`` and ``sample_rate_hz`` so that it decodes the same way
    whatever the connection's defaults are.
    """

    type: ClassVar[str] = "input_audio_buffer.append"

    # Raw audio would flood every repr and log line that shows the command.
    audio: bytes = field(repr=False)
    format: str = PCM16
    sample_rate_hz: int = DEFAULT_INPUT_RATE_HZ

    @property
    def duration_ms(self) -> float:
        width = SAMPLE_WIDTH.get(self.format)
        if not width or self.sample_rate_hz <= 0:
            return 0.0
        return len(self.audio) // width * 1000.0 / self.sample_rate_hz

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        append = decode_append(obj, ctx)
        return cls(
            event_id=ctx.event_id,
            audio=append.audio,
            format=append.format,
            sample_rate_hz=append.sample_rate_hz,
        )

    def to_realtime(self, dialect: Dialect = "ga") -> dict[str, Any]:
        out = wire_envelope(self)
        out["audio"] = b64encode_str(self.audio)
        out["format"] = self.format
        out["sample_rate_hz"] = self.sample_rate_hz
        return out


@dataclass(kw_only=True, slots=True)
class Commit(RealtimeCommand):
    """``input_audio_buffer.commit``: turn the buffered input into a user item."""

    type: ClassVar[str] = "input_audio_buffer.commit"

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        return cls(event_id=ctx.event_id)


@dataclass(kw_only=True, slots=True)
class ClearInput(RealtimeCommand):
    """``input_audio_buffer.clear``: drop the buffered input."""

    type: ClassVar[str] = "input_audio_buffer.clear"

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        return cls(event_id=ctx.event_id)


@dataclass(kw_only=True, slots=True)
class ClearOutputAudio(RealtimeCommand):
    """``output_audio_buffer.clear``: stop the output (of ``response_id``, else the current)."""

    type: ClassVar[str] = "output_audio_buffer.clear"

    response_id: str | None = None

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        return cls(
            event_id=ctx.event_id, response_id=optional_id(obj.get("response_id"), "response_id")
        )


# ---- responses --------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class CreateResponse(RealtimeCommand):
    """``response.create``: ``options`` is the client's ``response`` object, validated, as sent.

    The options a model may or may not honour (instructions, temperature, token cap, voice,
    modalities, output format) are read through the properties below; whether the session
    honours them is the engine's call, not the decoder's.
    """

    type: ClassVar[str] = "response.create"

    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        options = json_object(obj.get("response"), "response") or {}
        try:
            read_output_format(options, ctx.capabilities)
            for reader in (
                read_instructions,
                read_temperature,
                read_max_output_tokens,
                read_voice,
                read_output_modalities,
                read_speed,
            ):
                reader(options)
            conversation = options.get("conversation")
            if conversation is not None and not one_of(conversation, RESPONSE_CONVERSATIONS):
                raise fail("conversation must be 'auto' or 'none'", "conversation")
            check_metadata(options.get("metadata"), "metadata")
            if options.get("input") is not None:
                options["input"] = _response_input(options["input"], ctx)
        except RealtimeProtocolError as exc:
            raise _prefixed(exc, "response") from None
        return cls(event_id=ctx.event_id, options=options)

    def to_realtime(self, dialect: Dialect = "ga") -> dict[str, Any]:
        out = wire_envelope(self)
        if self.options:
            out["response"] = json_copy(self.options, "response")
        return out

    @property
    def instructions(self) -> str | None:
        return read_instructions(self.options)

    @property
    def temperature(self) -> float | None:
        return read_temperature(self.options)

    @property
    def max_output_tokens(self) -> MaxTokens | None:
        return read_max_output_tokens(self.options)

    @property
    def voice(self) -> str | None:
        return read_voice(self.options)

    @property
    def output_modalities(self) -> tuple[str, ...] | None:
        return read_output_modalities(self.options)

    @property
    def output_format(self) -> AudioFormat | None:
        return read_output_format(self.options)

    @property
    def conversation(self) -> str | None:
        value = self.options.get("conversation")
        return value if isinstance(value, str) else None

    @property
    def out_of_band(self) -> bool:
        """Whether the response stays outside the default conversation."""
        return self.conversation == "none"


def _response_input(raw: Any, ctx: DecodeContext) -> list[dict[str, Any]]:
    """``response.input``: the response's whole context instead of the conversation.

    Each entry is an inline item (normalised as ``conversation.item.create``'s, an id
    allocated if absent) or ``{"type": "item_reference", "id": ...}`` naming a conversation
    item, which the engine resolves when the response starts.
    """
    if not isinstance(raw, list | tuple):
        raise fail("input must be a list of items", "input")
    items: list[dict[str, Any]] = []
    for index, entry in enumerate(raw):
        param = f"input[{index}]"
        if isinstance(entry, Mapping) and entry.get("type") == ITEM_REFERENCE:
            item_id = required_id(entry.get("id"), f"{param}.id")
            items.append({"type": ITEM_REFERENCE, "id": item_id})
            continue
        items.append(normalize_item(entry, capabilities=ctx.capabilities, param=param))
    return items


@dataclass(kw_only=True, slots=True)
class CancelResponse(RealtimeCommand):
    """``response.cancel``: cancel ``response_id``, else the response in progress."""

    type: ClassVar[str] = "response.cancel"

    response_id: str | None = None

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        return cls(
            event_id=ctx.event_id, response_id=optional_id(obj.get("response_id"), "response_id")
        )


# ---- conversation items -----------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class CreateItem(RealtimeCommand):
    """``conversation.item.create``: ``item`` normalised (id allocated if the client gave none)."""

    type: ClassVar[str] = "conversation.item.create"

    item: dict[str, Any]
    previous_item_id: str | None = None

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        item = normalize_item(obj.get("item"), capabilities=ctx.capabilities)
        previous = optional_id(obj.get("previous_item_id"), "previous_item_id")
        return cls(event_id=ctx.event_id, item=item, previous_item_id=previous)


@dataclass(kw_only=True, slots=True)
class _ItemCommand(RealtimeCommand):
    """A command that names one conversation item (``missing_item_id`` without one)."""

    item_id: str

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        return cls(
            event_id=ctx.event_id,
            item_id=required_id(obj.get("item_id"), "item_id", "missing_item_id"),
        )


@dataclass(kw_only=True, slots=True)
class DeleteItem(_ItemCommand):
    """``conversation.item.delete``."""

    type: ClassVar[str] = "conversation.item.delete"


@dataclass(kw_only=True, slots=True)
class RetrieveItem(_ItemCommand):
    """``conversation.item.retrieve``: answered with ``conversation.item.retrieved``."""

    type: ClassVar[str] = "conversation.item.retrieve"


@dataclass(kw_only=True, slots=True)
class TruncateItem(RealtimeCommand):
    """``conversation.item.truncate``: the client heard ``audio_end_ms`` of the item's audio."""

    type: ClassVar[str] = "conversation.item.truncate"

    item_id: str
    content_index: int = 0
    audio_end_ms: int

    @classmethod
    def from_realtime(cls, obj: Mapping[str, Any], ctx: DecodeContext) -> Self:
        item_id = required_id(obj.get("item_id"), "item_id", "missing_item_id")
        raw_end = obj.get("audio_end_ms")
        if raw_end is None:
            raise fail("audio_end_ms is required", "audio_end_ms")
        audio_end_ms = milliseconds(raw_end, "audio_end_ms")
        raw_index = obj.get("content_index")
        content_index = 0 if raw_index is None else non_negative_int(raw_index, "content_index")
        return cls(
            event_id=ctx.event_id,
            item_id=item_id,
            content_index=content_index,
            audio_end_ms=audio_end_ms,
        )
