"""Nested wire shapes of server events: items, responses, session objects, per dialect.

Our canonical shapes are OpenAI GA's. Two jobs live here:

* ``ga_*`` normalisers turn what the engine hands an event into values OpenAI's own
  schema accepts (item status, response ``status_details`` reasons, string-valued
  ``metadata``). They run once, on the event's private snapshot, when it is built.
* ``beta_*`` adapters project a canonical value onto the narrower beta schema (flat
  session fields, ``audio``/``text`` content parts, ``modalities``). They run at render
  time and never touch the event's own value.

Every function is idempotent (applying it to its own output changes nothing), which is
what lets a rendered event parse back to an event that renders identically.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from .errors import SERVER_ERROR
from .formats import canonical_format_name

# ---- items ---------------------------------------------------------------------------

# OpenAI items are completed, incomplete or in_progress; a response we cancelled or that
# failed leaves its item cut short, which OpenAI calls incomplete.
_ITEM_STATUS: Final = {"cancelled": "incomplete", "failed": "incomplete"}
# Clients and older code spell content parts without the direction prefix.
_ASSISTANT_PART_TYPES: Final = {"audio": "output_audio", "text": "output_text"}
_INPUT_PART_TYPES: Final = {"audio": "input_audio", "text": "input_text"}
# Beta items have no direction prefix on output parts and no image parts.
_BETA_PART_TYPES: Final = {"output_audio": "audio", "output_text": "text"}
_BETA_DROPPED_PART_TYPES: Final = frozenset({"input_image"})


def ga_item(item: Any) -> Any:
    """A conversation item OpenAI GA accepts; ``item`` is a private copy, changed in place."""
    if not isinstance(item, dict):
        return item
    status = item.get("status")
    if isinstance(status, str) and status in _ITEM_STATUS:
        item["status"] = _ITEM_STATUS[status]
    content = item.get("content")
    if isinstance(content, list):
        renames = _ASSISTANT_PART_TYPES if item.get("role") == "assistant" else _INPUT_PART_TYPES
        for part in content:
            if isinstance(part, dict):
                part_type = part.get("type")
                if isinstance(part_type, str) and part_type in renames:
                    part["type"] = renames[part_type]
    return item


def beta_item(item: Any) -> Any:
    """The beta form of a canonical item (a new dict when anything differs).

    Only an assistant's parts are renamed: the exact inverse of ``ga_item``, so a beta
    rendering parsed back and rendered again comes out the same.
    """
    if not isinstance(item, dict):
        return item
    content = item.get("content")
    if not isinstance(content, list):
        return item
    renames = _BETA_PART_TYPES if item.get("role") == "assistant" else {}
    parts: list[Any] = []
    changed = False
    for part in content:
        part_type = part.get("type") if isinstance(part, dict) else None
        if part_type in _BETA_DROPPED_PART_TYPES:
            changed = True
            continue
        if isinstance(part_type, str) and part_type in renames:
            part = {**part, "type": renames[part_type]}
            changed = True
        parts.append(part)
    return {**item, "content": parts} if changed else item


# Content-part events (response.content_part.*) name parts without the prefix in both
# dialects, unlike the item content they mirror.
_PART_EVENT_TYPES: Final = {"output_audio": "audio", "output_text": "text"}


def part_event_part(part: Any) -> Any:
    """The ``part`` of a content-part event; ``part`` is a private copy, changed in place."""
    if isinstance(part, dict):
        part_type = part.get("type")
        if isinstance(part_type, str) and part_type in _PART_EVENT_TYPES:
            part["type"] = _PART_EVENT_TYPES[part_type]
    return part


# ---- responses -----------------------------------------------------------------------

OPENAI_STATUS_REASONS: Final = frozenset(
    {"turn_detected", "client_cancelled", "max_output_tokens", "content_filter"}
)
# OpenAI knows two ways a response is cancelled: the server's turn detection heard the
# user, or the client asked. Our finer reasons fold into those two.
_CANCEL_REASONS: Final = {
    "client_cancelled": "client_cancelled",
    "barge_in": "client_cancelled",
    "output_audio_buffer_clear": "client_cancelled",
    "turn_detected": "turn_detected",
    "server_vad_speech_started": "turn_detected",
    "barge_in_on_speech": "turn_detected",
    "policy_barge_in_on_speech": "turn_detected",
}
#: Where a response keeps the reason OpenAI's ``status_details.reason`` cannot express.
DETAILED_REASON_KEY: Final = "omniduplex_reason"


def metadata_value(value: Any) -> str:
    """A metadata value as the string OpenAI requires (JSON for anything but a string)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def ga_metadata(metadata: Any) -> Any:
    """OpenAI metadata is a string-to-string map; ``None`` values are dropped."""
    if not isinstance(metadata, Mapping):
        return metadata
    return {str(k): metadata_value(v) for k, v in metadata.items() if v is not None}


