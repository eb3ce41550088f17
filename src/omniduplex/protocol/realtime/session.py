"""Session objects: the client's configuration in either dialect, read and validated.

Clients spell a session two ways. Beta: flat ``input_audio_format``, ``output_audio_format``,
``voice``, ``modalities``, ``max_response_output_tokens``, ``turn_detection``. GA: nested
``audio.input.format``, ``audio.output.format``, ``audio.output.voice``,
``output_modalities``, ``max_output_tokens``, ``audio.input.turn_detection``. Every reader
accepts both; where both are given the flat field wins, except turn detection where the
nested one does (wire.md 5.4, 5.6). Readers return ``None`` for an absent field and raise
``RealtimeProtocolError`` for a present but invalid one.

Formats and rates are read in ``session_formats``, turn detection in ``turn_detection``;
both are re-exported here. ``RealtimeInputDefaults`` is what one connection has negotiated
for its appends: formats and rates to assume when an append does not say.
``build_session_object`` renders the public session object we send back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import pybase64

from .base import snapshot
from .capabilities import PERMISSIVE_CAPABILITIES, RealtimeProtocolCapabilities
from .errors import RealtimeProtocolError
from .formats import (
    DEFAULT_INPUT_RATE_HZ,
    DEFAULT_OUTPUT_RATE_HZ,
    PCM16,
    AudioFormat,
)
from .session_formats import (
    first_present,
    parse_format,
    read_input_format,
    read_input_rate,
    read_output_format,
    read_output_rate,
)
from .session_options import ECHOED_OPTION_CHECKS
from .transcription_session import TRANSCRIPTION_SESSION_TYPE
from .turn_detection import (
    TURN_DETECTION_DEFAULTS,
    check_overlap_policy,
    overlap_policy_for,
    turn_detection_of,
    validate_turn_detection,
)
from .wire_values import (
    MAX_ID_CHARS,
    fail,
    is_number,
    member,
    one_of,
    optional_number,
    optional_str,
    quote,
)

DEFAULT_OVERLAP_SILENCE_RMS = 0.003
OUTPUT_MODALITIES: Final[frozenset[str]] = frozenset({"text", "audio"})
DEFAULT_OUTPUT_MODALITIES: Final[tuple[str, ...]] = ("text", "audio")
# Spellings of the per-response token cap, in the order they are read.
MAX_TOKENS_KEYS: Final = ("max_response_output_tokens", "max_output_tokens", "max_tokens")
_UNLIMITED_TOKENS: Final = frozenset({"inf", "infinity", "unlimited"})
# OpenAI's bounds: an integer cap of at most 4096 tokens, a speech speed of 0.25x to 1.5x.
MAX_TOKENS_LIMIT: Final = 4096
SPEED_RANGE: Final = (0.25, 1.5)
# The widest sampling temperature a model may be given (OpenAI's Responses range). OpenAI's
# beta Realtime narrows it to 0.6-1.2 for its own model; a served model's plugin may narrow
# it to what its sampler takes (validate_session_config), so 0 (greedy) stays possible.
TEMPERATURE_RANGE: Final = (0.0, 2.0)
SESSION_TYPE: Final = "realtime"
# OpenAI's pcm16 is 24 kHz; the output rate is whatever the model produces until asked.
DEFAULT_INPUT_FORMAT: Final = AudioFormat(PCM16, DEFAULT_INPUT_RATE_HZ)
DEFAULT_OUTPUT_FORMAT: Final = AudioFormat(PCM16, None)

MaxTokens = int | Literal["inf"]

__all__ = [
    "DEFAULT_OUTPUT_MODALITIES",
    "DEFAULT_OVERLAP_SILENCE_RMS",
    "TURN_DETECTION_DEFAULTS",
    "RealtimeInputDefaults",
    "build_session_object",
    "check_overlap_policy",
    "next_input_defaults",
    "overlap_policy_for",
    "parse_format",
    "read_input_format",
    "read_input_rate",
    "read_instructions",
    "read_max_output_tokens",
    "read_output_format",
    "read_output_modalities",
    "read_output_rate",
    "read_speed",
    "read_temperature",
    "read_voice",
    "ref_audio_digest",
    "session_of_update",
    "turn_detection_of",
    "validate_session",
    "validate_turn_detection",
]


@dataclass(frozen=True, slots=True)
class RealtimeInputDefaults:
    """Formats and rates one connection assumes for appends and output."""

    input_format: AudioFormat = DEFAULT_INPUT_FORMAT
    output_format: AudioFormat = DEFAULT_OUTPUT_FORMAT
    overlap_silence_rms: float = DEFAULT_OVERLAP_SILENCE_RMS

    @property
    def input_sample_rate_hz(self) -> int:
        return self.input_format.effective_rate(DEFAULT_INPUT_RATE_HZ)


def session_of_update(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The session object a ``session.update`` carries.

    ``session`` when given (it must then be an object); otherwise the event itself minus
    ``type``/``event_id``, a flat spelling some of our own clients use.
    """
    if "session" in event:
        session = event["session"]
        if not isinstance(session, Mapping):
            raise fail("session must be an object", "session")
        return session
    return {key: value for key, value in event.items() if key not in ("type", "event_id")}


