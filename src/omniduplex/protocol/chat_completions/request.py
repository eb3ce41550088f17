"""A ``POST /v1/chat/completions`` body, validated into one ``ChatTurn`` for the model.

What a body may hold and what is refused is listed in the package docstring; everything a
duplex turn cannot honour is refused here, before the model sees the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from ..realtime.errors import RealtimeProtocolError
from ..realtime.formats import G711_ALAW, G711_ULAW, PCM16, WAV, parse_audio_format
from ..realtime.wire_values import is_number
from .content import message_content
from .errors import ChatCompletionError, bad_request

OUTPUT_FORMATS: Final = frozenset({WAV, PCM16, G711_ULAW, G711_ALAW})
MODALITIES: Final = frozenset({"text", "audio"})
ROLES: Final = frozenset({"system", "developer", "user", "assistant"})
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


class TurnInputs(Protocol):
    """What the model declares about the turns it takes (``DuplexCapabilities`` has it)."""

    @property
    def supports_text_only_turn(self) -> bool: ...

    def accepts_input_modality(self, modality: str) -> bool: ...


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


def load_json_body(raw: bytes) -> Any:
    """The request body as JSON; raises ``ChatCompletionError`` when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request("invalid_json", f"the request body is not valid JSON: {exc}") from exc


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_unsupported(body: Mapping[str, Any]) -> None:
    n = body.get("n")
    if n is not None and (not _is_int(n) or n != 1):
        raise bad_request(
            "unsupported_value", "n must be 1 on a duplex model: one request is one turn", "n"
        )
    for key in ("tools", "functions"):
        if body.get(key):
            raise bad_request(
                "unsupported_parameter", f"{key} are not supported on a duplex model", key
            )
    if body.get("logprobs"):
        raise bad_request(
            "unsupported_parameter", "logprobs are not supported on a duplex model", "logprobs"
        )
    if body.get("top_logprobs") is not None:
        raise bad_request(
            "unsupported_parameter",
            "top_logprobs are not supported on a duplex model",
            "top_logprobs",
        )
    response_format = body.get("response_format")
    if response_format is not None:
        kind = response_format.get("type") if isinstance(response_format, Mapping) else None
        if kind != "text":
            raise bad_request(
                "unsupported_value",
                "response_format must be {'type': 'text'} on a duplex model",
                "response_format",
            )


def _parse_modalities(body: Mapping[str, Any]) -> tuple[str, ...]:
    raw = body.get("modalities")
    if raw is None:
        return ("text",)
    if not isinstance(raw, list) or not raw or not all(isinstance(m, str) for m in raw):
        raise bad_request(
            "invalid_type", "modalities must be a non-empty list of strings", "modalities"
        )
    unknown = sorted(set(raw) - MODALITIES)
    if unknown:
        raise bad_request(
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
        raise bad_request("invalid_type", "audio must be an object with voice and format", "audio")
    voice = audio.get("voice")
    if isinstance(voice, Mapping):  # a custom voice object: {"id": ...}
        voice = voice.get("id")
    if voice is not None and not isinstance(voice, str):
        raise bad_request("invalid_type", "audio.voice must be a string", "audio.voice")
    raw_format = audio.get("format", WAV)
    try:
        name: str | None = parse_audio_format(raw_format, param="audio.format").name
    except RealtimeProtocolError:
        name = None
    if name not in OUTPUT_FORMATS:
        raise bad_request(
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
        if not is_number(temperature) or not 0 <= temperature <= 2:
            raise bad_request(
                "invalid_value", "temperature must be a number in [0, 2]", "temperature"
            )
        options["temperature"] = float(temperature)
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if not _is_int(value) or value <= 0:
            raise bad_request("invalid_value", f"{key} must be a positive integer", key)
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
    capabilities: TurnInputs,
    input_rate_hz: int,
) -> ChatTurn:
    """Validate an OpenAI chat request; raises ``ChatCompletionError``."""
    if not isinstance(body, Mapping):
        raise bad_request("invalid_type", "the request body must be a JSON object")
    model = body.get("model")
    if model is None:
        model = served_model
    elif not isinstance(model, str):
        raise bad_request("invalid_type", "model must be a string", "model")
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
        raise bad_request("invalid_type", "stream must be a boolean", "stream")
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, Mapping):
        raise bad_request("invalid_type", "stream_options must be an object", "stream_options")
    include_usage = bool((stream_options or {}).get("include_usage", False))
    options = _parse_options(body)

    messages = body.get("messages")
    if messages is None:
        raise bad_request("missing_required_parameter", "messages is required", "messages")
    if not isinstance(messages, list):
        raise bad_request("invalid_type", "messages must be a list", "messages")
    if not messages:
        raise bad_request("invalid_value", "messages must hold at least one message", "messages")
    instructions: list[str] = []
    turns: list[tuple[str, str, list[npt.NDArray[np.float32]]]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise bad_request("invalid_type", f"messages[{i}] must be an object", f"messages[{i}]")
        role = message.get("role")
        if role == "tool":
            raise bad_request(
                "unsupported_value",
                "tool messages are not supported on a duplex model",
                f"messages[{i}].role",
            )
        if role not in ROLES:
            raise bad_request(
                "invalid_value",
                f"messages[{i}].role must be one of {sorted(ROLES)}",
                f"messages[{i}].role",
            )
        text, audio = message_content(message, i, role, input_rate_hz)
        if role in ("system", "developer"):
            if text:
                instructions.append(text)
            continue
        turns.append((role, text, audio))
    if not turns or turns[-1][0] != "user":
        raise bad_request(
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
        raise bad_request(
            "invalid_value", "the last user message holds no text and no audio", "messages"
        )
    if not audio_parts and not capabilities.supports_text_only_turn:
        raise bad_request(
            "unsupported_input",
            "this duplex model answers speech input only: send audio content, or use "
            "/v1/realtime?duplex=1",
            "messages",
        )
    if audio_parts and not capabilities.accepts_input_modality("audio"):
        raise bad_request("unsupported_input", "this model does not take audio input", "messages")
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