def ga_response(
    response: Any, *, classify_failure: Callable[[str], str] = lambda _code: SERVER_ERROR
) -> Any:
    """A response object OpenAI GA accepts; ``response`` is a private copy, changed in place.

    A reason OpenAI has no word for moves to ``metadata[DETAILED_REASON_KEY]``: a
    cancelled response says ``client_cancelled`` or ``turn_detected``, a completed one no
    reason, a failed one an ``error`` whose code is our reason.
    """
    if not isinstance(response, dict):
        return response
    detailed: str | None = None
    details = response.get("status_details")
    if isinstance(details, dict):
        detailed = _ga_status_details(details, classify_failure)
    metadata = response.get("metadata")
    if detailed is not None:
        metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
        metadata[DETAILED_REASON_KEY] = detailed
    if metadata is not None:
        response["metadata"] = ga_metadata(metadata)
    output = response.get("output")
    if isinstance(output, list):
        response["output"] = [ga_item(item) for item in output]
    modalities = response.get("modalities")
    if "output_modalities" not in response and isinstance(modalities, list):
        response["output_modalities"] = list(modalities)
    return response


def _ga_status_details(
    details: dict[str, Any], classify_failure: Callable[[str], str]
) -> str | None:
    """Fix ``details`` in place; return the detailed reason it could not keep, if any."""
    if details.get("reason") is None:
        return None
    reason = metadata_value(details["reason"])
    kind = details.get("type")
    if kind == "cancelled":
        openai_reason = _CANCEL_REASONS.get(reason, "client_cancelled")
        details["reason"] = openai_reason
        return None if reason == openai_reason else reason
    if kind != "failed" and reason in OPENAI_STATUS_REASONS:
        return None
    del details["reason"]
    # OpenAI describes a failure with an error object, not a reason.
    if kind == "failed" and not isinstance(details.get("error"), Mapping):
        details["error"] = {"type": classify_failure(reason), "code": reason}
    return reason


# Beta names formats with flat strings and only these three.
_BETA_FORMATS: Final = frozenset({"pcm16", "g711_ulaw", "g711_alaw"})
_MODALITIES: Final = frozenset({"text", "audio"})


def beta_response(response: Any) -> Any:
    """The beta form of a canonical response object (always a new dict)."""
    if not isinstance(response, dict):
        return response
    out = _project(response, ("output_modalities", "audio"), _BETA_RESPONSE_FIELDS)
    output = out.get("output")
    if isinstance(output, list):
        out["output"] = [beta_item(item) for item in output]
    return out


# ---- session objects -----------------------------------------------------------------

# Beta accepts only OpenAI's own model names for ``session.model``.
BETA_MODEL_NAMES: Final = frozenset(
    {
        "gpt-realtime",
        "gpt-realtime-2025-08-28",
        "gpt-4o-realtime-preview",
        "gpt-4o-realtime-preview-2024-10-01",
        "gpt-4o-realtime-preview-2024-12-17",
        "gpt-4o-realtime-preview-2025-06-03",
        "gpt-4o-mini-realtime-preview",
        "gpt-4o-mini-realtime-preview-2024-12-17",
    }
)
# GA-only keys of the canonical session object; their beta twins are flat fields.
_GA_ONLY_SESSION_KEYS: Final = ("audio", "type", "output_modalities", "max_output_tokens")
_NOISE_REDUCTION_TYPES: Final = frozenset({"near_field", "far_field"})
_TURN_DETECTION_TYPES: Final = frozenset({"server_vad", "semantic_vad"})


def beta_session(session: Any) -> Any:
    """The beta (flat) form of a canonical session object (always a new dict).

    A flat field the object lacks is taken from its GA twin; a flat field present wins
    over the twin. A value the beta schema cannot hold (an ``audio/pcm_f32le`` input, a
    non-OpenAI model name, an MCP tool, ...) is left out rather than sent malformed.
    """
    if not isinstance(session, dict):
        return session
    return _project(session, _GA_ONLY_SESSION_KEYS, _BETA_SESSION_FIELDS)


