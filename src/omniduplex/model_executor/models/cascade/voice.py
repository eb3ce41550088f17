"""The seam the TTS stage speaks through: a voice turns one sentence into audio.

Two voices ship: espeak-ng (``tts.EspeakVoice``, always installed, formant synthesis)
and piper (``piper_voice.PiperSpeechVoice``, a neural voice).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import numpy.typing as npt


class SpeechVoiceError(RuntimeError):
    """A voice could not be loaded or refused to speak."""


class SpeechVoice(ABC):
    """Speaks text; ``synthesize`` may be called from any thread."""

    @property
    @abstractmethod
    def sample_rate_hz(self) -> int: ...

    @abstractmethod
    def synthesize(
        self, text: str, *, should_stop: Callable[[], bool] | None = None
    ) -> npt.NDArray[np.float32]:
        """``text`` as float32 at ``sample_rate_hz``, cut short once ``should_stop()``."""
