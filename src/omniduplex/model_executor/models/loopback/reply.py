"""What the loopback model says: a pure function from an utterance to reply units.

The reply is computed once per response (it is cheap: one soxr pass over at most
``max_reply_ms`` of audio) and then handed out unit by unit by the stage model, so pacing
and batching live in one place and the audio never depends on how it was stepped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import soxr

from .options import LoopbackOptions

FloatArray = npt.NDArray[np.float32]

LISTEN_REASON = "silence_or_noise"
# Text-only turns are voiced as one tone per word; a short ramp keeps unit edges click-free.
_TONE_AMPLITUDE = 0.2
_TONE_RAMP_S = 0.005


@dataclass(frozen=True, slots=True)
class ReplyUnit:
    """One unit of reply: ``audio`` is ``None`` when the response is text-only."""

    audio: FloatArray | None
    text: str


@dataclass(frozen=True, slots=True)
class Reply:
    """Either units to speak, or (no units) a decision to listen for ``listen_reason``."""

    units: tuple[ReplyUnit, ...]
    listen_reason: str | None = None


def as_mono_float32(audio: Any) -> FloatArray:
    """Coerce a list or array of samples to contiguous float32 mono; refuse anything else."""
    if audio is None:
        return np.zeros(0, dtype=np.float32)
    samples = np.asarray(audio, dtype=np.float32)
    if samples.ndim == 2 and 1 in samples.shape:
        samples = samples.reshape(-1)
    if samples.ndim != 1:
        raise ValueError(f"loopback audio must be mono, got shape {samples.shape}")
    if samples.size and not np.isfinite(samples).all():
        raise ValueError("loopback audio contains NaN or infinite samples")
    return np.ascontiguousarray(samples)


def rms(samples: FloatArray) -> float:
    if samples.size == 0:
        return 0.0
    # float64 accumulation: a long float32 sum of squares loses the quiet tail.
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))


def plan_reply(
    audio: Any, text: str | None, options: LoopbackOptions, *, with_audio: bool = True
) -> Reply:
    """The whole reply to one utterance; same input, same bytes."""
    samples = as_mono_float32(audio)
    words = (text or "").split()
    voiced = rms(samples) >= options.silence_rms and samples.size > 0
    if not voiced and not words:
        return Reply(units=(), listen_reason=LISTEN_REASON)
    max_units = max(1, options.max_reply_ms // options.unit_ms)
    if voiced:
        target = _reply_samples(samples.size, options)
        chunks = _split(_reversed_pitched(samples, target, options), options.unit_samples)
    else:
        # Text-only turn: one tone per word, so an audio session still hears something.
        chunks = [_tone(word, options) for word in words[:max_units]]
    texts = _unit_texts(words, len(chunks))
    return Reply(
        units=tuple(
            ReplyUnit(audio=chunk if with_audio else None, text=piece)
            for chunk, piece in zip(chunks, texts, strict=True)
        )
    )


def _reply_samples(input_samples: int, options: LoopbackOptions) -> int:
    """Output samples for the utterance's duration, capped at ``max_reply_ms``."""
    same_duration = round(input_samples * options.output_rate_hz / options.input_rate_hz)
    cap = options.output_rate_hz * options.max_reply_ms // 1000
    return max(1, min(same_duration, cap))


def _reversed_pitched(samples: FloatArray, target: int, options: LoopbackOptions) -> FloatArray:
    """The utterance reversed, replayed ``pitch_ratio`` faster, at the output rate.

    Declaring the input rate ``pitch_ratio`` times higher than it is shifts the pitch by
    that ratio. Only the tail that can reach the reply is resampled (plus some filter
    context), so a long utterance costs no more than ``max_reply_ms`` of work.
    """
    source_rate = options.input_rate_hz * options.pitch_ratio
    needed = math.ceil(target * source_rate / options.output_rate_hz) + options.input_rate_hz // 50
    reversed_tail = np.ascontiguousarray(samples[-needed:][::-1])
    shifted = soxr.resample(reversed_tail, source_rate, options.output_rate_hz, quality="HQ")
    shifted = np.asarray(shifted, dtype=np.float32)
    if shifted.size == 0:
        shifted = np.zeros(1, dtype=np.float32)
    # A raised voice is shorter than the utterance: repeat it to keep the same duration.
    fitted = shifted[:target] if shifted.size >= target else np.resize(shifted, target)
    return np.clip(fitted, -1.0, 1.0).astype(np.float32, copy=False)


def _tone(word: str, options: LoopbackOptions) -> FloatArray:
    """One unit of sine whose pitch is a function of the word (deterministic, audible)."""
    frequency = 220.0 + 20.0 * (sum(word.encode()) % 24)
    n = options.unit_samples
    t = np.arange(n, dtype=np.float64) / options.output_rate_hz
    wave = _TONE_AMPLITUDE * np.sin(2.0 * np.pi * frequency * t)
    ramp = min(n // 2, max(1, int(_TONE_RAMP_S * options.output_rate_hz)))
    envelope = np.ones(n)
    envelope[:ramp] = np.linspace(0.0, 1.0, ramp)
    envelope[n - ramp :] = np.linspace(1.0, 0.0, ramp)
    return (wave * envelope).astype(np.float32)


def _split(samples: FloatArray, unit: int) -> list[FloatArray]:
    """Units of ``unit`` samples; the last may be shorter so the reply keeps its length."""
    return [samples[i : i + unit].copy() for i in range(0, samples.size, unit)]


def _unit_texts(words: Sequence[str], units: int) -> list[str]:
    """Transcript pieces, one per unit, that concatenate to the words joined by spaces.

    Input words are spread evenly over the units (some units may carry none); without
    input text each unit says its own word: "loop", "back", "unit-3", ...
    """
    if not words:
        words = [_default_word(i) for i in range(units)]
    # Ceiling bounds put each word on the earliest unit it can share: text leads audio.
    bounds = [-(-k * len(words) // units) for k in range(units + 1)]
    groups = [" ".join(words[bounds[k] : bounds[k + 1]]) for k in range(units)]
    last = max((k for k, group in enumerate(groups) if group), default=-1)
    return [group + " " if group and k < last else group for k, group in enumerate(groups)]


def _default_word(index: int) -> str:
    return ("loop", "back")[index] if index < 2 else f"unit-{index + 1}"
