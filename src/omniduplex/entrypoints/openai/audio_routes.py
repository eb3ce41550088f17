"""``POST /v1/audio/transcriptions`` and ``POST /v1/audio/speech``.

A deployment with a stage that offers the ``transcription`` stage task serves
transcriptions; one with a stage that offers ``speech`` serves speech (the cascade's ASR
and TTS stages do; ``engine/stage/tasks.py``). Each request runs through the engine
(``AsyncOmni.transcribe`` / ``speak``) as a request addressed to that stage alone, on the
deployment's own stage worker: it is batched with the sessions' work there, shares the
stage's resources (a transcription takes a decoder from the ASR stage's pool and fails
with 503 ``asr_pool_exhausted`` when none frees in time), is admitted like any request
outside a session (429 ``resource_exhausted`` once the deployment's ``max_requests`` are
in flight), and never runs another stage.
These routes only parse the upload, hand the audio or text over, and encode the answer.

Any other model leaves both routes unregistered: they answer the app's JSON 404.

Transcriptions take multipart ``file`` (WAV, or raw 16-bit PCM at 24 kHz, or any rate
named by ``sample_rate`` / ``sample_rate_hz``), ``model``, ``response_format`` (``json``
default, ``text``, ``verbose_json``) and ``language`` (echoed; the recogniser is en-US);
the stage resamples the audio to its own rate. Speech takes JSON ``model``, ``input``,
``voice`` (a voice name of the stage; OpenAI's names fall back to the deployment's voice),
``response_format`` (``wav`` default, ``pcm``: 16-bit mono 24 kHz) and ``speed`` (0.25 to
4.0, scaling the deployment's speaking rate). Bad input is answered 400 with an OpenAI
error object.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from ...engine.errors import EngineBusyError, EngineDeadError, EngineNotRunningError
from ...protocol.duplex import decode_audio, encode_wav, resample
from ..async_omni import (
    SPEECH,
    TRANSCRIPTION,
    AsyncOmni,
    SpeechInput,
    StageTaskError,
    TranscriptionInput,
)

log = logging.getLogger(__name__)

INVALID_REQUEST: Final = "invalid_request_error"
TRANSCRIPTION_FORMATS: Final = ("json", "text", "verbose_json")
SPEECH_FORMATS: Final = ("wav", "pcm")
SPEECH_RATE_HZ: Final = 24_000  # OpenAI's pcm is 24 kHz, 16-bit, mono
RAW_INPUT_RATE_HZ: Final = 24_000
MAX_UPLOAD_BYTES: Final = 25 * 1024 * 1024  # OpenAI's limit for an audio upload
MAX_INPUT_CHARS: Final = 4096
MIN_SPEED, MAX_SPEED = 0.25, 4.0


class AudioRouteError(Exception):
    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param

    def response(self) -> Response:
        kind = INVALID_REQUEST if self.status < 500 else "server_error"
        if self.status == 429:
            kind = "rate_limit_error"
        body = {"error": {"message": self.message, "type": kind, "param": self.param}}
        body["error"]["code"] = self.code
        return Response(orjson.dumps(body), status_code=self.status, media_type="application/json")


def _bad(code: str, message: str, param: str | None = None) -> AudioRouteError:
    return AudioRouteError(400, code, message, param)


def _failed(exc: Exception, what: str) -> Response:
    """The answer to an error the route did not raise itself."""
    if isinstance(exc, AudioRouteError):
        return exc.response()
    if isinstance(exc, EngineBusyError):  # admission: nothing ran; a retry may succeed
        return AudioRouteError(429, exc.code, str(exc)).response()
    if isinstance(exc, EngineDeadError | EngineNotRunningError):
        return AudioRouteError(503, "engine_unavailable", str(exc)).response()
    log.exception("%s failed", what)
    return AudioRouteError(500, "internal_error", str(exc)).response()


# --------------------------------------------------------------------------- multipart


def _boundary(content_type: str) -> bytes:
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise _bad(
            "invalid_content_type", "the request body must be multipart/form-data with a file"
        )
    match = re.search(r'boundary="?([^";]+)"?', params)
    if match is None:
        raise _bad("invalid_content_type", "multipart/form-data without a boundary")
    return match.group(1).encode("latin-1")


def parse_multipart(body: bytes, content_type: str) -> dict[str, tuple[str | None, bytes]]:
    """``name -> (filename, bytes)`` of each part (the last one wins on repeats)."""
    delimiter = b"--" + _boundary(content_type)
    fields: dict[str, tuple[str | None, bytes]] = {}
    chunks = body.split(delimiter)
    for chunk in chunks[1:]:
        if chunk.startswith(b"--"):
            break  # the closing delimiter
        head, sep, content = chunk.partition(b"\r\n\r\n")
        if not sep:
            raise _bad("invalid_multipart", "a multipart part has no header block")
        if content.endswith(b"\r\n"):
            content = content[:-2]
        disposition = ""
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-disposition":
                disposition = value
        name = re.search(r'(?:^|;)\s*name="([^"]*)"', disposition)
        if name is None:
            continue
        filename = re.search(r'(?:^|;)\s*filename="([^"]*)"', disposition)
        fields[name.group(1)] = (filename.group(1) if filename else None, content)
    if len(chunks) < 2:
        raise _bad("invalid_multipart", "the multipart body holds no parts")
    return fields


# --------------------------------------------------------------------------- parsing


def _decode_upload(
    data: bytes, filename: str | None, fields: Mapping[str, str]
) -> tuple[npt.NDArray[np.float32], int]:
    """The upload as float32 mono samples and their rate."""
    if not data:
        raise _bad("invalid_value", "the uploaded file is empty", "file")
    is_wav = data[:4] == b"RIFF"
    if not is_wav and (filename or "").lower().endswith(".wav"):
        raise _bad("invalid_value", "the uploaded .wav file is not a RIFF/WAVE file", "file")
    raw_rate = RAW_INPUT_RATE_HZ
    for key in ("sample_rate", "sample_rate_hz"):
        if fields.get(key):
            try:
                raw_rate = int(fields[key])
            except ValueError:
                raw_rate = 0
            if raw_rate <= 0:
                raise _bad("invalid_value", f"{key} must be a positive integer", key)
    if not is_wav and len(data) % 2:
        raise _bad(
            "invalid_value",
            "the file is neither WAV nor raw 16-bit PCM (odd byte count)",
            "file",
        )
    try:
        samples, source_rate = decode_audio(data, "wav" if is_wav else "pcm16", raw_rate)
    except Exception as exc:
        message = getattr(exc, "message", None) or str(exc)
        raise _bad("invalid_value", f"could not decode the audio: {message}", "file") from exc
    if samples.size == 0:
        raise _bad("invalid_value", "the uploaded audio holds no samples", "file")
    return samples, source_rate


def _text_field(fields: Mapping[str, tuple[str | None, bytes]], name: str) -> str | None:
    entry = fields.get(name)
    if entry is None:
        return None
    return entry[1].decode("utf-8", "replace").strip()


def _json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _bad("invalid_json", f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _bad("invalid_type", "the request body must be a JSON object")
    return body


def _parse_speech(body: Mapping[str, Any]) -> tuple[str, str | None, str, float]:
    text = body.get("input")
    if not isinstance(text, str):
        raise _bad("missing_required_parameter", "input must be a string", "input")
    if not text.strip():
        raise _bad("invalid_value", "input must not be empty", "input")
    if len(text) > MAX_INPUT_CHARS:
        raise _bad("invalid_value", f"input is longer than {MAX_INPUT_CHARS} characters", "input")
    voice = body.get("voice")
    if isinstance(voice, Mapping):  # a custom voice object: {"id": ...}
        voice = voice.get("id")
    if voice is not None and not isinstance(voice, str):
        raise _bad("invalid_type", "voice must be a string", "voice")
    fmt = body.get("response_format", "wav")
    if fmt not in SPEECH_FORMATS:
        raise _bad(
            "unsupported_value",
            f"response_format {fmt!r} is not supported; use one of {list(SPEECH_FORMATS)}",
            "response_format",
        )
    speed = body.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    if (
        isinstance(speed, bool)
        or not isinstance(speed, int | float)
        or not MIN_SPEED <= speed <= MAX_SPEED
    ):
        raise _bad(
            "invalid_value", f"speed must be a number in [{MIN_SPEED}, {MAX_SPEED}]", "speed"
        )
    return text, voice, fmt, float(speed)


# --------------------------------------------------------------------------- routes


def register_audio_routes(app: FastAPI, omni: AsyncOmni, *, model_name: str) -> None:
    """Add the audio routes the deployment's stages can serve (none for other models)."""
    if omni.stage_for_task(TRANSCRIPTION) is not None:

        @app.post("/v1/audio/transcriptions")
        async def transcriptions(request: Request) -> Response:
            try:
                return await _transcribe(request, omni)
            except Exception as exc:
                return _failed(exc, "transcription")

    if omni.stage_for_task(SPEECH) is not None:

        @app.post("/v1/audio/speech")
        async def speech(request: Request) -> Response:
            try:
                text, voice, fmt, speed = _parse_speech(_json_body(await request.body()))
                spoken = await omni.speak(SpeechInput(text, voice=voice, speed=speed))
            except Exception as exc:
                return _failed(exc, "speech")
            samples = spoken.samples
            if samples.size:
                samples = resample(samples, spoken.sample_rate_hz, SPEECH_RATE_HZ)
            if fmt == "pcm":
                pcm = encode_wav(samples, SPEECH_RATE_HZ)[44:]
                return Response(pcm, media_type="audio/pcm")
            return Response(encode_wav(samples, SPEECH_RATE_HZ), media_type="audio/wav")


