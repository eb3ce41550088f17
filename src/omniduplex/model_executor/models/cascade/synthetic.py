"""Speech and noise for tests and benchmarks, made by the cascade's own espeak-ng voice.

Never recorded files: every utterance is synthesised on the spot, so tests stay
self-contained and deterministic.
"""

from __future__ import annotations

import numpy as np
import soxr

from .tts import EspeakVoice

_VOICE: EspeakVoice | None = None


def voice() -> EspeakVoice:
    global _VOICE
    if _VOICE is None:
        _VOICE = EspeakVoice("en-us")
    return _VOICE


def say(text: str, rate_hz: int = 16_000, *, lead_ms: int = 0, tail_ms: int = 0) -> np.ndarray:
    """``text`` spoken at ``rate_hz`` (float32), with silence before and after."""
    spoken = voice().synthesize(text)
    audio = np.asarray(soxr.resample(spoken, voice().sample_rate_hz, rate_hz), dtype=np.float32)
    lead = np.zeros(rate_hz * lead_ms // 1000, dtype=np.float32)
    tail = np.zeros(rate_hz * tail_ms // 1000, dtype=np.float32)
    return np.concatenate((lead, audio, tail))


def noise(ms: int, rate_hz: int = 16_000, *, level: float = 0.05, seed: int = 0) -> np.ndarray:
    """White noise at ``level`` RMS: loud enough for an energy detector, not speech."""
    rng = np.random.default_rng(seed)
    return (level * rng.standard_normal(rate_hz * ms // 1000)).astype(np.float32)


def pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def rms(samples: np.ndarray) -> float:
    if samples.size == 0:
        return 0.0
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