# ---- other fields -----------------------------------------------------------------------


def read_voice(options: Mapping[str, Any]) -> str | None:
    """``voice``, else ``audio.output.voice``; a GA ``{"id": ...}`` voice becomes its id."""
    raw, param = first_present(options, ("voice",), ("audio", "output", "voice"))
    if isinstance(raw, Mapping):
        param = f"{param}.id"
        raw = raw.get("id")
        if raw is None:
            raise fail(f"{param} is required", param)
    voice = optional_str(raw, param, max_chars=MAX_ID_CHARS)
    return voice or None


def read_output_modalities(options: Mapping[str, Any]) -> tuple[str, ...] | None:
    """``modalities``, else ``output_modalities``: a non-empty list of ``text``/``audio``."""
    raw, param = first_present(options, ("modalities", "output_modalities"), ())
    if raw is None:
        return None
    if not isinstance(raw, list | tuple) or not raw:
        raise fail(f"{param} must be a non-empty list of 'text' and 'audio'", param)
    seen: list[str] = []
    for value in raw:
        if not one_of(value, OUTPUT_MODALITIES):
            raise fail(f"{param} may contain only 'text' and 'audio', not {quote(value)}", param)
        if value not in seen:
            seen.append(value)
    return tuple(seen)


def read_max_output_tokens(options: Mapping[str, Any]) -> MaxTokens | None:
    """The token cap under any of its spellings: an int from 1 to 4096, or ``"inf"``."""
    for key in MAX_TOKENS_KEYS:
        raw = options.get(key)
        if raw is None:
            continue
        if isinstance(raw, str) and raw.strip().lower() in _UNLIMITED_TOKENS:
            return "inf"
        if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_TOKENS_LIMIT:
            raise fail(f"{key} must be an integer from 1 to {MAX_TOKENS_LIMIT} or 'inf'", key)
        return raw
    return None


def read_instructions(options: Mapping[str, Any]) -> str | None:
    return optional_str(options.get("instructions"), "instructions")


def read_temperature(options: Mapping[str, Any]) -> float | None:
    low, high = TEMPERATURE_RANGE
    value = optional_number(options.get("temperature"), "temperature", minimum=low, maximum=high)
    return None if value is None else float(value)


def read_speed(options: Mapping[str, Any]) -> float | None:
    """``speed``, else ``audio.output.speed``: a number from 0.25 to 1.5, as OpenAI's."""
    raw, param = first_present(options, ("speed",), ("audio", "output", "speed"))
    low, high = SPEED_RANGE
    value = optional_number(raw, param, minimum=low, maximum=high)
    return None if value is None else float(value)


# ---- validation of a whole session object -----------------------------------------------


