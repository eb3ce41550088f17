"""``POST /v1/chat/completions`` on a duplex deployment (DESIGN decision 14).

``DuplexChatCompletionsAdapter`` translates the OpenAI chat format into one
``TurnResponseRequest`` and the model results that come back into a ``chat.completion``
(or its ``chat.completion.chunk`` stream). The request runs through the deployment's
``TurnResponder`` (``entrypoints/turn_responses.py``): on a duplex deployment the engine
plans it with the plugin, runs it on the stage workers and projects its outputs, with no
session and no admission slot. It serves only when the model declares
``supports_chat_completions``.

What a request may hold:

- ``messages``: ``system`` / ``developer`` messages become the instructions; the last
  message is the turn and must come from the ``user``; the messages before it are the
  history (as text: audio of earlier turns is validated, then dropped). Content is a
  string or a list of parts: ``text`` (or ``input_text``) and ``input_audio`` (or
  ``audio``) ``{"data": <base64>, "format": "wav" | "pcm16" | "pcm_f32le" | "g711_ulaw" |
  "g711_alaw", "sample_rate_hz": <int>}``. Raw formats default to 24 kHz (G.711: 8 kHz);
  WAV carries its own rate.
- ``modalities`` (default ``["text"]``) and ``audio`` ``{"voice", "format"}`` with format
  ``wav`` (default), ``pcm16``, ``g711_ulaw`` or ``g711_alaw``; output audio is 24 kHz
  (G.711: 8 kHz).
- ``stream`` and ``stream_options.include_usage``. Streamed ``wav`` is one WAV file across
  the chunks: the first ``delta.audio.data`` starts with a header whose sizes are the
  "unknown length" value streamers use, so the decoded chunks concatenate to a playable file.
- ``temperature`` and ``max_completion_tokens`` / ``max_tokens`` reach the plugin as
  response options; unknown top-level keys (the SDK's ``extra_body``) as
  ``options["extra_body"]``.

Refused with 400 (OpenAI error objects): ``n`` > 1, ``tools`` / ``functions``,
``logprobs`` / ``top_logprobs``, a non-text ``response_format``, image and other content
parts, and anything malformed. A duplex model reports no token counts, so ``usage`` is 0.
"""

from __future__ import annotations

import logging
import math
import struct
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ...protocol.duplex import (
    DEFAULT_INPUT_RATE_HZ,
    DEFAULT_OUTPUT_RATE_HZ,
    AudioFormat,
    OutputAudioEncoder,
    RealtimeProtocolError,
    b64decode_strict,
    b64encode_str,
    decode_audio,
    encode_audio,
    parse_audio_format,
    resample,
)
from ..turn_responses import (
    DuplexCapabilities,
    ModelAudio,
    ModelResult,
    ModelText,
    TurnFailure,
    TurnModel,
    TurnResponder,
    TurnResponseError,
    TurnResponseRequest,
)

log = logging.getLogger(__name__)

WAV: Final = "wav"
PCM16: Final = "pcm16"
PCM_F32LE: Final = "pcm_f32le"
G711_ULAW: Final = "g711_ulaw"
G711_ALAW: Final = "g711_alaw"
INVALID_REQUEST: Final = "invalid_request_error"
SERVER_ERROR: Final = "server_error"
RATE_LIMIT_ERROR: Final = "rate_limit_error"

INPUT_FORMATS: Final = frozenset({WAV, PCM16, PCM_F32LE, G711_ULAW, G711_ALAW})
OUTPUT_FORMATS: Final = frozenset({WAV, PCM16, G711_ULAW, G711_ALAW})
MODALITIES: Final = frozenset({"text", "audio"})
ROLES: Final = frozenset({"system", "developer", "user", "assistant"})
TEXT_PARTS: Final = frozenset({"text", "input_text"})
AUDIO_PARTS: Final = frozenset({"input_audio", "audio"})
# Parts an assistant message may carry that hold no input for the model.
SKIPPED_PARTS: Final = frozenset({"refusal"})
# Top-level keys that are OpenAI's and accepted (used or harmlessly ignored).
KNOWN_KEYS: Final = frozenset(
    {
        "model",
        "messages",
        "modalities",
        "audio",
        "stream",
        "stream_options",
        "temperature",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "tools",
        "functions",
        "tool_choice",
        "function_call",
        "parallel_tool_calls",
        "logprobs",
        "top_logprobs",
        "response_format",
        "top_p",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "user",
        "metadata",
        "store",
        "service_tier",
        "reasoning_effort",
        "prediction",
        "web_search_options",
        "prompt_cache_key",
        "safety_identifier",
        "verbosity",
    }
)
AUDIO_EXPIRY_S: Final = 86_400
SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# RIFF and data sizes of a WAV whose length is unknown when its header is written.
_STREAMING_WAV_SIZE: Final = 0xFFFFFFFF


