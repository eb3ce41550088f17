"""Decoding one ``input_audio_buffer.append`` wire object.

The decoder checks everything that can be checked without session state: the audio field,
its base64, its format and rate, whole samples, camera frames and client speech hints.
It leaves the audio in the client's format and rate: resampling is stateful (a filter
spans appends) and belongs to the session's ``InputAudioConverter``.

Every failure is a ``RealtimeProtocolError`` carrying the client's ``event_id``, whatever
the types of the fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy.typing as npt
import pybase64

from .audio import SAMPLE_WIDTH, b64decode_strict, rms, validate_raw_audio
from .base import snapshot
from .errors import RealtimeProtocolError
from .formats import (
    DEFAULT_INPUT_RATE_HZ,
    G711_ALAW,
    G711_ULAW,
    MAX_SAMPLE_RATE_HZ,
    MIN_SAMPLE_RATE_HZ,
    AudioFormat,
    parse_input_format,
    validate_sample_rate,
)
from .images import MAX_IMAGE_CHARS, has_image_signature
from .session import RealtimeInputDefaults

# Client hint keys carried over into the append (wire.md 5.8).
INPUT_HINT_KEYS: Final[tuple[str, ...]] = (
    "duration_ms",
    "audio_duration_ms",
    "audio_start_ms",
    "audio_end_ms",
    "is_speech",
    "speech",
    "speech_probability",
    "vad",
    "overlap_action",
    "overlap",
    "force_barge_in",
    "force_listen",
    "text",
    "transcript",
)

MAX_VIDEO_FRAMES_PER_APPEND: Final = 2
MAX_VIDEO_FRAME_CHARS: Final = MAX_IMAGE_CHARS
_FRAME_HEADER_CHARS: Final = 64
_SPEECH_PROBABILITY_THRESHOLD: Final = 0.5
# A format spelling longer than any real one is refused before it reaches an error message.
_MAX_FORMAT_SPELLING_CHARS: Final = 64
_G711: Final = frozenset({G711_ULAW, G711_ALAW})


@dataclass(frozen=True, slots=True)
class RealtimeAudioAppend:
    """One decoded append: raw audio still in the client's format and rate."""

    audio: bytes
    format: str
    sample_rate_hz: int
    is_speech: bool | None
    video_frames: tuple[str, ...] = ()
    hints: Mapping[str, Any] = field(default_factory=dict)
    duration_ms: float = 0.0

    @property
    def num_samples(self) -> int:
        return len(self.audio) // SAMPLE_WIDTH[self.format]


def decode_audio_append(
    obj: Mapping[str, Any], defaults: RealtimeInputDefaults | None = None
) -> RealtimeAudioAppend:
    """Validate and decode an ``input_audio_buffer.append`` object."""
    event_id = obj.get("event_id") if isinstance(obj, Mapping) else None
    try:
        return _decode(obj, defaults or RealtimeInputDefaults())
    except RealtimeProtocolError as exc:
        raise exc.with_event_id(event_id) from None


def _decode(obj: Any, defaults: RealtimeInputDefaults) -> RealtimeAudioAppend:
    if not isinstance(obj, Mapping):
        raise RealtimeProtocolError("input_audio_buffer.append must be an object", "bad_event")
    frames = _video_frames(obj)
    audio_b64 = _field(obj, "audio", "delta")
    has_audio = isinstance(audio_b64, str) and bool(audio_b64)
    if not has_audio and not frames:
        raise RealtimeProtocolError(
            "input_audio_buffer.append requires audio", "bad_event", param="audio"
        )
    fmt = _input_format(obj, defaults)
    rate = _input_rate(obj, fmt, defaults)
    # Strict base64 of a non-empty string is never empty, so ``audio`` is non-empty here
    # unless this is a frames-only append.
    audio = b64decode_strict(audio_b64) if has_audio else b""
    validate_raw_audio(audio, fmt)
    hints = _hints(obj)
    is_speech = speech_hint(hints)
    if is_speech is None and not audio:
        is_speech = False  # a frames-only append carries no speech
    return RealtimeAudioAppend(
        audio=audio,
        format=fmt.name,
        sample_rate_hz=rate,
        is_speech=is_speech,
        video_frames=frames,
        hints=hints,
        duration_ms=len(audio) // SAMPLE_WIDTH[fmt.name] * 1000.0 / rate,
    )


def _field(obj: Mapping[str, Any], *keys: str) -> Any:
    """The value of the first key that is present and not null."""
    for key in keys:
        value = obj.get(key)
        if value is not None:
            return value
    return None


def _input_format(obj: Mapping[str, Any], defaults: RealtimeInputDefaults) -> AudioFormat:
    key = "format" if obj.get("format") is not None else "input_audio_format"
    raw = obj.get(key)
    if raw is None:
        return defaults.input_format
    if isinstance(raw, str) and len(raw) > _MAX_FORMAT_SPELLING_CHARS:
        raise RealtimeProtocolError(
            f"Unsupported input_audio_format: {raw[:_MAX_FORMAT_SPELLING_CHARS]!r}...",
            "unsupported_audio_format",
            param=key,
        )
    if isinstance(raw, Mapping):
        for rate_key in ("rate", "sample_rate_hz", "sample_rate"):
            if raw.get(rate_key) is not None:
                _precheck_rate(raw[rate_key], f"{key}.{rate_key}")
                break
    return parse_input_format(raw, param=key)