def validate_session(
    session: Mapping[str, Any], capabilities: RealtimeProtocolCapabilities | None = None
) -> dict[str, Any] | None:
    """Check a session object (or ``session.update`` patch) as the decoder does.

    Order (wire.md 3.2): input format, output format, then turn detection; then the other
    fields we read, and those we only echo (``session_options``). Returns the normalised
    turn detection when the capabilities validate it and the object carries one, else
    ``None``.
    """
    caps = capabilities or PERMISSIVE_CAPABILITIES
    kind = session.get("type")
    if kind is not None and kind not in (SESSION_TYPE, TRANSCRIPTION_SESSION_TYPE):
        raise fail(
            f"session.type must be {SESSION_TYPE!r} or {TRANSCRIPTION_SESSION_TYPE!r}; "
            f"{quote(kind)} sessions are not served",
            "type",
            "invalid_session_config",
        )
    read_input_format(session, caps)
    read_output_format(session, caps)
    read_input_rate(session)
    read_output_rate(session)
    normalised: dict[str, Any] | None = None
    if caps.validate_turn_detection:
        present, raw, where = turn_detection_of(session)
        if present:
            normalised = validate_turn_detection(raw, field=where)
        check_overlap_policy(session, normalised, present=present)
    for reader in (
        read_voice,
        read_output_modalities,
        read_max_output_tokens,
        read_instructions,
        read_temperature,
        read_speed,
    ):
        reader(session)
    for check in ECHOED_OPTION_CHECKS:
        check(session)
    optional_number(session.get("overlap_silence_rms"), "overlap_silence_rms", minimum=0, maximum=1)
    extra = session.get("extra_body")
    if extra is not None and not isinstance(extra, Mapping):
        raise fail("extra_body must be an object", "extra_body")
    return normalised


# ---- negotiated formats -----------------------------------------------------------------


def _quiet(read: Any, *args: Any) -> Any:
    # Deriving defaults never fails: a field that does not parse leaves the previous value.
    try:
        return read(*args)
    except RealtimeProtocolError:
        return None


def next_input_defaults(
    defaults: RealtimeInputDefaults | None, session: Mapping[str, Any]
) -> RealtimeInputDefaults:
    """The connection's formats after ``session`` (an accepted session object or patch).

    A new format comes with the rate stated beside it, or none (its own default: 24 kHz
    PCM, 8 kHz G.711), never the previous format's rate; a rate alone keeps the format.
    Fields that are absent or invalid keep their previous value.
    """
    current = defaults or RealtimeInputDefaults()
    if not isinstance(session, Mapping):
        return current
    input_format = _combine(
        current.input_format, _quiet(read_input_format, session), _quiet(read_input_rate, session)
    )
    output_format = _combine(
        current.output_format,
        _quiet(read_output_format, session),
        _quiet(read_output_rate, session),
    )
    rms = session.get("overlap_silence_rms")
    extra = session.get("extra_body")
    if rms is None and isinstance(extra, Mapping):
        rms = extra.get("overlap_silence_rms")
    # RMS of float samples lies in [0, 1]; anything else is not a threshold.
    usable = is_number(rms) and 0 <= rms <= 1
    overlap_silence_rms = float(rms) if usable else current.overlap_silence_rms
    return RealtimeInputDefaults(
        input_format=input_format,
        output_format=output_format,
        overlap_silence_rms=overlap_silence_rms,
    )


def _combine(current: AudioFormat, fmt: AudioFormat | None, rate: int | None) -> AudioFormat:
    if fmt is None:
        return current if rate is None else AudioFormat(current.name, rate)
    return AudioFormat(fmt.name, rate if rate is not None else fmt.rate)


# ---- the public session object ----------------------------------------------------------

SESSION_OBJECT: Final = "realtime.session"
# Client keys never echoed: server-private configuration, the raw reference audio (reported
# by digest instead), ids that are ours to allocate, and the audio object (rendered from
# the effective formats rather than copied as sent).
_NOT_ECHOED: Final = frozenset(
    {"extra_body", "ref_audio", "id", "session_id", "object", "type", "audio"}
)


