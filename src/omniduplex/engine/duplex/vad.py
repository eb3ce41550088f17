"""Speech classification for server-side turn detection: frames, and whole turns.

A plugin may supply its own frame classifier (a neural VAD such as Silero); the default is
a loudness detector, enough for synthetic test audio. For ``semantic_vad`` a plugin may
also supply a turn-completion model, which judges from a turn's audio whether the user
sounds finished; a plugin without one gets ``semantic_vad`` mapped onto server VAD.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class SpeechClassifier(ABC):
    """Speech probability of one frame of float32 audio (``frame_ms`` long).

    ``runs_a_model``: classifying costs model work (a neural VAD), so an append it
    classifies is decoded in a pool thread; False only for arithmetic as cheap as the
    loudness detector's, which lets a short append be taken on the session's loop.
    """

    frame_ms: int = 20
    runs_a_model: bool = True

    @abstractmethod
    def probability(self, frame: np.ndarray) -> float: ...

    def reset(self) -> None:  # noqa: B027 - optional hook, stateless by default
        """Forget state between utterances (stateless by default)."""


class EnergyClassifier(SpeechClassifier):
    """Loudness as probability: -28 dBFS RMS (0.04) and above reads as certain speech."""

    FULL_SCALE_RMS = 0.04
    runs_a_model = False

    def probability(self, frame: np.ndarray) -> float:
        if frame.size == 0:
            return 0.0
        level = float(np.sqrt(np.mean(np.square(frame, dtype=np.float64))))
        return min(1.0, level / self.FULL_SCALE_RMS)


class TranscriptCompletionModel(ABC):
    """Probability that a user has finished their turn, from the words heard so far.

    Called once per candidate end of speech, from the session's input thread; may be
    shared by sessions. ``None``: no score now (the model is still loading, or failed),
    and the decision falls back to the rule without one.
    """

    name: str = ""

    @abstractmethod
    def finished_probability(self, words: str) -> float | None: ...

    def warm(self) -> None:  # noqa: B027 - most models have nothing to start
        """Get ready to answer (a session that may ask has opened); at once by default."""


class TurnCompletionModel(ABC):
    """Probability that a user's turn is complete, from the audio of the turn so far.

    Called once per candidate end of speech (not per frame) with the turn's audio, at
    most ``max_audio_ms`` of it (the most recent part), at ``rate_hz``. Implementations
    are stateless and may be shared by sessions and called from several threads.
    """

    name: str = ""
    max_audio_ms: int = 8000
    # The language model that judges the turn's words, where the plugin loads one.
    words_model: TranscriptCompletionModel | None = None

    @abstractmethod
    def completion_probability(self, audio: np.ndarray, rate_hz: int) -> float: ...
