"""Stage tasks: requests addressed to one stage of the pipeline alone.

A stage model may offer standalone tasks (``StageModel.tasks``). A request of such a
task enters that stage directly (``AddStageRequest``), and that stage's outputs are the
answer: nothing is forwarded to a later stage. ``POST /v1/audio/transcriptions`` and
``POST /v1/audio/speech`` are two; they run on the deployment's own stage workers, in
the same batches as everything else the stage does, and share its resources (an ASR
stage's decoder pool).

Each task's data contract is written down once, here, so the caller and the stage model
agree on its spelling:

- ``TRANSCRIPTION``: input ``{"audio": float32 mono, "sample_rate_hz": int}`` (the stage
  resamples to its own rate), final; the finished output is ``{"kind": "transcript",
  "transcript": str}`` or ``{"kind": "error", "code": str, "message": str}``.
- ``SPEECH``: input ``{"kind": "reply", "text": str, "final": True, "with_audio": True,
  "voice": str | None, "speed": float}``; outputs ``{"kind": "audio", "audio": float32
  mono, "sample_rate_hz": int}`` until a finished one (``{"kind": "listen"}`` when there
  was nothing to say).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ..errors import EngineError

TRANSCRIPTION: Final = "transcription"
SPEECH: Final = "speech"


class StageTaskError(EngineError):
    """The stage answered the task with an error of its own (``code`` names it)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class TranscriptionInput:
    """Speech to transcribe: float32 mono samples at ``sample_rate_hz``."""

    audio: np.ndarray
    sample_rate_hz: int

    def stage_data(self) -> dict[str, Any]:
        return {"audio": self.audio, "sample_rate_hz": self.sample_rate_hz}


def transcript_of(data: Mapping[str, Any]) -> str:
    """The transcript in a transcription's finished output; raises ``StageTaskError``."""
    if data.get("kind") == "error":
        raise StageTaskError(
            str(data.get("code", "asr_failed")), str(data.get("message", "the ASR failed"))
        )
    return str(data.get("transcript") or "")


@dataclass(frozen=True, slots=True)
class SpeechInput:
    """Text to speak; ``voice`` is the stage's voice name (``None``: its default)."""

    text: str
    voice: str | None = None
    speed: float = 1.0

    def stage_data(self) -> dict[str, Any]:
        return {
            "kind": "reply",
            "text": self.text,
            "final": True,
            "with_audio": True,
            "voice": self.voice,
            "speed": self.speed,
        }


@dataclass(frozen=True, slots=True)
class SpeechAudio:
    """Synthesised speech: float32 mono samples at ``sample_rate_hz`` (0 when empty)."""

    samples: np.ndarray
    sample_rate_hz: int


def speech_of(outputs: Sequence[Mapping[str, Any]]) -> SpeechAudio:
    """The audio of a speech task's outputs, in order, as one buffer (rate 0 if none)."""
    audio = [data for data in outputs if data.get("kind") == "audio"]
    rates = {int(data["sample_rate_hz"]) for data in audio}
    if len(rates) > 1:
        raise StageTaskError("speech_rate_mismatch", f"speech came at several rates: {rates}")
    if not audio:
        return SpeechAudio(np.zeros(0, dtype=np.float32), 0)
    samples = np.concatenate([np.asarray(d["audio"], dtype=np.float32).reshape(-1) for d in audio])
    return SpeechAudio(samples, rates.pop())


__all__ = [
    "SPEECH",
    "TRANSCRIPTION",
    "SpeechAudio",
    "SpeechInput",
    "StageTaskError",
    "TranscriptionInput",
    "speech_of",
    "transcript_of",
]
