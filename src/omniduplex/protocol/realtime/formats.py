"""Audio format spellings: what a client may write, what it means, what we support.

Every spelling is normalised to one canonical name. GA format objects
(``{"type": "audio/pcm", "rate": 24000}``) carry a rate; strings never do. G.711 runs at
8 kHz unless a rate says otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .errors import RealtimeProtocolError

PCM16: Final = "pcm16"
PCM_F32LE: Final = "pcm_f32le"
G711_ULAW: Final = "g711_ulaw"
G711_ALAW: Final = "g711_alaw"
WAV: Final = "wav"

MIN_SAMPLE_RATE_HZ: Final = 8_000
MAX_SAMPLE_RATE_HZ: Final = 192_000
G711_DEFAULT_RATE_HZ: Final = 8_000
# OpenAI defines pcm16 as 24 kHz; a stock client sends that unless it states a rate.
DEFAULT_INPUT_RATE_HZ: Final = 24_000
DEFAULT_OUTPUT_RATE_HZ: Final = 24_000
OPENAI_PCM_RATE_HZ: Final = 24_000

_SPELLINGS: Final[dict[str, str]] = {
    "audio/pcm": PCM16,
    "pcm": PCM16,
    "audio/pcm16": PCM16,
    "pcm16": PCM16,
    "pcm_s16le": PCM16,
    "s16le": PCM16,
    "audio/wav": WAV,
    "wav": WAV,
    "audio/pcm_f32le": PCM_F32LE,
    "pcm_f32le": PCM_F32LE,
    "f32le": PCM_F32LE,
    "audio/pcmu": G711_ULAW,
    "audio/g711_ulaw": G711_ULAW,
    "g711_ulaw": G711_ULAW,
    "g711-ulaw": G711_ULAW,
    "ulaw": G711_ULAW,
    "mulaw": G711_ULAW,
    "audio/pcma": G711_ALAW,
    "audio/g711_alaw": G711_ALAW,
    "g711_alaw": G711_ALAW,
    "g711-alaw": G711_ALAW,
    "alaw": G711_ALAW,
}

INPUT_AUDIO_FORMATS: Final[frozenset[str]] = frozenset({PCM16, PCM_F32LE, G711_ULAW, G711_ALAW})
OUTPUT_AUDIO_FORMATS: Final[frozenset[str]] = frozenset({PCM16, WAV, G711_ULAW, G711_ALAW})

# GA session objects name formats with these MIME-like types (OpenAI's own spellings).
_GA_TYPE_BY_FORMAT: Final[dict[str, str]] = {
    PCM16: "audio/pcm",
    G711_ULAW: "audio/pcmu",
    G711_ALAW: "audio/pcma",
    PCM_F32LE: "audio/pcm_f32le",
    WAV: "audio/wav",
}
# Beta session objects use these flat strings.
_BETA_NAME_BY_FORMAT: Final[dict[str, str]] = {
    PCM16: "pcm16",
    G711_ULAW: "g711_ulaw",
    G711_ALAW: "g711_alaw",
    PCM_F32LE: "pcm_f32le",
    WAV: "wav",
}


@dataclass(frozen=True, slots=True)
class AudioFormat:
    """A canonical format name and, when the client stated one, its sample rate."""

    name: str
    rate: int | None = None

    def effective_rate(self, default: int) -> int:
        """The stated rate, else 8 kHz for G.711, else ``default``."""
        if self.rate is not None:
            return self.rate
        if self.name in (G711_ULAW, G711_ALAW):
            return G711_DEFAULT_RATE_HZ
        return default

    def ga_object(self) -> dict[str, Any]:
        """The GA session-object form, e.g. ``{"type": "audio/pcm", "rate": 24000}``.

        OpenAI's schema allows ``rate`` only as 24000 on ``audio/pcm``; any other rate is
        stated beside the format as ``sample_rate_hz`` by the session object's builder.
        """
        obj: dict[str, Any] = {"type": _GA_TYPE_BY_FORMAT.get(self.name, "audio/pcm")}
        openai_rate = self.name == PCM16 and self.rate == OPENAI_PCM_RATE_HZ
        if openai_rate or (self.name == PCM_F32LE and self.rate is not None):
            obj["rate"] = self.rate
        return obj

    def beta_name(self) -> str:
        return _BETA_NAME_BY_FORMAT.get(self.name, PCM16)


def canonical_format_name(raw: Any) -> str | None:
    """The canonical name of a string spelling, or ``None`` when it is not one we know."""
    if not isinstance(raw, str):
        return None
    return _SPELLINGS.get(raw.strip().lower())


def validate_sample_rate(raw: Any, *, param: str = "sample_rate_hz") -> int:
    """A sample rate as an int in 8-192 kHz, else ``bad_event`` naming ``param``."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise RealtimeProtocolError(f"{param} must be an integer", "bad_event", param=param)
    try:
        finite = math.isfinite(raw)
    except OverflowError:  # an int too large for a float is no sample rate either
        finite = False
    if not finite or int(raw) != raw:
        raise RealtimeProtocolError(f"{param} must be a finite integer", "bad_event", param=param)
    rate = int(raw)
    if not MIN_SAMPLE_RATE_HZ <= rate <= MAX_SAMPLE_RATE_HZ:
        raise RealtimeProtocolError(
            f"{param} must be between {MIN_SAMPLE_RATE_HZ} and {MAX_SAMPLE_RATE_HZ}",
            "bad_event",
            param=param,
        )
    return rate


def parse_audio_format(raw: Any, *, param: str = "format") -> AudioFormat:
    """Parse a string or GA object spelling; ``unsupported_audio_format`` if unknown.

    The rate of an object comes from ``rate``, else ``sample_rate_hz``, else
    ``sample_rate``, and is validated like any other rate.
    """
    rate: int | None = None
    spelled: Any = raw
    if isinstance(raw, Mapping):
        spelled = raw.get("type", raw.get("format"))
        for key in ("rate", "sample_rate_hz", "sample_rate"):
            if raw.get(key) is not None:
                rate = validate_sample_rate(raw[key], param=f"{param}.{key}")
                break
    name = canonical_format_name(spelled)
    if name is None:
        raise RealtimeProtocolError(
            f"Unsupported audio format: {spelled!r}", "unsupported_audio_format", param=param
        )
    return AudioFormat(name, rate)


def parse_input_format(raw: Any, *, param: str = "input_audio_format") -> AudioFormat:
    fmt = parse_audio_format(raw, param=param)
    if fmt.name not in INPUT_AUDIO_FORMATS:
        raise RealtimeProtocolError(
            f"Unsupported input_audio_format: {raw!r}", "unsupported_audio_format", param=param
        )
    return fmt


def parse_output_format(raw: Any, *, param: str = "output_audio_format") -> AudioFormat:
    fmt = parse_audio_format(raw, param=param)
    if fmt.name not in OUTPUT_AUDIO_FORMATS:
        raise RealtimeProtocolError(
            f"Unsupported output_audio_format: {raw!r}", "unsupported_audio_format", param=param
        )
    return fmt
