"""Conversation items: their ids, the shape a client item is normalised to, and truncation.

A client item (``conversation.item.create``) is validated and completed set-if-absent:
``id`` (``item_<32 hex>``), ``object: realtime.item``, ``type: message``, ``status:
completed``, and for messages ``role: user`` and ``content: []``. Other keys are kept.

Truncation keeps the part of an assistant transcript that was heard: ``audio_text_marks``
(``{text_chars, audio_end_ms}`` pairs the model reports while speaking) map audio time to
text, else the audio duration does proportionally (wire.md 7.4).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .capabilities import PERMISSIVE_CAPABILITIES, RealtimeProtocolCapabilities
from .images import IMAGE_PART_TYPE, INVALID_IMAGE, check_image_part
from .session import parse_format
from .wire_values import (
    MAX_ID_CHARS,
    fail,
    is_number,
    json_copy,
    one_of,
    optional_id,
    optional_str,
    quote,
)

ITEM_ID_PREFIX: Final = "item_"
ITEM_OBJECT: Final = "realtime.item"
MESSAGE_ROLES: Final[frozenset[str]] = frozenset({"user", "assistant", "system"})
# Content parts that carry audio, in GA and beta spelling.
AUDIO_PART_TYPES: Final[frozenset[str]] = frozenset({"input_audio", "audio"})
# Parts a truncation may target: what an assistant item holds, in either spelling.
TRUNCATABLE_PART_TYPES: Final[frozenset[str]] = frozenset({"output_audio", "audio"})
PART_DURATION_KEYS: Final = ("audio_duration_ms", "duration_ms", "audio_ms")


# ---- ids --------------------------------------------------------------------------------


def new_item_id() -> str:
    """A fresh item id: ``item_`` + 32 lowercase hex digits."""
    return ITEM_ID_PREFIX + uuid.uuid4().hex


def assistant_item_id(response_id: str) -> str:
    """The id of the assistant item a response speaks into."""
    return ITEM_ID_PREFIX + response_id


def response_id_of_item(item_id: str) -> str | None:
    """The response an assistant item id names, or ``None`` for an id of another shape."""
    if item_id.startswith(ITEM_ID_PREFIX) and len(item_id) > len(ITEM_ID_PREFIX):
        return item_id[len(ITEM_ID_PREFIX) :]
    return None


# ---- normalisation ----------------------------------------------------------------------


def normalize_item(
    raw: Any, *, capabilities: RealtimeProtocolCapabilities | None = None, param: str = "item"
) -> dict[str, Any]:
    """Validate a client item and complete it set-if-absent; returns a fresh JSON copy.

    Audio part formats are checked first (``unsupported_audio_format``); then the item must
    be an object and its known fields must have their types (``bad_event``); an
    ``input_image`` part must sit in a user message and carry a JPEG or PNG ``data:`` URL
    (``invalid_image``); a ``function_call_output`` must name its call and carry a string
    output (``invalid_function_call_output``); an ``mcp_approval_response`` must name the
    request it answers and say ``approve`` true or false.
    """
    caps = capabilities or PERMISSIVE_CAPABILITIES
    if isinstance(raw, Mapping):
        _check_audio_formats(raw.get("content"), caps, param)
    if not isinstance(raw, Mapping):
        raise fail(f"{param} must be an object", param)
    item: dict[str, Any] = json_copy(raw, param)
    if item.get("id") is None:
        item["id"] = new_item_id()
    elif not isinstance(item["id"], str) or not 0 < len(item["id"]) <= MAX_ID_CHARS:
        raise fail(
            f"{param}.id must be a non-empty string of at most {MAX_ID_CHARS}", f"{param}.id"
        )
    item.setdefault("object", ITEM_OBJECT)
    if item.get("type") is None:
        item["type"] = "message"
    kind = item["type"]
    if not isinstance(kind, str) or not kind:
        raise fail(f"{param}.type must be a non-empty string", f"{param}.type")
    if item.get("status") is None:
        item["status"] = "completed"
    optional_str(item["status"], f"{param}.status")
    if kind == "message":
        _normalize_message(item, param)
    elif kind == "function_call_output":
        _check_function_call_output(item, param)
    elif kind == "function_call":
        for key in ("name", "call_id", "arguments"):
            optional_str(item.get(key), f"{param}.{key}")
    elif kind == "mcp_approval_response":
        _check_mcp_approval_response(item, param)
    return item


def _normalize_message(item: dict[str, Any], param: str) -> None:
    if item.get("role") is None:
        item["role"] = "user"
    if not one_of(item["role"], MESSAGE_ROLES):
        raise fail(f"{param}.role must be one of user, assistant, system", f"{param}.role")
    if item.get("content") is None:
        item["content"] = []
    content = item["content"]
    if not isinstance(content, list):
        raise fail(f"{param}.content must be a list", f"{param}.content")
    for index, part in enumerate(content):
        where = f"{param}.content[{index}]"
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise fail(f"{where} must be an object with a string type", where)
        for key in ("text", "transcript", "audio", "data"):
            optional_str(part.get(key), f"{where}.{key}")
        if part["type"] == IMAGE_PART_TYPE:
            if item["role"] != "user":
                raise fail(f"{where}: only a user message may hold an image", where, INVALID_IMAGE)
            check_image_part(part, where)


def _check_function_call_output(item: Mapping[str, Any], param: str) -> None:
    code = "invalid_function_call_output"
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not 0 < len(call_id) <= MAX_ID_CHARS:
        raise fail("function_call_output requires a call_id string", f"{param}.call_id", code)
    if not isinstance(item.get("output"), str):
        raise fail("function_call_output requires a string output", f"{param}.output", code)


def _check_mcp_approval_response(item: Mapping[str, Any], param: str) -> None:
    request_id = item.get("approval_request_id")
    if not isinstance(request_id, str) or not 0 < len(request_id) <= MAX_ID_CHARS:
        raise fail(
            "mcp_approval_response requires the approval_request_id it answers",
            f"{param}.approval_request_id",
        )
    if not isinstance(item.get("approve"), bool):
        raise fail("mcp_approval_response requires approve: true or false", f"{param}.approve")
    optional_str(item.get("reason"), f"{param}.reason")


def _check_audio_formats(content: Any, caps: RealtimeProtocolCapabilities, param: str) -> None:
    if not isinstance(content, list | tuple):
        return
    for index, part in enumerate(content):
        if not isinstance(part, Mapping) or not one_of(part.get("type"), AUDIO_PART_TYPES):
            continue
        raw = part.get("format")
        if raw is not None:
            where = f"{param}.content[{index}].format"
            parse_format(raw, where, output=False, allowed=caps.input_audio_formats)


def audio_parts(item: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """``(content index, part)`` of every audio part of an item, in order."""
    content = item.get("content")
    if not isinstance(content, list):
        return []
    return [
        (index, part)
        for index, part in enumerate(content)
        if isinstance(part, Mapping) and one_of(part.get("type"), AUDIO_PART_TYPES)
    ]


def previous_item_id(raw: Any, param: str = "previous_item_id") -> str | None:
    return optional_id(raw, param)


# ---- truncation -------------------------------------------------------------------------


def part_duration_ms(part: Mapping[str, Any]) -> float | None:
    """The audio duration a content part states, if any (positive finite numbers only)."""
    for key in PART_DURATION_KEYS:
        value = part.get(key)
        if is_number(value) and value > 0:
            return float(value)
    return None


def _marks(raw: Any, text_length: int) -> list[tuple[float, int]]:
    """Valid marks as ``(ms, chars)``, sorted, monotone in both, chars within the text."""
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        return []
    points: list[tuple[float, int]] = []
    for mark in raw:
        if not isinstance(mark, Mapping):
            continue
        ms, chars = mark.get("audio_end_ms"), mark.get("text_chars")
        if is_number(ms) and is_number(chars) and ms >= 0 and chars >= 0:
            points.append((float(ms), min(int(chars), text_length)))
    points.sort(key=lambda point: point[0])
    monotone: list[tuple[float, int]] = []
    floor = 0
    for ms, chars in points:
        floor = max(floor, chars)
        monotone.append((ms, floor))
    return monotone


def _chars_at(
    audio_end_ms: float, marks: list[tuple[float, int]], duration_ms: float | None, length: int
) -> int:
    prev_ms, prev_chars = 0.0, 0
    for ms, chars in marks:
        if audio_end_ms <= ms:
            if ms <= prev_ms:
                return chars
            return prev_chars + math.floor(
                (chars - prev_chars) * (audio_end_ms - prev_ms) / (ms - prev_ms)
            )
        prev_ms, prev_chars = ms, chars
    # Past the last mark: towards the full text at the audio's end, if that end is known.
    if duration_ms is None or duration_ms <= prev_ms:
        return length
    if audio_end_ms >= duration_ms:
        return length
    return prev_chars + math.floor(
        (length - prev_chars) * (audio_end_ms - prev_ms) / (duration_ms - prev_ms)
    )


def truncate_transcript(
    text: str,
    audio_end_ms: float,
    duration_ms: float | None = None,
    audio_text_marks: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """The part of ``text`` spoken in the first ``audio_end_ms`` of its audio.

    With valid marks: piecewise-linear from (0 ms, 0 chars) through the marks, then on to
    the full text at ``duration_ms`` (or the full text at once when the duration is unknown).
    Without marks: the same fraction of the text as of the duration. With neither: nothing
    at or before 0 ms, everything after. The kept prefix is right-stripped.
    """
    if not text:
        return text
    if not is_number(audio_end_ms) or audio_end_ms <= 0:
        return ""
    length = len(text)
    duration = float(duration_ms) if is_number(duration_ms) and duration_ms > 0 else None
    marks = _marks(audio_text_marks, length)
    if marks:
        keep = _chars_at(float(audio_end_ms), marks, duration, length)
    elif duration is not None:
        keep = math.floor(length * min(1.0, float(audio_end_ms) / duration))
    else:
        keep = length
    return text[: max(0, min(keep, length))].rstrip()


def validate_truncate(item: Mapping[str, Any], content_index: int, audio_end_ms: int) -> None:
    """Refuse a truncation the item cannot take (``bad_event``), per wire.md 7.4."""
    if item.get("type") != "message" or item.get("role") != "assistant":
        raise fail("Only assistant message items can be truncated", "item_id")
    if audio_end_ms < 0:
        raise fail("audio_end_ms must be >= 0", "audio_end_ms")
    content = item.get("content")
    if not isinstance(content, list) or not content:
        return
    if not 0 <= content_index < len(content):
        raise fail(f"content_index {content_index} is out of range", "content_index")
    part = content[content_index]
    if not isinstance(part, Mapping) or not one_of(part.get("type"), TRUNCATABLE_PART_TYPES):
        raise fail("content_index must name an audio content part", "content_index")
    duration = part_duration_ms(part)
    if duration is not None and audio_end_ms > duration:
        raise fail(
            f"audio_end_ms {audio_end_ms} is beyond the audio's {quote(duration)} ms",
            "audio_end_ms",
        )


def truncate_item(item: Mapping[str, Any], content_index: int, audio_end_ms: int) -> dict[str, Any]:
    """A copy of an assistant item with the audio part's transcript cut at ``audio_end_ms``.

    Validates first (``validate_truncate``); the other parts are kept as they are.
    """
    validate_truncate(item, content_index, audio_end_ms)
    out = dict(item)
    content = item.get("content")
    if not isinstance(content, list) or not content:
        return out
    part = dict(content[content_index])
    transcript = part.get("transcript")
    if isinstance(transcript, str):
        part["transcript"] = truncate_transcript(
            transcript, audio_end_ms, part_duration_ms(part), part.get("audio_text_marks")
        )
    out["content"] = [*content[:content_index], part, *content[content_index + 1 :]]
    return out
