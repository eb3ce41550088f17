"""Frame-level speech classification for server-side turn detection.

A plugin may supply its own classifier (a neural VAD such as Silero); the default is a
loudness detector, enough for synthetic test audio.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class SpeechClassifier(ABC):
    """Speech probability of one frame of float32 audio (``frame_ms`` long)."""

    frame_ms: int = 20

    @abstractmethod
    def probability(self, frame: np.ndarray) -> float: ...

    def reset(self) -> None:  # noqa: B027 - optional hook, stateless by default
        """Forget state between utterances (stateless by default)."""


class EnergyClassifier(SpeechClassifier):
    """Loudness as probability: -28 dBFS RMS (0.04) and above reads as certain speech."""

    FULL_SCALE_RMS = 0.04

    def probability(self, frame: np.ndarray) -> float:
        if frame.size == 0:
            return 0.0
        level = float(np.sqrt(np.mean(np.square(frame, dtype=np.float64))))
        return min(1.0, level / self.FULL_SCALE_RMS)
