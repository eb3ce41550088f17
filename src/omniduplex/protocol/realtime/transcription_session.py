"""Transcription sessions: their names on the wire and their public session object.

A transcription session (OpenAI's ``session.type: "transcription"`` in GA, the
``transcription_session.update`` of beta, or ``?intent=transcription`` on the URL) only
transcribes what the user says: its input audio buffer, turn detection and input
transcription work as in a conversation, and it never answers (no responses). Its
session object is smaller than a conversation's: the input audio and ``include``.

``build_transcription_session_object`` renders it in both spellings at once, like
``build_session_object``: GA's nested ``audio.input`` and beta's flat
``input_audio_format`` / ``input_audio_transcription`` / ``turn_detection`` /
``input_audio_noise_reduction``; ``beta_session`` keeps the flat ones for a beta socket.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .base import snapshot
from .formats import AudioFormat

TRANSCRIPTION_SESSION_TYPE: Final = "transcription"
TRANSCRIPTION_SESSION_OBJECT: Final = "realtime.transcription_session"
#: Beta's update of a transcription session (an alias of ``session.update``, typed).
TRANSCRIPTION_UPDATE_TYPE: Final = "transcription_session.update"
#: Beta's answer to it; GA answers ``session.updated``.
TRANSCRIPTION_UPDATED_TYPE: Final = "transcription_session.updated"
#: The ``include`` entry that asks for log probabilities on transcripts.
LOGPROBS_INCLUDE: Final = "item.input_audio_transcription.logprobs"
#: The query parameter value (``?intent=transcription``) that opens one.
TRANSCRIPTION_INTENT: Final = "transcription"


def is_transcription(session: Mapping[str, Any] | None) -> bool:
    """Whether a session object (or update patch) names the transcription type."""
    return isinstance(session, Mapping) and session.get("type") == TRANSCRIPTION_SESSION_TYPE


def wants_logprobs(include: Iterable[Any] | None) -> bool:
    return include is not None and LOGPROBS_INCLUDE in include


def build_transcription_session_object(
    session_id: str,
    *,
    input_format: AudioFormat,
    input_rate_hz: int,
    transcription: Mapping[str, Any] | None,
    noise_reduction: Mapping[str, Any] | None,
    turn_detection: Mapping[str, Any] | None,
    include: list[str] | None,
    state: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The session object of a transcription session's ``session.created`` /
    ``session.updated`` (beta: ``transcription_session.updated``).

    ``state`` holds the engine's own public keys (``state``, ``epoch``, ``capabilities``,
    ...), added where nothing above set them, as for a conversation's object.
    """
    transcription = snapshot(transcription) if transcription is not None else None
    noise = snapshot(noise_reduction) if noise_reduction is not None else None
    detection = snapshot(turn_detection) if turn_detection is not None else None
    out: dict[str, Any] = {
        "object": TRANSCRIPTION_SESSION_OBJECT,
        "type": TRANSCRIPTION_SESSION_TYPE,
        "id": session_id,
        "audio": {
            "input": {
                # The input format always states its rate: appends are read at it.
                "format": AudioFormat(input_format.name, input_rate_hz).ga_object(),
                "sample_rate_hz": input_rate_hz,
                "transcription": transcription,
                "noise_reduction": noise,
                "turn_detection": detection,
            }
        },
        "include": list(include) if include is not None else None,
        "input_audio_format": input_format.beta_name(),
        "input_audio_transcription": snapshot(transcription),
        "input_audio_noise_reduction": snapshot(noise),
        "turn_detection": snapshot(detection),
        # Transcripts are the only output.
        "modalities": ["text"],
    }
    for key, value in (state or {}).items():
        if isinstance(key, str) and not key.startswith("_"):
            out.setdefault(key, snapshot(value))
    return out


__all__ = [
    "LOGPROBS_INCLUDE",
    "TRANSCRIPTION_INTENT",
    "TRANSCRIPTION_SESSION_OBJECT",
    "TRANSCRIPTION_SESSION_TYPE",
    "TRANSCRIPTION_UPDATED_TYPE",
    "TRANSCRIPTION_UPDATE_TYPE",
    "build_transcription_session_object",
    "is_transcription",
    "wants_logprobs",
]