async def _transcribe(request: Request, omni: AsyncOmni) -> Response:
    declared = request.headers.get("content-length", "")
    too_large = declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES
    body = b"" if too_large else await request.body()  # refused before reading it
    if too_large or len(body) > MAX_UPLOAD_BYTES:
        raise AudioRouteError(413, "file_too_large", "the upload is larger than 25 MB", "file")
    fields = parse_multipart(body, request.headers.get("content-type", ""))
    upload = fields.get("file")
    if upload is None:
        raise _bad("missing_required_parameter", "file is required", "file")
    if not _text_field(fields, "model"):
        raise _bad("missing_required_parameter", "model is required", "model")
    fmt = _text_field(fields, "response_format") or "json"
    if fmt not in TRANSCRIPTION_FORMATS:
        raise _bad(
            "unsupported_value",
            f"response_format {fmt!r} is not supported; use one of {list(TRANSCRIPTION_FORMATS)}",
            "response_format",
        )
    texts = {k: _text_field(fields, k) or "" for k in ("sample_rate", "sample_rate_hz")}
    audio, rate = _decode_upload(upload[1], upload[0], texts)
    try:
        text = await omni.transcribe(TranscriptionInput(audio, rate))
    except StageTaskError as exc:
        status = 503 if exc.code == "asr_pool_exhausted" else 500
        raise AudioRouteError(status, exc.code, exc.message) from exc
    if fmt == "text":
        return Response(text + "\n", media_type="text/plain; charset=utf-8")
    result: dict[str, Any] = {"text": text}
    if fmt == "verbose_json":
        duration = audio.size / rate
        result = {
            "task": "transcribe",
            "language": _text_field(fields, "language") or "en",
            "duration": duration,
            "text": text,
            "segments": [
                {
                    "id": 0,
                    "seek": 0,
                    "start": 0.0,
                    "end": duration,
                    "text": text,
                    "tokens": [],
                    "temperature": 0.0,
                    "avg_logprob": 0.0,
                    "compression_ratio": 0.0,
                    "no_speech_prob": 0.0,
                }
            ]
            if text
            else [],
        }
    result["usage"] = {"type": "duration", "seconds": int(np.ceil(audio.size / rate))}
    return Response(orjson.dumps(result), media_type="application/json")


__all__ = ["parse_multipart", "register_audio_routes"]
