"""The microphone input of the browser test: a WAV that chromium plays as a fake microphone.

Speech comes from the cascade's own espeak-ng voice when the wheel is installed, else
from a synthetic speech-like signal (a voiced, syllable-modulated tone that any energy VAD
takes for speech). Chromium loops the file.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

RATE = 24_000


def espeak(text: str, rate_hz: int = RATE) -> np.ndarray | None:
    """``text`` spoken by espeak-ng as float32 at ``rate_hz``; None without the wheel.

    Runs in a child process: libespeak-ng is process-global (one synth callback), and the
    server under test may be using it in this process.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speech.npy"
        done = subprocess.run(
            [sys.executable, __file__, text, str(out), str(rate_hz)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            return None
        return np.load(out)


def _espeak_here(text: str, rate_hz: int) -> np.ndarray | None:
    try:
        from omniduplex.model_executor.models.cascade.synthetic import say
        from omniduplex.model_executor.models.cascade.tts import EspeakError
    except ImportError:
        return None
    try:
        spoken = say(text, rate_hz)
    except EspeakError:  # no espeak-ng wheel, or it would not start
        return None
    return spoken if spoken.size else None


def speech_like(ms: int, rate_hz: int = RATE) -> np.ndarray:
    """A voiced signal with a gliding pitch and four syllables a second."""
    t = np.arange(rate_hz * ms // 1000) / rate_hz
    f0 = 140 + 30 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate_hz
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    syllables = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * t)
    return (0.12 * voiced * syllables).astype(np.float32)


def write_wav(path: Path, samples: np.ndarray, rate_hz: int = RATE) -> Path:
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate_hz)
        out.writeframes(pcm.tobytes())
    return path


def conversation_wav(path: Path, lines: list[tuple[int, str]], *, loop_ms: int) -> tuple[Path, str]:
    """Each ``(start_ms, text)`` spoken at its time, silence elsewhere: (path, source)."""
    out = np.zeros(RATE * loop_ms // 1000, dtype=np.float32)
    source = "espeak-ng"
    for start_ms, text in lines:
        spoken = espeak(text)
        if spoken is None:  # no espeak-ng wheel: about 100 ms of "speech" per syllable-ish
            spoken, source = speech_like(min(2500, 60 * len(text))), "synthetic"
        spoken = spoken * (0.5 / (float(np.max(np.abs(spoken))) or 1.0))
        start = RATE * start_ms // 1000
        end = min(out.size, start + spoken.size)
        out[start:end] += spoken[: end - start]
    write_wav(path, out)
    return path, source


if __name__ == "__main__":
    spoken = _espeak_here(sys.argv[1], int(sys.argv[3]))
    if spoken is None:
        sys.exit(1)
    np.save(sys.argv[2], spoken)
