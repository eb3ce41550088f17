"""Utterances the bench speaks: WAV files from a folder, or a synthesized voice-like signal."""

from __future__ import annotations

import random
import wave
from pathlib import Path

import numpy as np
import soxr

__all__ = ["load_utterances", "synth_utterance"]


def synth_utterance(rng: random.Random, rate_hz: int, min_ms: int, max_ms: int) -> bytes:
    """PCM16 mono: a gliding harmonic tone with a syllable-rate envelope (loud enough to
    count as speech for any VAD), ``min_ms``..``max_ms`` long."""
    ms = rng.randint(min_ms, max_ms)
    n = rate_hz * ms // 1000
    t = np.arange(n, dtype=np.float64) / rate_hz
    f0 = rng.uniform(110.0, 220.0) * (1.0 + 0.1 * np.sin(2 * np.pi * rng.uniform(0.5, 2.0) * t))
    phase = 2 * np.pi * np.cumsum(f0) / rate_hz
    voice = np.sin(phase) + 0.5 * np.sin(2 * phase) + 0.25 * np.sin(3 * phase)
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * rng.uniform(3.0, 5.0) * t) ** 2
    samples = 0.25 * voice * envelope
    ramp = min(n // 2, rate_hz // 100)
    if ramp:
        samples[:ramp] *= np.linspace(0.0, 1.0, ramp)
        samples[n - ramp :] *= np.linspace(1.0, 0.0, ramp)
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def _read_wav(path: Path, rate_hz: int) -> bytes:
    with wave.open(str(path), "rb") as wav:
        width, channels, rate = wav.getsampwidth(), wav.getnchannels(), wav.getframerate()
        raw = wav.readframes(wav.getnframes())
    if width != 2:
        raise ValueError(f"{path}: only 16-bit PCM WAV files are supported")
    samples = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    if rate != rate_hz:
        samples = np.asarray(soxr.resample(samples, rate, rate_hz), dtype=np.float32)
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def load_utterances(folder: str | Path, rate_hz: int) -> list[bytes]:
    """Every ``*.wav`` in ``folder`` (sorted), as PCM16 mono at ``rate_hz``."""
    paths = sorted(Path(folder).glob("*.wav"))
    if not paths:
        raise ValueError(f"no .wav files in {folder}")
    return [_read_wav(path, rate_hz) for path in paths]
