"""The conversation's voice, as upstream's ``prepare`` takes it.

A voice is 16 kHz mono float32 reference audio (``ref_audio``: it goes into the context)
plus a WAV file of it (``prompt_wav_path``: it seeds token2wav). It comes from the
session's ``ref_audio`` (a ``data:audio/wav;base64,...`` URL; URLs elsewhere and
filesystem paths are refused, as the reference refuses them) or names a .wav in the
deployment's ``voice_dir``. No torch here: the plugin validates voices in the engine.
"""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np
import pybase64
import soxr

from .options import INPUT_RATE_HZ, REF_AUDIO_QUANTUM, MiniCPMO45Options

MAX_REF_AUDIO_S = 30.0
_DATA_URL_PREFIXES = ("data:audio/wav;base64,", "data:audio/x-wav;base64,")


class VoiceError(ValueError):
    """A voice or reference audio that cannot be used; ``code`` goes on the wire."""

    def __init__(self, message: str, code: str = "invalid_duplex_runtime_config") -> None:
        super().__init__(message)
        self.code = code


def resolve_voice(options: MiniCPMO45Options, voice: str | None) -> Path | None:
    """The .wav of a voice name in ``voice_dir`` (or the default voice), or None."""
    voice = voice or options.default_voice
    if not voice:
        return None
    if "/" in voice or "\\" in voice or voice.startswith("."):
        raise VoiceError(f"voice must be a voice name of this deployment, got {voice!r}")
    if not options.voice_dir:
        raise VoiceError(f"unknown voice {voice!r}: this deployment has no voice_dir")
    name = voice if voice.endswith(".wav") else f"{voice}.wav"
    path = Path(options.voice_dir) / name
    if not path.is_file():
        raise VoiceError(f"unknown voice {voice!r}")
    return path


def decode_ref_audio_url(ref_audio: str) -> bytes:
    """The WAV bytes of a session's ``ref_audio`` data URL."""
    for prefix in _DATA_URL_PREFIXES:
        if ref_audio.startswith(prefix):
            try:
                return pybase64.b64decode(ref_audio[len(prefix) :], validate=True)
            except ValueError:
                raise VoiceError("ref_audio is not valid base64") from None
    raise VoiceError(
        "ref_audio must be a data:audio/wav;base64 URL (URLs elsewhere and file paths are"
        " not fetched by this server)",
        "unsupported_ref_audio_path",
    )


def wav_to_ref_audio(data: bytes) -> np.ndarray:
    """16-bit PCM WAV -> 16 kHz mono float32, trimmed to whole 100 ms embeddings."""
    try:
        with wave.open(io.BytesIO(data), "rb") as wav:
            if wav.getsampwidth() != 2:
                raise VoiceError("ref_audio must be 16-bit PCM WAV")
            rate = wav.getframerate()
            channels = wav.getnchannels()
            raw = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    except (wave.Error, EOFError):
        raise VoiceError("ref_audio is not a readable WAV file") from None
    samples = raw[: raw.size - raw.size % channels].reshape(-1, channels).mean(axis=1)
    samples = samples.astype(np.float32) / 32768.0
    if rate != INPUT_RATE_HZ:
        samples = np.asarray(soxr.resample(samples, rate, INPUT_RATE_HZ), dtype=np.float32)
    samples = samples[: int(MAX_REF_AUDIO_S * INPUT_RATE_HZ)]
    samples = samples[: samples.size - samples.size % REF_AUDIO_QUANTUM]
    if samples.size == 0:
        raise VoiceError(f"ref_audio must hold at least {REF_AUDIO_QUANTUM} samples at 16 kHz")
    return np.ascontiguousarray(samples, dtype=np.float32)


def ref_audio_to_wav(samples: np.ndarray) -> bytes:
    """16 kHz float32 -> 16-bit PCM WAV (what ``prompt_wav_path`` points at)."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(INPUT_RATE_HZ)
        wav.writeframes(pcm.tobytes())
    return buffer.getvalue()
