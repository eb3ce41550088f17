"""Session-object readers: the beta flat fields and the GA nested ``audio`` object.

``RealtimeInputDefaults`` is what one connection has negotiated for its appends: formats
and rates to assume when an append does not say.
"""

from __future__ import annotations

from dataclasses import dataclass

from .formats import DEFAULT_INPUT_RATE_HZ, PCM16, AudioFormat

DEFAULT_OVERLAP_SILENCE_RMS = 0.003


@dataclass(frozen=True, slots=True)
class RealtimeInputDefaults:
    """Formats and rates one connection assumes for appends and output."""

    input_format: AudioFormat = AudioFormat(PCM16, DEFAULT_INPUT_RATE_HZ)
    output_format: AudioFormat = AudioFormat(PCM16, None)
    overlap_silence_rms: float = DEFAULT_OVERLAP_SILENCE_RMS

    @property
    def input_sample_rate_hz(self) -> int:
        return self.input_format.effective_rate(DEFAULT_INPUT_RATE_HZ)
