"""Voice prompts and persona text: everything a slot is forced with before live audio.

PersonaPlex's prompt phase (NVIDIA/personaplex): voice prompt, 0.5 s of silence, the
persona as ``<system> ... <system>`` text (one token per frame), 0.5 s of silence, then
live audio. While prompts are forced the user stream hears constant "sine" codes.
No torch here: the plugin validates voice names with it in the engine process.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import soxr

from .options import SAMPLE_RATE_HZ, PersonaPlexOptions

VOICE_SUFFIXES = (".wav", ".npy")
# -24 LUFS in the reference; we normalise RMS to about that level (no loudness meter).
_TARGET_RMS = 10 ** (-24 / 20)
MAX_VOICE_S = 30.0


class VoicePromptError(ValueError):
    """A voice prompt that cannot be used; ``code`` goes on the wire."""

    def __init__(self, message: str, code: str = "invalid_voice") -> None:
        super().__init__(message)
        self.code = code


def resolve_voice(options: PersonaPlexOptions, voice: str | None) -> Path | None:
    """The file of a voice name (a basename in ``voice_prompt_dir``), or None for none."""
    voice = voice or options.default_voice
    if not voice:
        return None
    if "/" in voice or "\\" in voice or voice.startswith("."):
        raise VoicePromptError(f"voice must be a bundled voice name, got {voice!r}")
    if voice.endswith(".pt"):
        raise VoicePromptError(
            "voice prompt embeddings (.pt) need the NVIDIA moshi fork; "
            "use the voice's .wav (or .npy) prompt",
            code="unsupported_voice",
        )
    if not options.voice_prompt_dir:
        raise VoicePromptError(
            f"unknown voice {voice!r}: this deployment has no voice prompts",
            code="unsupported_voice",
        )
    folder = Path(options.voice_prompt_dir)
    candidates = [folder / voice] if voice.endswith(VOICE_SUFFIXES) else []
    candidates += [folder / f"{voice}{suffix}" for suffix in VOICE_SUFFIXES]
    for path in candidates:
        if path.is_file():
            return path
    raise VoicePromptError(f"unknown voice {voice!r}", code="unsupported_voice")


def load_voice_audio(path: Path) -> np.ndarray:
    """Mono float32 at 24 kHz, RMS-normalised, at most ``MAX_VOICE_S`` long."""
    if path.suffix == ".npy":
        samples = np.asarray(np.load(path, allow_pickle=False), dtype=np.float32).reshape(-1)
    else:
        with wave.open(str(path), "rb") as wav:
            if wav.getsampwidth() != 2:
                raise VoicePromptError(f"voice prompt {path.name} must be 16-bit PCM WAV")
            rate = wav.getframerate()
            channels = wav.getnchannels()
            raw = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
        samples = raw.reshape(-1, channels).mean(axis=1).astype(np.float32) / 32768.0
        if rate != SAMPLE_RATE_HZ:
            samples = np.asarray(soxr.resample(samples, rate, SAMPLE_RATE_HZ), dtype=np.float32)
    samples = samples[: int(MAX_VOICE_S * SAMPLE_RATE_HZ)]
    level = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if samples.size else 0.0
    if level > 0:
        samples = np.clip(samples * (_TARGET_RMS / level), -1.0, 1.0).astype(np.float32)
    return samples


def wrap_persona(text: str) -> str:
    """``<system> text <system>``, as PersonaPlex was trained (added if missing)."""
    text = text.strip()
    if not text:
        return ""
    if not text.startswith("<system>"):
        text = "<system> " + text
    if not text.endswith("<system>"):
        text = text + " <system>"
    return text