class ChatCompletionError(Exception):
    """A request the adapter answers with an OpenAI error object and ``status``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.error_type = error_type or (INVALID_REQUEST if status < 500 else SERVER_ERROR)

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> Response:
        return _json(self.body(), self.status)


def _bad(code: str, message: str, param: str | None = None) -> ChatCompletionError:
    return ChatCompletionError(400, code, message, param=param)


def _json(obj: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY),
        status_code=status,
        media_type="application/json",
    )


@dataclass(slots=True)
class ChatTurn:
    """A validated chat request: one turn for the plugin, and how to answer it."""

    model: str
    modalities: tuple[str, ...]
    audio_format: str
    voice: str | None
    stream: bool
    include_usage: bool
    instructions: str
    history: list[dict[str, str]]
    input_text: str
    input_audio: npt.NDArray[np.float32]
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def wants_audio(self) -> bool:
        return "audio" in self.modalities

    def session_config(self) -> dict[str, Any]:
        """What ``validate_session_config`` / ``create_session_state`` read."""
        config: dict[str, Any] = {"model": self.model, "modalities": list(self.modalities)}
        if self.instructions:
            config["instructions"] = self.instructions
        if self.voice is not None:
            config["voice"] = self.voice
        for key in ("temperature", "max_output_tokens"):
            if key in self.options:
                config[key] = self.options[key]
        return config


# --------------------------------------------------------------------------- parsing


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _decode_audio_part(payload: Any, param: str, target_rate: int) -> npt.NDArray[np.float32]:
    """One ``input_audio`` payload as float32 mono at ``target_rate``."""
    if not isinstance(payload, Mapping):
        raise _bad("invalid_type", "input_audio must be an object with data and format", param)
    data = payload.get("data")
    if not isinstance(data, str) or not data:
        raise _bad(
            "missing_required_parameter",
            "input_audio.data must be a non-empty base64 string",
            f"{param}.data",
        )
    raw_format = payload.get("format", WAV)
    spelled = {
        "format": raw_format,
        "sample_rate_hz": payload.get("sample_rate_hz"),
        "sample_rate": payload.get("sample_rate"),
    }
    try:
        audio_format = parse_audio_format(spelled, param=param)
    except RealtimeProtocolError as exc:
        if exc.code == "unsupported_audio_format":
            audio_format = None
        else:
            raise _bad("invalid_value", exc.message, exc.param) from exc
    if audio_format is None or audio_format.name not in INPUT_FORMATS:
        raise _bad(
            "unsupported_audio_format",
            f"input audio format {raw_format!r} is not supported; use one of "
            f"{sorted(INPUT_FORMATS)}",
            f"{param}.format",
        )
    try:
        raw = b64decode_strict(data)
    except RealtimeProtocolError as exc:
        raise _bad(
            "invalid_base64", "input_audio.data is not valid base64", f"{param}.data"
        ) from exc
    name = audio_format.name
    rate = audio_format.effective_rate(DEFAULT_INPUT_RATE_HZ)
    try:
        samples, rate = decode_audio(raw, name, rate)
    except RealtimeProtocolError as exc:
        raise _bad(exc.code or "bad_audio", exc.message, f"{param}.data") from exc
    return resample(samples, rate, target_rate)


def _message_content(
    message: Mapping[str, Any], index: int, role: str, input_rate: int
) -> tuple[str, list[npt.NDArray[np.float32]]]:
    """A message's text (parts joined with spaces) and decoded audio parts."""
    param = f"messages[{index}].content"
    content = message.get("content")
    if content is None:
        if role == "assistant":
            return "", []
        raise _bad("missing_required_parameter", f"{param} is required", param)
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise _bad("invalid_type", f"{param} must be a string or a list of parts", param)
    texts: list[str] = []
    audio: list[npt.NDArray[np.float32]] = []
    for j, part in enumerate(content):
        part_param = f"{param}[{j}]"
        if not isinstance(part, Mapping):
            raise _bad("invalid_type", f"{part_param} must be an object", part_param)
        kind = part.get("type")
        if kind in TEXT_PARTS:
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(
                    "invalid_type", f"{part_param}.text must be a string", f"{part_param}.text"
                )
            if text:
                texts.append(text)
        elif kind in AUDIO_PARTS:
            if role != "user":
                raise _bad(
                    "invalid_value",
                    f"audio content is accepted in user messages only, not in {role!r}",
                    f"{part_param}.type",
                )
            payload = part.get("input_audio") if kind == "input_audio" else part.get("audio")
            if kind == "audio" and payload is None:
                payload = part.get("input_audio")
            audio.append(_decode_audio_part(payload, f"{part_param}.input_audio", input_rate))
        elif kind in SKIPPED_PARTS and role == "assistant":
            continue
        else:
            raise _bad(
                "unsupported_content_type",
                f"content of type {kind!r} is not supported on a duplex model: a duplex turn "
                "takes text and audio",
                f"{part_param}.type",
            )
    return " ".join(texts), audio


