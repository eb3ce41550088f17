"""Server-side turn detection (``turn_detection: {type: server_vad}``), in audio time.

Silence is measured by counting samples, never by the wall clock: a client that sends
audio faster or slower than real time gets the same turns. The frame classifier is a
seam: the default is an energy detector; a model can provide a neural one (Silero).

The detector's clock is the session's input clock (samples appended since the session
opened): whoever resets or replaces it says where that clock stands, so offsets stay true
after commits, clears and a ``session.update`` mid-stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..vad import EnergyClassifier, SpeechClassifier


@dataclass(frozen=True, slots=True)
class TurnEvent:
    kind: str  # "started" | "stopped"
    audio_ms: int


class TurnDetector:
    """Finds speech start and end in a stream of samples at one rate."""

    def __init__(
        self,
        *,
        rate_hz: int,
        threshold: float = 0.5,
        prefix_padding_ms: int = 300,
        silence_duration_ms: int = 500,
        min_speech_duration_ms: int = 60,
        classifier: SpeechClassifier | None = None,
        position_samples: int = 0,
    ) -> None:
        self.rate_hz = rate_hz
        self.threshold = threshold
        self.prefix_padding_ms = prefix_padding_ms
        self.silence_duration_ms = silence_duration_ms
        self.min_speech_duration_ms = min_speech_duration_ms
        self.classifier = classifier or EnergyClassifier()
        self._frame = rate_hz * self.classifier.frame_ms // 1000
        self._pending = np.zeros(0, dtype=np.float32)
        self._position = position_samples  # samples consumed: the session's input clock
        self._speaking = False
        self._speech_run = 0
        self._silence_run = 0

    @classmethod
    def from_settings(
        cls,
        settings: Any,
        rate_hz: int,
        classifier_factory: Callable[[], SpeechClassifier | None] | None = None,
        *,
        position_samples: int = 0,
    ) -> TurnDetector | None:
        config = getattr(settings, "turn_detection", None)
        if not config:
            return None
        return cls(
            rate_hz=rate_hz,
            threshold=float(config.get("threshold", 0.5)),
            prefix_padding_ms=int(config.get("prefix_padding_ms", 300)),
            silence_duration_ms=int(config.get("silence_duration_ms", 500)),
            min_speech_duration_ms=int(config.get("min_speech_duration_ms", 60)),
            classifier=classifier_factory() if classifier_factory else None,
            position_samples=position_samples,
        )

    @property
    def speaking(self) -> bool:
        return self._speaking

    def _ms(self, samples: int) -> int:
        return int(samples * 1000 // self.rate_hz)

    def process(self, samples: np.ndarray) -> list[TurnEvent]:
        events: list[TurnEvent] = []
        buffer = np.concatenate((self._pending, samples)) if self._pending.size else samples
        frames = buffer.size // self._frame
        for index in range(frames):
            frame = buffer[index * self._frame : (index + 1) * self._frame]
            self._position += self._frame
            is_speech = self.classifier.probability(frame) >= self.threshold
            if is_speech:
                self._speech_run += self._frame
                self._silence_run = 0
                if not self._speaking and self._ms(self._speech_run) >= self.min_speech_duration_ms:
                    self._speaking = True
                    onset = self._position - self._speech_run
                    start_ms = max(0, self._ms(onset) - self.prefix_padding_ms)
                    events.append(TurnEvent("started", start_ms))
            else:
                self._silence_run += self._frame
                if not self._speaking:
                    self._speech_run = 0
                elif self._ms(self._silence_run) >= self.silence_duration_ms:
                    self._speaking = False
                    self._speech_run = 0
                    end = self._position - self._silence_run
                    events.append(TurnEvent("stopped", self._ms(end)))
        self._pending = buffer[frames * self._frame :].copy()
        return events

    def reset(self, position_samples: int | None = None) -> None:
        """Forget the turn; the clock moves to ``position_samples`` (default: past the
        samples held back for an incomplete frame, which are dropped but did elapse)."""
        if position_samples is None:
            position_samples = self._position + self._pending.size
        self._position = position_samples
        self._pending = np.zeros(0, dtype=np.float32)
        self._speaking = False
        self._speech_run = 0
        self._silence_run = 0
        self.classifier.reset()