def ref_audio_digest(ref_audio: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """``{"sha256", "bytes"}`` of the reference audio: what it is, never its content.

    A base64 ``data:`` URL is measured by its decoded payload; any other string (a URI)
    by its UTF-8 encoding.
    """
    data = _ref_audio_bytes(ref_audio)
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _ref_audio_bytes(value: bytes | bytearray | memoryview | str) -> bytes:
    if not isinstance(value, str):
        return bytes(value)
    head, comma, payload = value.partition(",")
    if comma and head.startswith("data:") and head.endswith(";base64"):
        try:
            return pybase64.b64decode(payload, validate=True)
        except ValueError:
            pass
    return value.encode("utf-8", "surrogatepass")


def _json(value: Any) -> Any:
    return snapshot(value)


def build_session_object(
    session_id: str,
    *,
    model: str | None = None,
    formats: RealtimeInputDefaults | None = None,
    output_modalities: Iterable[str] = DEFAULT_OUTPUT_MODALITIES,
    instructions: str | None = None,
    voice: str | None = None,
    speed: float | None = None,
    temperature: float | None = None,
    max_output_tokens: MaxTokens | None = None,
    turn_detection: Mapping[str, Any] | None = None,
    ref_audio: bytes | bytearray | memoryview | str | None = None,
    state: Mapping[str, Any] | None = None,
    client: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The session object of ``session.created`` / ``session.updated``, in both spellings.

    The keyword arguments are the session's effective configuration (the engine's truth);
    ``state`` holds the engine's own public keys (``state``, ``turn_state``, ``epoch``,
    ``capabilities``, ...) and ``client`` the client's effective session object, whose
    remaining keys (``tools``, ``metadata``, ...) are echoed where nothing above already
    set them. ``extra_body`` is never echoed, ``ref_audio`` only as its digest, and keys
    starting with ``_`` (internal) never.
    """
    fmt = formats or RealtimeInputDefaults()
    client = client or {}
    modalities = list(output_modalities)
    tokens: MaxTokens = "inf" if max_output_tokens is None else max_output_tokens
    detection = _json(turn_detection) if turn_detection is not None else None
    transcription = _client_value(client, "input_audio_transcription", "transcription")
    noise_reduction = _client_value(client, "input_audio_noise_reduction", "noise_reduction")
    # The input format always states its rate: appends are read at it.
    input_ga = AudioFormat(fmt.input_format.name, fmt.input_sample_rate_hz).ga_object()
    out: dict[str, Any] = {
        "object": SESSION_OBJECT,
        "type": SESSION_TYPE,
        "id": session_id,
        "model": model,
        "output_modalities": list(modalities),
        "modalities": list(modalities),
        "instructions": instructions,
        "voice": voice,
        "speed": speed,
        "temperature": temperature,
        "max_output_tokens": tokens,
        "max_response_output_tokens": tokens,
        "input_audio_format": fmt.input_format.beta_name(),
        "output_audio_format": fmt.output_format.beta_name(),
        "turn_detection": detection,
        "input_audio_transcription": transcription,
        "input_audio_noise_reduction": noise_reduction,
        "audio": {
            "input": {
                "format": input_ga,
                "sample_rate_hz": fmt.input_sample_rate_hz,
                "transcription": _json(transcription),
                "noise_reduction": _json(noise_reduction),
                "turn_detection": _json(detection),
            },
            "output": {
                "format": fmt.output_format.ga_object(),
                "sample_rate_hz": fmt.output_format.effective_rate(DEFAULT_OUTPUT_RATE_HZ),
                "voice": voice,
                "speed": speed,
            },
        },
        "tracing": _json(client.get("tracing")),
    }
    if ref_audio is not None:
        out["ref_audio"] = ref_audio_digest(ref_audio)
    for source, excluded in (
        (state or {}, frozenset({"extra_body", "ref_audio"})),
        (client, _NOT_ECHOED),
    ):
        for key, value in source.items():
            if isinstance(key, str) and not key.startswith("_") and key not in excluded:
                out.setdefault(key, _json(value))
    return out


def _client_value(client: Mapping[str, Any], flat: str, nested: str) -> Any:
    value = client.get(flat)
    if value is None:
        value = member(client, "audio", "input", nested)
    return _json(value)