def _check_unsupported(body: Mapping[str, Any]) -> None:
    n = body.get("n")
    if n is not None and (not _is_int(n) or n != 1):
        raise _bad(
            "unsupported_value", "n must be 1 on a duplex model: one request is one turn", "n"
        )
    for key in ("tools", "functions"):
        if body.get(key):
            raise _bad("unsupported_parameter", f"{key} are not supported on a duplex model", key)
    if body.get("logprobs"):
        raise _bad(
            "unsupported_parameter", "logprobs are not supported on a duplex model", "logprobs"
        )
    if body.get("top_logprobs") is not None:
        raise _bad(
            "unsupported_parameter",
            "top_logprobs are not supported on a duplex model",
            "top_logprobs",
        )
    response_format = body.get("response_format")
    if response_format is not None:
        kind = response_format.get("type") if isinstance(response_format, Mapping) else None
        if kind != "text":
            raise _bad(
                "unsupported_value",
                "response_format must be {'type': 'text'} on a duplex model",
                "response_format",
            )


def _parse_modalities(body: Mapping[str, Any]) -> tuple[str, ...]:
    raw = body.get("modalities")
    if raw is None:
        return ("text",)
    if not isinstance(raw, list) or not raw or not all(isinstance(m, str) for m in raw):
        raise _bad("invalid_type", "modalities must be a non-empty list of strings", "modalities")
    unknown = sorted(set(raw) - MODALITIES)
    if unknown:
        raise _bad(
            "unsupported_value",
            f"modalities {unknown} are not supported; use 'text' and/or 'audio'",
            "modalities",
        )
    return tuple(dict.fromkeys(raw))


def _parse_audio_param(body: Mapping[str, Any]) -> tuple[str, str | None]:
    audio = body.get("audio")
    if audio is None:
        return WAV, None
    if not isinstance(audio, Mapping):
        raise _bad("invalid_type", "audio must be an object with voice and format", "audio")
    voice = audio.get("voice")
    if isinstance(voice, Mapping):  # a custom voice object: {"id": ...}
        voice = voice.get("id")
    if voice is not None and not isinstance(voice, str):
        raise _bad("invalid_type", "audio.voice must be a string", "audio.voice")
    raw_format = audio.get("format", WAV)
    try:
        name: str | None = parse_audio_format(raw_format, param="audio.format").name
    except RealtimeProtocolError:
        name = None
    if name not in OUTPUT_FORMATS:
        raise _bad(
            "unsupported_audio_format",
            f"output audio format {raw_format!r} is not supported; use one of "
            f"{sorted(OUTPUT_FORMATS)}",
            "audio.format",
        )
    return name, voice


