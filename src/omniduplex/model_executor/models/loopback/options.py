"""Settings shared by the loopback stage model and its duplex plugin.

Both read the same mapping (a deploy YAML block), so they agree on ``unit_ms`` (the
plugin's ``chunk_period_ms``) and the rates without a second source of truth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

INPUT_RATE_HZ = 16_000
OUTPUT_RATE_HZ = 24_000


@dataclass(frozen=True, slots=True)
class LoopbackOptions:
    """How the loopback model answers.

    ``pitch_ratio`` below 1 lowers the voice (and stretches it, so the reply is cut to the
    utterance's length); above 1 raises it (the shortened audio is repeated to fill).
    ``silence_rms`` is on float samples in [-1, 1): 0.01 is about -40 dBFS.
    ``server_vad_by_default``: sessions start with ``server_vad``, as OpenAI's do (the
    ``loopback`` deployment a person serves); off, turns are the client's until it asks
    (the deterministic test deployments).
    """

    unit_ms: int = 100
    realtime: bool = True
    max_reply_ms: int = 10_000
    silence_rms: float = 0.01
    pitch_ratio: float = 0.8
    input_rate_hz: int = INPUT_RATE_HZ
    output_rate_hz: int = OUTPUT_RATE_HZ
    server_vad_by_default: bool = False

    def __post_init__(self) -> None:
        for name in ("unit_ms", "max_reply_ms", "input_rate_hz", "output_rate_hz"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"loopback option {name} must be a positive integer")
        for name in ("realtime", "server_vad_by_default"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"loopback option {name} must be a boolean")
        if not isinstance(self.silence_rms, int | float) or self.silence_rms < 0:
            raise ValueError("loopback option silence_rms must be a non-negative number")
        if not isinstance(self.pitch_ratio, int | float) or not 0.25 <= self.pitch_ratio <= 4:
            raise ValueError("loopback option pitch_ratio must be within [0.25, 4]")
        if self.output_rate_hz * self.unit_ms % 1000:
            # A unit must be a whole number of samples, or unit boundaries would drift.
            raise ValueError("loopback option unit_ms must be a whole number of output samples")

    @property
    def unit_samples(self) -> int:
        return self.output_rate_hz * self.unit_ms // 1000

    @property
    def unit_s(self) -> float:
        return self.unit_ms / 1000.0

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> LoopbackOptions:
        """Build from a YAML/options mapping; unknown keys are refused (typos surface)."""
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown loopback option(s): {', '.join(unknown)}")
        return cls(**raw)
