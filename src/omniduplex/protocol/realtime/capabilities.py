"""What one consumer of the codec can serve, as far as decoding client commands is concerned.

The decoder refuses, at decode time, what the consumer has said it cannot serve: audio
formats outside its sets, text input when it takes none. Everything that depends on the
live session (a response in progress, the plugin's per-option support) is the engine's call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .formats import INPUT_AUDIO_FORMATS, OUTPUT_AUDIO_FORMATS, canonical_format_name


def _canonical_set(names: Iterable[str]) -> frozenset[str]:
    # Accept any known spelling ("audio/pcm", "s16le", ...) so callers need not normalise.
    if isinstance(names, str):
        names = (names,)
    return frozenset(canonical_format_name(name) or name for name in names)


@dataclass(frozen=True, slots=True)
class RealtimeProtocolCapabilities:
    """The decode-time contract of one consumer.

    ``input_audio_formats`` / ``output_audio_formats``: canonical format names it accepts
    (a narrower set than the codec's makes other formats ``unsupported_audio_format``).
    ``validate_turn_detection``: check ``turn_detection`` against wire.md 5.6 (only
    ``server_vad`` or ``null``) instead of passing it through. ``text_input``: whether
    ``input.text.append`` is accepted at all.
    """

    input_audio_formats: frozenset[str] = INPUT_AUDIO_FORMATS
    output_audio_formats: frozenset[str] = OUTPUT_AUDIO_FORMATS
    validate_turn_detection: bool = False
    text_input: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_audio_formats", _canonical_set(self.input_audio_formats))
        object.__setattr__(self, "output_audio_formats", _canonical_set(self.output_audio_formats))

    def accepts_input_format(self, name: str) -> bool:
        return name in self.input_audio_formats

    def accepts_output_format(self, name: str) -> bool:
        return name in self.output_audio_formats


# The Tier 1 default: every format the codec knows, turn_detection passed through as sent.
PERMISSIVE_CAPABILITIES = RealtimeProtocolCapabilities()
