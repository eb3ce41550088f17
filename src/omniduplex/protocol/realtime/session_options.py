"""The session fields we accept and echo without acting on them, checked as OpenAI checks them.

``tracing``, ``truncation``, ``prompt``, ``include``, the input noise reduction and the input
transcription settings change nothing in our engine beyond what ``session.updated`` echoes
(wire.md 6.1), but a stock client that sends a malformed one to OpenAI is refused, and a
client that gets no refusal here believes its value is in force. So each is held to the
shape of OpenAI's session object (``openai.types.realtime.RealtimeSessionCreateRequestParam``
and the beta ``session_update_event_param``): a value of the wrong type, out of range or
outside an enum raises ``RealtimeProtocolError`` naming the narrowest param, in the
spelling the client used (``input_audio_transcription.model`` or
``audio.input.transcription.model``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .session_formats import first_present
from .wire_values import fail, is_number, one_of, optional_str, quote

TRACING_MODES: Final = frozenset({"auto"})
TRUNCATION_MODES: Final = frozenset({"auto", "disabled"})
RETENTION_RATIO: Final = "retention_ratio"
INCLUDABLE: Final = frozenset({"item.input_audio_transcription.logprobs"})
NOISE_REDUCTION_TYPES: Final = frozenset({"near_field", "far_field"})
TRANSCRIPTION_DELAYS: Final = frozenset({"minimal", "low", "medium", "high", "xhigh"})
_TRANSCRIPTION_STRINGS: Final = ("model", "language", "prompt")
_TRANSCRIPTION_LISTS: Final = ("keywords", "languages")
_TRACING_STRINGS: Final = ("workflow_name", "group_id")


def _object(raw: Any, param: str, what: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise fail(f"{param} must be {what}", param)
    return raw


def _string_list(raw: Any, param: str) -> None:
    if not isinstance(raw, list | tuple) or not all(isinstance(v, str) for v in raw):
        raise fail(f"{param} must be a list of strings", param)


def check_tracing(session: Mapping[str, Any]) -> None:
    """``tracing``: ``null``, ``"auto"`` or ``{workflow_name, group_id, metadata}``."""
    raw = session.get("tracing")
    if raw is None or one_of(raw, TRACING_MODES):
        return
    config = _object(raw, "tracing", "'auto', null or a tracing configuration object")
    for key in _TRACING_STRINGS:
        optional_str(config.get(key), f"tracing.{key}")
    metadata = config.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise fail("tracing.metadata must be an object", "tracing.metadata")


def check_truncation(session: Mapping[str, Any]) -> None:
    """``truncation``: ``"auto"``, ``"disabled"`` or a ``retention_ratio`` object."""
    raw = session.get("truncation")
    if raw is None or one_of(raw, TRUNCATION_MODES):
        return
    config = _object(raw, "truncation", "'auto', 'disabled' or a retention_ratio object")
    kind = config.get("type")
    if kind != RETENTION_RATIO:
        raise fail(
            f"truncation.type must be 'retention_ratio', not {quote(kind)}", "truncation.type"
        )
    ratio = config.get("retention_ratio")
    if not is_number(ratio) or not 0 <= ratio <= 1:
        raise fail(
            "truncation.retention_ratio is required: a number from 0 to 1",
            "truncation.retention_ratio",
        )
    limits = config.get("token_limits")
    if limits is None:
        return
    limits = _object(limits, "truncation.token_limits", "an object")
    post = limits.get("post_instructions")
    if post is not None and (not isinstance(post, int) or isinstance(post, bool) or post < 0):
        raise fail(
            "truncation.token_limits.post_instructions must be an integer >= 0",
            "truncation.token_limits.post_instructions",
        )


def check_prompt(session: Mapping[str, Any]) -> None:
    """``prompt``: ``null`` or ``{id, version?, variables?}`` (a prompt template reference)."""
    raw = session.get("prompt")
    if raw is None:
        return
    prompt = _object(raw, "prompt", "an object with an id, or null")
    if not isinstance(prompt.get("id"), str) or not prompt["id"]:
        raise fail("prompt.id is required and must be a non-empty string", "prompt.id")
    optional_str(prompt.get("version"), "prompt.version")
    variables = prompt.get("variables")
    if variables is not None and not isinstance(variables, Mapping):
        raise fail("prompt.variables must be an object", "prompt.variables")


def check_include(session: Mapping[str, Any]) -> None:
    """``include``: a list of what OpenAI can include (transcription logprobs)."""
    raw = session.get("include")
    if raw is None:
        return
    if not isinstance(raw, list | tuple):
        raise fail("include must be a list", "include")
    for value in raw:
        if not one_of(value, INCLUDABLE):
            allowed = ", ".join(sorted(INCLUDABLE))
            raise fail(f"include may contain only {allowed}, not {quote(value)}", "include")


def check_noise_reduction(session: Mapping[str, Any]) -> None:
    """``input_audio_noise_reduction`` / ``audio.input.noise_reduction``: ``null`` or
    ``{"type": "near_field" | "far_field"}``."""
    raw, param = first_present(
        session, ("input_audio_noise_reduction",), ("audio", "input", "noise_reduction")
    )
    if raw is None:
        return
    config = _object(raw, param, "an object with a type, or null")
    kind = config.get("type")
    if kind is not None and not one_of(kind, NOISE_REDUCTION_TYPES):
        raise fail(
            f"{param}.type must be near_field or far_field, not {quote(kind)}", f"{param}.type"
        )


def check_transcription(session: Mapping[str, Any]) -> None:
    """``input_audio_transcription`` / ``audio.input.transcription``: ``null`` or an
    object whose ``model``, ``language`` and ``prompt`` are strings."""
    raw, param = first_present(
        session, ("input_audio_transcription",), ("audio", "input", "transcription")
    )
    if raw is None:
        return
    config = _object(raw, param, "an object or null")
    for key in _TRANSCRIPTION_STRINGS:
        optional_str(config.get(key), f"{param}.{key}")
    for key in _TRANSCRIPTION_LISTS:
        if config.get(key) is not None:
            _string_list(config[key], f"{param}.{key}")
    delay = config.get("delay")
    if delay is not None and not one_of(delay, TRANSCRIPTION_DELAYS):
        allowed = ", ".join(sorted(TRANSCRIPTION_DELAYS))
        raise fail(f"{param}.delay must be one of {allowed}", f"{param}.delay")


ECHOED_OPTION_CHECKS: Final = (
    check_tracing,
    check_truncation,
    check_prompt,
    check_include,
    check_noise_reduction,
    check_transcription,
)
