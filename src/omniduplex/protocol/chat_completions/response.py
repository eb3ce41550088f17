"""A chat turn's answer: one ``chat.completion`` body, or ``chat.completion.chunk`` events.

The caller feeds the model's output in as it comes (``text`` deltas, ``audio`` with its
transcript) and writes out what comes back: the body, or each event's SSE bytes.
"""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson

from ..realtime.audio import OutputAudioEncoder, b64encode_str, encode_audio, resample
from ..realtime.formats import DEFAULT_OUTPUT_RATE_HZ, PCM16, WAV, AudioFormat
from .request import ChatTurn

AUDIO_EXPIRY_S: Final = 86_400
SSE_DONE: Final = b"data: [DONE]\n\n"
# RIFF and data sizes of a WAV whose length is unknown when its header is written.
_STREAMING_WAV_SIZE: Final = 0xFFFFFFFF


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def _new_audio_id() -> str:
    return f"audio_{uuid.uuid4().hex[:16]}"


def _mono(samples: npt.ArrayLike) -> npt.NDArray[np.float32]:
    return np.asarray(samples, dtype=np.float32).reshape(-1)


def _usage() -> dict[str, int]:
    # A duplex model reports no token counts.
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def sse_event(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as JSON."""
    return b"data: " + orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n\n"


def output_rate_hz(fmt: str) -> int:
    return AudioFormat(fmt).effective_rate(DEFAULT_OUTPUT_RATE_HZ)


def streaming_wav_header(rate: int) -> bytes:
    """A 16-bit mono WAV header whose sizes say "unknown length" (streamed WAV)."""
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        _STREAMING_WAV_SIZE,
        b"WAVE",
        b"fmt ",
        16,
        1,
        1,
        rate,
        rate * 2,
        2,
        16,
        b"data",
        _STREAMING_WAV_SIZE,
    )


class _StreamAudio:
    """Encodes a stream of model audio into one client format, chunk by chunk."""

    def __init__(self, source_rate_hz: int, fmt: str) -> None:
        self.rate = output_rate_hz(fmt)
        self._header = streaming_wav_header(self.rate) if fmt == WAV else b""
        self._encoder = OutputAudioEncoder(source_rate_hz, PCM16 if fmt == WAV else fmt, self.rate)

    def encode(self, samples: npt.ArrayLike) -> bytes:
        return self._with_header(self._encoder.encode(samples))

    def flush(self) -> bytes:
        return self._with_header(self._encoder.flush())

    def _with_header(self, data: bytes) -> bytes:
        if data and self._header:
            data, self._header = self._header + data, b""
        return data


class ChatCompletionBody:
    """The ``chat.completion`` of a turn that is not streamed, collected from its output."""

    def __init__(self, turn: ChatTurn, completion_id: str, model_rate_hz: int) -> None:
        self.turn = turn
        self.completion_id = completion_id
        self.model_rate_hz = model_rate_hz
        self._texts: list[str] = []
        self._transcripts: list[str] = []
        self._audio: list[npt.NDArray[np.float32]] = []

    def text(self, delta: str) -> None:
        self._texts.append(delta)

    def audio(self, samples: npt.ArrayLike, transcript: str) -> None:
        if transcript:
            self._transcripts.append(transcript)
        if self.turn.wants_audio:
            self._audio.append(_mono(samples))

    def body(self) -> dict[str, Any]:
        turn = self.turn
        message: dict[str, Any] = {"role": "assistant", "refusal": None}
        transcript = "".join(self._transcripts)
        if turn.wants_audio and self._audio:
            rate = output_rate_hz(turn.audio_format)
            samples = resample(np.concatenate(self._audio), self.model_rate_hz, rate)
            message["content"] = "".join(self._texts) or None
            message["audio"] = {
                "id": _new_audio_id(),
                "data": b64encode_str(encode_audio(samples, turn.audio_format, rate)),
                "expires_at": int(time.time()) + AUDIO_EXPIRY_S,
                "transcript": transcript,
            }
        else:
            # Text asked for (or no audio came): the spoken words are the answer.
            message["content"] = "".join(self._texts) or transcript
            message["audio"] = None
        return {
            "id": self.completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": turn.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            ],
            "usage": _usage(),
            "system_fingerprint": None,
        }


class ChatCompletionStream:
    """A streamed turn's ``chat.completion.chunk`` events, as SSE bytes, from its output.

    ``start`` opens the answer, ``text`` and ``audio`` each give the chunk for one piece
    of output (``None`` when it carries nothing), and ``finish`` closes it with the audio
    left in the encoder, the ``stop`` chunk and, when asked for, the usage chunk.
    """

    def __init__(self, turn: ChatTurn, completion_id: str, model_rate_hz: int) -> None:
        self.turn = turn
        self.completion_id = completion_id
        self.created = int(time.time())
        self._audio_id = _new_audio_id()
        self._encoder = _StreamAudio(model_rate_hz, turn.audio_format)
        self._audio_started = False

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": None if self.turn.wants_audio else ""})

    def text(self, delta: str) -> bytes | None:
        return self._chunk({"content": delta}) if delta else None

    def audio(self, samples: npt.ArrayLike, transcript: str) -> bytes | None:
        if not self.turn.wants_audio:
            return self._chunk({"content": transcript}) if transcript else None
        data = self._encoder.encode(_mono(samples))
        if data or transcript:
            return self._chunk(self._audio_delta(data, transcript))
        return None

    def finish(self) -> list[bytes]:
        chunks: list[bytes] = []
        if self.turn.wants_audio:
            tail = self._encoder.flush()
            if tail:
                chunks.append(self._chunk(self._audio_delta(tail, "")))
        chunks.append(self._chunk({}, "stop"))
        if self.turn.include_usage:
            chunks.append(
                sse_event(
                    {
                        "id": self.completion_id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.turn.model,
                        "system_fingerprint": None,
                        "choices": [],
                        "usage": _usage(),
                    }
                )
            )
        return chunks

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        obj: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.turn.model,
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            ],
        }
        if self.turn.include_usage:
            obj["usage"] = None
        return sse_event(obj)

    def _audio_delta(self, data: bytes, transcript: str) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "id": self._audio_id,
            "data": b64encode_str(data),
            "transcript": transcript,
        }
        if not self._audio_started:
            payload["expires_at"] = int(time.time()) + AUDIO_EXPIRY_S
            self._audio_started = True
        return {"audio": payload}