# A beta field: its GA twin's path (empty: none), and the conversion to a value beta
# accepts (``None``: there is none, leave the field out).
_BetaFields = dict[str, tuple[tuple[str, ...], Callable[[Any], Any]]]


def _project(
    canonical: dict[str, Any], ga_only: tuple[str, ...], table: _BetaFields
) -> dict[str, Any]:
    out = dict(canonical)
    for key in ga_only:
        out.pop(key, None)
    for key, (twin_path, convert) in table.items():
        if key in out:
            value = out[key]
        elif twin_path:
            value = _dig(canonical, *twin_path)
        else:
            continue
        if value is None:
            continue  # absent stays absent, null stays null
        converted = convert(value)
        if converted is None:
            out.pop(key, None)
        else:
            out[key] = converted
    return out


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_modalities(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, str) and m in _MODALITIES for m in value)


def _is_max_tokens(value: Any) -> bool:
    return value == "inf" or (isinstance(value, int) and not isinstance(value, bool))


def _is_turn_detection(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") in _TURN_DETECTION_TYPES


def _all_str_or_none(value: Mapping[str, Any], *keys: str) -> bool:
    return all(value.get(k) is None or isinstance(value.get(k), str) for k in keys)


def _is_transcription(value: Any) -> bool:
    return isinstance(value, Mapping) and _all_str_or_none(value, "language", "model", "prompt")


def _is_noise_reduction(value: Any) -> bool:
    return isinstance(value, Mapping) and (
        value.get("type") is None or value.get("type") in _NOISE_REDUCTION_TYPES
    )


def _is_tracing(value: Any) -> bool:
    return value == "auto" or (
        isinstance(value, Mapping) and _all_str_or_none(value, "group_id", "workflow_name")
    )


def _is_beta_tool(tool: Any) -> bool:
    return (
        isinstance(tool, Mapping)
        and tool.get("type") in (None, "function")
        and _all_str_or_none(tool, "name", "description")
    )


def _keep_if(valid: Callable[[Any], bool]) -> Callable[[Any], Any]:
    return lambda value: value if valid(value) else None


def _beta_tools(tools: Any) -> list[Any] | None:
    return [tool for tool in tools if _is_beta_tool(tool)] if isinstance(tools, list) else None


# Every field the beta session schema declares.
_BETA_SESSION_FIELDS: Final[_BetaFields] = {
    "id": ((), _keep_if(_is_str)),
    "model": ((), _keep_if(lambda v: isinstance(v, str) and v in BETA_MODEL_NAMES)),
    "instructions": ((), _keep_if(_is_str)),
    "modalities": (("output_modalities",), _keep_if(_is_modalities)),
    "input_audio_format": (("audio", "input", "format"), lambda v: _beta_format(v)),
    "output_audio_format": (("audio", "output", "format"), lambda v: _beta_format(v)),
    "voice": (("audio", "output", "voice"), _keep_if(_is_str)),
    "speed": (("audio", "output", "speed"), _keep_if(_is_number)),
    "temperature": ((), _keep_if(_is_number)),
    "max_response_output_tokens": (("max_output_tokens",), _keep_if(_is_max_tokens)),
    "turn_detection": (("audio", "input", "turn_detection"), _keep_if(_is_turn_detection)),
    "input_audio_transcription": (
        ("audio", "input", "transcription"),
        _keep_if(_is_transcription),
    ),
    "input_audio_noise_reduction": (
        ("audio", "input", "noise_reduction"),
        _keep_if(_is_noise_reduction),
    ),
    "tools": ((), _beta_tools),
    "tool_choice": ((), _keep_if(_is_str)),
    "tracing": ((), _keep_if(_is_tracing)),
}


# The response fields beta spells differently from GA.
_BETA_RESPONSE_FIELDS: Final[_BetaFields] = {
    "modalities": (("output_modalities",), _keep_if(_is_modalities)),
    "output_audio_format": (("audio", "output", "format"), lambda v: _beta_format(v)),
    "voice": (("audio", "output", "voice"), _keep_if(_is_str)),
}


def _beta_format(value: Any) -> str | None:
    """A format spelling (string or GA object) as beta's flat name, if beta has one."""
    spelled = value.get("type") if isinstance(value, Mapping) else value
    name = canonical_format_name(spelled)
    return name if name in _BETA_FORMATS else None


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value