def _parse_options(body: Mapping[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    temperature = body.get("temperature")
    if temperature is not None:
        if not _is_number(temperature) or not 0 <= temperature <= 2:
            raise _bad("invalid_value", "temperature must be a number in [0, 2]", "temperature")
        options["temperature"] = float(temperature)
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if not _is_int(value) or value <= 0:
            raise _bad("invalid_value", f"{key} must be a positive integer", key)
        options.setdefault("max_output_tokens", value)
    extra = {k: v for k, v in body.items() if k not in KNOWN_KEYS}
    nested = extra.pop("extra_body", None)
    if isinstance(nested, Mapping):
        extra = {**nested, **extra}
    if extra:
        options["extra_body"] = extra
    return options


def parse_chat_request(
    body: Any,
    *,
    served_model: str,
    capabilities: DuplexCapabilities,
    input_rate_hz: int,
) -> ChatTurn:
    """Validate an OpenAI chat request; raises ``ChatCompletionError``."""
    if not isinstance(body, Mapping):
        raise _bad("invalid_type", "the request body must be a JSON object")
    model = body.get("model")
    if model is None:
        model = served_model
    elif not isinstance(model, str):
        raise _bad("invalid_type", "model must be a string", "model")
    elif model != served_model:
        raise ChatCompletionError(
            404,
            "model_not_found",
            f"The model {model!r} does not exist; this server serves {served_model!r}",
            param="model",
        )
    _check_unsupported(body)
    modalities = _parse_modalities(body)
    audio_format, voice = _parse_audio_param(body)
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("invalid_type", "stream must be a boolean", "stream")
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, Mapping):
        raise _bad("invalid_type", "stream_options must be an object", "stream_options")
    include_usage = bool((stream_options or {}).get("include_usage", False))
    options = _parse_options(body)

    messages = body.get("messages")
    if messages is None:
        raise _bad("missing_required_parameter", "messages is required", "messages")
    if not isinstance(messages, list):
        raise _bad("invalid_type", "messages must be a list", "messages")
    if not messages:
        raise _bad("invalid_value", "messages must hold at least one message", "messages")
    instructions: list[str] = []
    turns: list[tuple[str, str, list[npt.NDArray[np.float32]]]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise _bad("invalid_type", f"messages[{i}] must be an object", f"messages[{i}]")
        role = message.get("role")
        if role == "tool":
            raise _bad(
                "unsupported_value",
                "tool messages are not supported on a duplex model",
                f"messages[{i}].role",
            )
        if role not in ROLES:
            raise _bad(
                "invalid_value",
                f"messages[{i}].role must be one of {sorted(ROLES)}",
                f"messages[{i}].role",
            )
        text, audio = _message_content(message, i, role, input_rate_hz)
        if role in ("system", "developer"):
            if text:
                instructions.append(text)
            continue
        turns.append((role, text, audio))
    if not turns or turns[-1][0] != "user":
        raise _bad(
            "invalid_value",
            "the last message must be a user message: a duplex turn answers the user",
            "messages",
        )
    _, input_text, audio_parts = turns[-1]
    history = [{"role": role, "content": text} for role, text, _ in turns[:-1] if text]
    input_audio = (
        np.concatenate(audio_parts).astype(np.float32, copy=False)
        if audio_parts
        else np.zeros(0, dtype=np.float32)
    )
    if not audio_parts and not input_text:
        raise _bad("invalid_value", "the last user message holds no text and no audio", "messages")
    if not audio_parts and not capabilities.supports_text_only_turn:
        raise _bad(
            "unsupported_input",
            "this duplex model answers speech input only: send audio content, or use "
            "/v1/realtime?duplex=1",
            "messages",
        )
    if audio_parts and not capabilities.accepts_input_modality("audio"):
        raise _bad("unsupported_input", "this model does not take audio input", "messages")
    options["modalities"] = list(modalities)
    options["output_modalities"] = list(modalities)
    if instructions:
        options["instructions"] = "\n".join(instructions)
    if voice is not None:
        options["voice"] = voice
    return ChatTurn(
        model=model,
        modalities=modalities,
        audio_format=audio_format,
        voice=voice,
        stream=stream,
        include_usage=include_usage,
        instructions="\n".join(instructions),
        history=history,
        input_text=input_text,
        input_audio=input_audio,
        options=options,
    )


# --------------------------------------------------------------------------- audio out


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


# --------------------------------------------------------------------------- adapter


class DuplexChatCompletionsAdapter:
    """Serves ``/v1/chat/completions`` through the deployment's ``TurnResponder``.

    ``responder`` is ``None`` on a deployment whose model has no plugin to answer turns:
    then the route only ever says it is warming up.
    """

    def __init__(self, responder: TurnResponder | None, *, model_name: str) -> None:
        self.responder = responder
        self.model_name = model_name

    def model(self) -> TurnModel | None:
        """The model's declarations (``None`` until a duplex engine has started)."""
        return self.responder.model() if self.responder is not None else None

    @property
    def available(self) -> bool:
        """Whether the model declares ``supports_chat_completions``."""
        model = self.model()
        return model is not None and model.capabilities.supports_chat_completions

    # ---- HTTP ---------------------------------------------------------------------------

    async def create_chat_completion(self, request: Request) -> Response:
        """Answer one HTTP request: JSON, an SSE stream, or an OpenAI error object."""
        try:
            raw = await request.body()
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise _bad("invalid_json", f"the request body is not valid JSON: {exc}") from exc
            return await self.complete(body)
        except ChatCompletionError as exc:
            return exc.response()
        except Exception as exc:
            log.exception("chat completion failed")
            return ChatCompletionError(500, "internal_error", str(exc)).response()

    async def complete(self, body: Any) -> Response:
        """Validate ``body`` and run it; raises ``ChatCompletionError`` on refusals."""
        model = self.model()
        if self.responder is None or model is None:
            raise ChatCompletionError(503, "server_starting", "the server is warming up")
        if not model.capabilities.supports_chat_completions:
            raise ChatCompletionError(
                404,
                "route_not_available",
                "this model does not serve chat completions; use /v1/realtime?duplex=1",
            )
        turn = parse_chat_request(
            body,
            served_model=self.model_name,
            capabilities=model.capabilities,
            input_rate_hz=model.input_sample_rate_hz,
        )
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        results = self._results(self.responder, turn, completion_id)
        rate = model.output_sample_rate_hz
        if not turn.stream:
            async with aclosing(results):
                return _json(await self._collect(rate, turn, completion_id, results))
        # Wait for the first result before answering 200: a request that fails at once
        # still gets its HTTP error status.
        try:
            first: ModelResult | None = await anext(results)
        except StopAsyncIteration:
            first = None
        except BaseException:
            await results.aclose()
            raise
        return StreamingResponse(
            self._sse(rate, turn, completion_id, first, results),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
        )

    # ---- running the turn ---------------------------------------------------------------

    async def _results(
        self, responder: TurnResponder, turn: ChatTurn, request_id: str
    ) -> AsyncIterator[ModelResult]:
        """The model results of the turn, up to its end; failures as ``ChatCompletionError``."""
        request = TurnResponseRequest(
            request_id=request_id,
            input_audio=turn.input_audio,
            input_text=turn.input_text,
            history=turn.history,
            options=turn.options,
            session=turn.session_config(),
        )
        try:
            async with aclosing(responder.respond(request)) as results:
                async for result in results:
                    yield result
        except TurnResponseError as exc:
            raise _turn_failed(exc) from exc

    async def _collect(
        self,
        model_rate_hz: int,
        turn: ChatTurn,
        completion_id: str,
        results: AsyncIterator[ModelResult],
    ) -> dict[str, Any]:
        texts: list[str] = []
        transcripts: list[str] = []
        audio: list[npt.NDArray[np.float32]] = []
        async for result in results:
            if isinstance(result, ModelText):
                texts.append(result.delta)
            elif isinstance(result, ModelAudio):
                if result.text:
                    transcripts.append(result.text)
                if turn.wants_audio:
                    audio.append(np.asarray(result.samples, dtype=np.float32).reshape(-1))
        message: dict[str, Any] = {"role": "assistant", "refusal": None}
        transcript = "".join(transcripts)
        if turn.wants_audio and audio:
            rate = output_rate_hz(turn.audio_format)
            samples = resample(np.concatenate(audio), model_rate_hz, rate)
            message["content"] = "".join(texts) or None
            message["audio"] = {
                "id": f"audio_{uuid.uuid4().hex[:16]}",
                "data": b64encode_str(encode_audio(samples, turn.audio_format, rate)),
                "expires_at": int(time.time()) + AUDIO_EXPIRY_S,
                "transcript": transcript,
            }
        else:
            # Text asked for (or no audio came): the spoken words are the answer.
            message["content"] = "".join(texts) or transcript
            message["audio"] = None
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": turn.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            ],
            "usage": _usage(),
            "system_fingerprint": None,
        }

    async def _sse(
        self,
        model_rate_hz: int,
        turn: ChatTurn,
        completion_id: str,
        first: ModelResult | None,
        results: AsyncIterator[ModelResult],
    ) -> AsyncIterator[bytes]:
        created = int(time.time())
        audio_id = f"audio_{uuid.uuid4().hex[:16]}"
        encoder = _StreamAudio(model_rate_hz, turn.audio_format)
        audio_started = False

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            obj: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": turn.model,
                "system_fingerprint": None,
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "finish_reason": finish_reason,
                        "logprobs": None,
                    }
                ],
            }
            if turn.include_usage:
                obj["usage"] = None
            return _event(obj)

        def audio_delta(data: bytes, transcript: str) -> dict[str, Any]:
            nonlocal audio_started
            payload: dict[str, Any] = {"id": audio_id, "data": b64encode_str(data)}
            payload["transcript"] = transcript
            if not audio_started:
                payload["expires_at"] = int(time.time()) + AUDIO_EXPIRY_S
                audio_started = True
            return {"audio": payload}

        def deltas(result: ModelResult) -> list[dict[str, Any]]:
            if isinstance(result, ModelText):
                return [{"content": result.delta}] if result.delta else []
            if isinstance(result, ModelAudio):
                if not turn.wants_audio:
                    return [{"content": result.text}] if result.text else []
                data = encoder.encode(np.asarray(result.samples, dtype=np.float32).reshape(-1))
                if data or result.text:
                    return [audio_delta(data, result.text)]
            return []

        try:
            yield chunk({"role": "assistant", "content": None if turn.wants_audio else ""})
            async with aclosing(results):
                for delta in deltas(first) if first is not None else ():
                    yield chunk(delta)
                async for result in results:
                    for delta in deltas(result):
                        yield chunk(delta)
            if turn.wants_audio:
                tail = encoder.flush()
                if tail:
                    yield chunk(audio_delta(tail, ""))
            yield chunk({}, "stop")
            if turn.include_usage:
                yield _event(
                    {
                        "id": completion_id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": turn.model,
                        "system_fingerprint": None,
                        "choices": [],
                        "usage": _usage(),
                    }
                )
        except ChatCompletionError as exc:
            # The status line is sent already: the failure travels as an error chunk, and
            # no "stop" pretends the answer was complete.
            yield _event(exc.body())
        except Exception as exc:
            log.exception("chat completion %s failed mid-stream", completion_id)
            yield _event(_model_failed(str(exc)).body())
        yield b"data: [DONE]\n\n"


def _model_failed(message: str, *, code: str = "model_backend_failed") -> ChatCompletionError:
    return ChatCompletionError(500, code, f"the model failed: {message}", error_type=SERVER_ERROR)


def _turn_failed(exc: TurnResponseError) -> ChatCompletionError:
    """The HTTP answer to a turn response that did not complete."""
    if exc.kind is TurnFailure.REFUSED:
        return _bad(exc.code, exc.message, exc.param)
    if exc.kind is TurnFailure.UNAVAILABLE:
        return ChatCompletionError(503, exc.code, exc.message, error_type=SERVER_ERROR)
    if exc.kind is TurnFailure.BUSY:
        return ChatCompletionError(429, exc.code, exc.message, error_type=RATE_LIMIT_ERROR)
    return _model_failed(exc.message, code=exc.code)


def _usage() -> dict[str, int]:
    # A duplex model reports no token counts.
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def _event(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n\n"


__all__ = [
    "ChatCompletionError",
    "ChatTurn",
    "DuplexChatCompletionsAdapter",
    "parse_chat_request",
    "streaming_wav_header",
]
