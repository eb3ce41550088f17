"""``POST /v1/audio/transcriptions`` and ``POST /v1/audio/speech`` for the cascade.

A deployment whose stages include the cascade's ASR stage (``AsrStageModel``) serves
transcriptions; one whose stages include its TTS stage (``TtsStageModel``) serves speech.
Both run the stage's own code in this process, built from that stage's ``kwargs`` in the
deploy file (so a grammar, ``asr_sentences``, voice and speaking rate are the
deployment's), and driven by ``add_request`` / ``step`` on a worker thread:

- transcriptions: one ``AsrStageModel`` owned by these routes (its own decoder pool, of
  the deployment's ``asr_pool_size``, built on the first request), so a transcription
  never runs the responder or the TTS, and never takes a decoder from the sessions;
- speech: a ``TtsStageModel`` per request (espeak-ng is process-global and serialised;
  ``speed`` scales the deployment's ``speech_rate_wpm``).

Any other model leaves both routes unregistered: they answer the app's JSON 404.

Transcriptions take multipart ``file`` (WAV, or raw 16-bit PCM at 24 kHz, or any rate
named by ``sample_rate`` / ``sample_rate_hz``), ``model``, ``response_format`` (``json``
default, ``text``, ``verbose_json``) and ``language`` (echoed; the recogniser is en-US);
audio is resampled to 16 kHz. Speech takes JSON ``model``, ``input``, ``voice`` (an espeak
voice name; OpenAI's names fall back to the deployment's voice), ``response_format``
(``wav`` default, ``pcm``: 16-bit mono 24 kHz) and ``speed`` (0.25 to 4.0). Bad input is
answered 400 with an OpenAI error object.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from ...engine.stage import StageInput
from ...protocol.duplex import decode_audio, encode_wav, resample
from ..async_omni import AsyncOmni

log = logging.getLogger(__name__)

INVALID_REQUEST: Final = "invalid_request_error"
TRANSCRIPTION_FORMATS: Final = ("json", "text", "verbose_json")
SPEECH_FORMATS: Final = ("wav", "pcm")
SPEECH_RATE_HZ: Final = 24_000  # OpenAI's pcm is 24 kHz, 16-bit, mono
RAW_INPUT_RATE_HZ: Final = 24_000
MAX_UPLOAD_BYTES: Final = 25 * 1024 * 1024  # OpenAI's limit for an audio upload
MAX_INPUT_CHARS: Final = 4096
MIN_SPEED, MAX_SPEED = 0.25, 4.0
ESPEAK_MIN_WPM, ESPEAK_MAX_WPM = 80, 450
_STEP_IDLE_S: Final = 0.005


class AudioRouteError(Exception):
    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param

    def response(self) -> Response:
        kind = INVALID_REQUEST if self.status < 500 else "server_error"
        body = {"error": {"message": self.message, "type": kind, "param": self.param}}
        body["error"]["code"] = self.code
        return Response(orjson.dumps(body), status_code=self.status, media_type="application/json")


def _bad(code: str, message: str, param: str | None = None) -> AudioRouteError:
    return AudioRouteError(400, code, message, param)


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


# --------------------------------------------------------------------------- stages


def _cascade_stage_kwargs(omni: AsyncOmni, cls_name: str) -> dict[str, Any] | None:
    """The kwargs of the first stage whose factory is (a subclass of) the named cascade
    stage model, or ``None``."""
    from ...model_executor.models.cascade import asr, tts_stage

    wanted = {"AsrStageModel": asr.AsrStageModel, "TtsStageModel": tts_stage.TtsStageModel}[
        cls_name
    ]
    pipeline = getattr(omni, "pipeline", None)
    for stage in getattr(pipeline, "stages", ()):
        try:
            factory = stage.model.load_factory()
        except Exception:  # a factory that cannot be imported is not the cascade
            continue
        if isinstance(factory, type) and issubclass(factory, wanted):
            return dict(stage.model.kwargs)
    return None


def _drive(model: Any, request_id: str, inputs: StageInput, lock: threading.Lock) -> list[Any]:
    """Add one request and step it to its finished output (on a worker thread)."""
    with lock:
        model.add_request(request_id, inputs)
    outputs: list[Any] = []
    try:
        while True:
            with lock:
                produced = [o for o in model.step([request_id]) if o.request_id == request_id]
            outputs.extend(produced)
            if any(o.finished for o in produced):
                return outputs
            if not produced:
                time.sleep(_STEP_IDLE_S)
    except BaseException:
        with lock:
            model.abort(request_id)
        raise


class CascadeTranscriber:
    """The cascade's ASR stage, built lazily from the deployment's stage kwargs."""

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self.kwargs = dict(kwargs)
        self._model: Any = None
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()

    def _stage(self) -> Any:
        with self._build_lock:
            if self._model is None:
                from ...model_executor.models.cascade.asr import AsrStageModel

                self._model = AsrStageModel(**self.kwargs)
            return self._model

    @property
    def rate_hz(self) -> int:
        from ...model_executor.models.cascade.options import CascadeOptions

        return CascadeOptions.from_mapping(self.kwargs).input_rate_hz

    def transcribe(self, audio: npt.NDArray[np.float32]) -> str:
        model = self._stage()
        request_id = f"transcription-{uuid.uuid4().hex}"
        outputs = _drive(model, request_id, StageInput({"audio": audio}, final=True), self._lock)
        data = outputs[-1].data
        if data.get("kind") == "error":
            code = str(data.get("code", "asr_failed"))
            status = 503 if code == "asr_pool_exhausted" else 500
            raise AudioRouteError(status, code, str(data.get("message", "the ASR failed")))
        return str(data.get("transcript") or "")

    def close(self) -> None:
        if self._model is not None:
            self._model.close()


class CascadeSpeaker:
    """The cascade's TTS stage: one stage model per request, with the request's speed."""

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        from ...model_executor.models.cascade.options import CascadeOptions

        self.options = CascadeOptions.from_mapping(kwargs)

    def speak(self, text: str, voice: str | None, speed: float) -> npt.NDArray[np.float32]:
        from ...model_executor.models.cascade.tts_stage import TtsStageModel

        wpm = round(self.options.speech_rate_wpm * speed)
        wpm = min(ESPEAK_MAX_WPM, max(ESPEAK_MIN_WPM, wpm))
        model = TtsStageModel(dataclasses.replace(self.options, speech_rate_wpm=wpm))
        request_id = f"speech-{uuid.uuid4().hex}"
        inputs = StageInput(
            {"kind": "reply", "text": text, "final": True, "with_audio": True, "voice": voice},
            final=True,
        )
        outputs = _drive(model, request_id, inputs, threading.Lock())
        chunks = [
            np.asarray(o.data["audio"], dtype=np.float32).reshape(-1)
            for o in outputs
            if o.data.get("kind") == "audio"
        ]
        samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        return resample(samples, self.options.output_rate_hz, SPEECH_RATE_HZ)


# --------------------------------------------------------------------------- parsing


def _decode_upload(data: bytes, filename: str | None, fields: Mapping[str, str], rate: int):
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
    return resample(samples, source_rate, rate)


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
    asr_kwargs = _cascade_stage_kwargs(omni, "AsrStageModel")
    tts_kwargs = _cascade_stage_kwargs(omni, "TtsStageModel")

    if asr_kwargs is not None:
        transcriber = CascadeTranscriber(asr_kwargs)
        app.state.transcriber = transcriber

        @app.post("/v1/audio/transcriptions")
        async def transcriptions(request: Request) -> Response:
            try:
                return await _transcribe(request, transcriber)
            except AudioRouteError as exc:
                return exc.response()
            except Exception as exc:
                log.exception("transcription failed")
                return AudioRouteError(500, "internal_error", str(exc)).response()

    if tts_kwargs is not None:
        speaker = CascadeSpeaker(tts_kwargs)

        @app.post("/v1/audio/speech")
        async def speech(request: Request) -> Response:
            try:
                text, voice, fmt, speed = _parse_speech(_json_body(await request.body()))
                samples = await asyncio.to_thread(speaker.speak, text, voice, speed)
            except AudioRouteError as exc:
                return exc.response()
            except Exception as exc:
                log.exception("speech failed")
                return AudioRouteError(500, "internal_error", str(exc)).response()
            if fmt == "pcm":
                pcm = encode_wav(samples, SPEECH_RATE_HZ)[44:]
                return Response(pcm, media_type="audio/pcm")
            return Response(encode_wav(samples, SPEECH_RATE_HZ), media_type="audio/wav")


async def _transcribe(request: Request, transcriber: CascadeTranscriber) -> Response:
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
    rate = transcriber.rate_hz
    audio = _decode_upload(upload[1], upload[0], texts, rate)
    text = await asyncio.to_thread(transcriber.transcribe, audio)
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
