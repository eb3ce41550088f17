"""One chat message's ``content``: its text and the audio parts decoded for the model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ..realtime.audio import b64decode_strict, decode_audio, resample
from ..realtime.errors import RealtimeProtocolError
from ..realtime.formats import (
    DEFAULT_INPUT_RATE_HZ,
    G711_ALAW,
    G711_ULAW,
    PCM16,
    PCM_F32LE,
    WAV,
    parse_audio_format,
)
from .errors import bad_request

INPUT_FORMATS: Final = frozenset({WAV, PCM16, PCM_F32LE, G711_ULAW, G711_ALAW})
TEXT_PARTS: Final = frozenset({"text", "input_text"})
AUDIO_PARTS: Final = frozenset({"input_audio", "audio"})
# Parts an assistant message may carry that hold no input for the model.
SKIPPED_PARTS: Final = frozenset({"refusal"})


def _decode_audio_part(payload: Any, param: str, target_rate: int) -> npt.NDArray[np.float32]:
    """One ``input_audio`` payload as float32 mono at ``target_rate``."""
    if not isinstance(payload, Mapping):
        raise bad_request(
            "invalid_type", "input_audio must be an object with data and format", param
        )
    data = payload.get("data")
    if not isinstance(data, str) or not data:
        raise bad_request(
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
            raise bad_request("invalid_value", exc.message, exc.param) from exc
    if audio_format is None or audio_format.name not in INPUT_FORMATS:
        raise bad_request(
            "unsupported_audio_format",
            f"input audio format {raw_format!r} is not supported; use one of "
            f"{sorted(INPUT_FORMATS)}",
            f"{param}.format",
        )
    try:
        raw = b64decode_strict(data)
    except RealtimeProtocolError as exc:
        raise bad_request(
            "invalid_base64", "input_audio.data is not valid base64", f"{param}.data"
        ) from exc
    name = audio_format.name
    rate = audio_format.effective_rate(DEFAULT_INPUT_RATE_HZ)
    try:
        samples, rate = decode_audio(raw, name, rate)
    except RealtimeProtocolError as exc:
        raise bad_request(exc.code or "bad_audio", exc.message, f"{param}.data") from exc
    return resample(samples, rate, target_rate)


def message_content(
    message: Mapping[str, Any], index: int, role: str, input_rate: int
) -> tuple[str, list[npt.NDArray[np.float32]]]:
    """A message's text (parts joined with spaces) and decoded audio parts."""
    param = f"messages[{index}].content"
    content = message.get("content")
    if content is None:
        if role == "assistant":
            return "", []
        raise bad_request("missing_required_parameter", f"{param} is required", param)
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise bad_request("invalid_type", f"{param} must be a string or a list of parts", param)
    texts: list[str] = []
    audio: list[npt.NDArray[np.float32]] = []
    for j, part in enumerate(content):
        part_param = f"{param}[{j}]"
        if not isinstance(part, Mapping):
            raise bad_request("invalid_type", f"{part_param} must be an object", part_param)
        kind = part.get("type")
        if kind in TEXT_PARTS:
            text = part.get("text")
            if not isinstance(text, str):
                raise bad_request(
                    "invalid_type", f"{part_param}.text must be a string", f"{part_param}.text"
                )
            if text:
                texts.append(text)
        elif kind in AUDIO_PARTS:
            if role != "user":
                raise bad_request(
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
            raise bad_request(
                "unsupported_content_type",
                f"content of type {kind!r} is not supported on a duplex model: a duplex turn "
                "takes text and audio",
                f"{part_param}.type",
            )
    return " ".join(texts), audio