def _input_rate(obj: Mapping[str, Any], fmt: AudioFormat, defaults: RealtimeInputDefaults) -> int:
    for key in ("sample_rate_hz", "sample_rate"):
        raw = obj.get(key)
        if raw is not None:
            _precheck_rate(raw, key)
            return validate_sample_rate(raw, param=key)
    if fmt.rate is not None:
        return fmt.rate
    session = defaults.input_format
    if fmt.name == session.name:
        # The append repeats the session's format: the session's rate applies.
        return defaults.input_sample_rate_hz
    if fmt.name in _G711:
        return fmt.effective_rate(DEFAULT_INPUT_RATE_HZ)
    # A linear format other than the session's: the session's rate if that is linear too,
    # else OpenAI's pcm16 default (an 8 kHz G.711 session rate says nothing about pcm16).
    if session.name in _G711:
        return DEFAULT_INPUT_RATE_HZ
    return defaults.input_sample_rate_hz


def _precheck_rate(raw: Any, param: str) -> None:
    # ``validate_sample_rate`` converts to float; an int beyond float range would overflow
    # there instead of failing as a client error.
    is_int = isinstance(raw, int) and not isinstance(raw, bool)
    if is_int and not MIN_SAMPLE_RATE_HZ <= raw <= MAX_SAMPLE_RATE_HZ:
        raise RealtimeProtocolError(
            f"{param} must be between {MIN_SAMPLE_RATE_HZ} and {MAX_SAMPLE_RATE_HZ}",
            "bad_event",
            param=param,
        )


def _video_frames(obj: Mapping[str, Any]) -> tuple[str, ...]:
    raw = obj.get("video_frames")
    if raw is None:
        return ()
    slices = obj.get("max_slice_nums")
    if slices is not None and (isinstance(slices, bool) or slices != 1):
        raise _invalid_frames("max_slice_nums must be 1")
    if not isinstance(raw, list | tuple):
        raise _invalid_frames("video_frames must be a list")
    frames = [frame for frame in raw if frame is not None]
    if len(frames) > MAX_VIDEO_FRAMES_PER_APPEND:
        raise _invalid_frames(
            f"at most {MAX_VIDEO_FRAMES_PER_APPEND} video_frames per append are accepted"
        )
    for frame in frames:
        if not isinstance(frame, str) or not frame:
            raise _invalid_frames("each video frame must be a non-empty base64 string")
        if len(frame) > MAX_VIDEO_FRAME_CHARS:
            raise _invalid_frames(
                f"a video frame may have at most {MAX_VIDEO_FRAME_CHARS} characters"
            )
        if not _is_image_header(frame):
            raise _invalid_frames("each video frame must be bare base64 of a JPEG or PNG image")
    return tuple(frames)


def _is_image_header(frame: str) -> bool:
    head = frame[:_FRAME_HEADER_CHARS]
    head += "=" * (-len(head) % 4)
    try:
        decoded = pybase64.b64decode(head, validate=True)
    except (ValueError, TypeError):
        return False
    return has_image_signature(decoded)


def _invalid_frames(message: str) -> RealtimeProtocolError:
    return RealtimeProtocolError(message, "invalid_video_frames", param="video_frames")


def _hints(obj: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return {key: snapshot(obj[key]) for key in INPUT_HINT_KEYS if key in obj}
    except RecursionError:
        raise RealtimeProtocolError(
            "input_audio_buffer.append hints are nested too deeply", "bad_event"
        ) from None


def _probability(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def speech_hint(hints: Mapping[str, Any]) -> bool | None:
    """The client's own speech verdict, or ``None`` when its hints do not give one.

    In order: a bool ``is_speech`` / ``speech``; ``vad.is_speech``; a
    ``vad.speech_probability`` / ``vad.probability``; a top-level ``speech_probability``
    (probabilities count as speech from 0.5).
    """
    if not hints:
        return None
    for key in ("is_speech", "speech"):
        value = hints.get(key)
        if isinstance(value, bool):
            return value
    vad = hints.get("vad")
    if isinstance(vad, Mapping):
        verdict = vad.get("is_speech")
        if isinstance(verdict, bool):
            return verdict
        for key in ("speech_probability", "probability"):
            probability = _probability(vad.get(key))
            if probability is not None:
                return probability >= _SPEECH_PROBABILITY_THRESHOLD
    probability = _probability(hints.get("speech_probability"))
    if probability is not None:
        return probability >= _SPEECH_PROBABILITY_THRESHOLD
    return None


def looks_like_speech(samples: npt.ArrayLike, threshold_rms: float) -> bool:
    """Whether float samples are loud enough to be speech (RMS at or above the threshold)."""
    level = rms(samples)
    return level > 0.0 and level >= threshold_rms
