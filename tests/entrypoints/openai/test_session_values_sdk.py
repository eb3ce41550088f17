"""Each wrong session value is refused as OpenAI refuses it, and the rest of the update applies.

Through the real server and the unmodified ``openai`` SDK, in both dialects: a
``session.update`` carrying one bad field beside ``instructions`` gets one
``invalid_request_error`` naming that field as the client spelled it, and the
``session.updated`` that follows carries the instructions. Every event received is
validated with the SDK's own server-event union of its dialect.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai.types.beta.realtime as beta_types
import openai.types.realtime as ga_types
import orjson
import pydantic
import pytest
from openai import AsyncOpenAI
from server_harness import TIMEOUT_S, run_server

GA = pydantic.TypeAdapter(ga_types.RealtimeServerEvent)
BETA = pydantic.TypeAdapter(beta_types.RealtimeServerEvent)
MARKER = "Answer in one word."
# Refused after everything else in the update: a fence that says the update is done.
FENCE_CODE = "response_cancel_not_active"


def _vad(**keys: Any) -> dict[str, Any]:
    return {"type": "server_vad", **keys}


def _ga_input(**keys: Any) -> dict[str, Any]:
    return {"audio": {"input": keys}}


def _ga_output(**keys: Any) -> dict[str, Any]:
    return {"audio": {"output": keys}}


# (fields sent beside the instructions, the param the error must name)
GA_REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"max_output_tokens": "lots"}, "max_output_tokens"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": 4097}, "max_output_tokens"),
    ({"max_output_tokens": 1.5}, "max_output_tokens"),
    ({"output_modalities": ["video"]}, "output_modalities"),
    ({"output_modalities": "text"}, "output_modalities"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "name": 3}]}, "tools[0].name"),
    ({"tools": [{"type": "function", "name": "f", "description": 3}]}, "tools[0].description"),
    ({"tracing": "manual"}, "tracing"),
    ({"tracing": {"workflow_name": 3}}, "tracing.workflow_name"),
    ({"truncation": "sometimes"}, "truncation"),
    (
        {"truncation": {"type": "retention_ratio", "retention_ratio": 2}},
        "truncation.retention_ratio",
    ),
    ({"prompt": {"id": 3}}, "prompt.id"),
    ({"include": ["item.everything"]}, "include"),
    (_ga_output(voice=3), "audio.output.voice"),
    (_ga_output(speed=1.6), "audio.output.speed"),
    (_ga_output(speed=0.2), "audio.output.speed"),
    (_ga_output(speed="fast"), "audio.output.speed"),
    (_ga_input(format={"type": "audio/flac"}), "audio.input.format"),
    (_ga_output(format={"type": 3}), "audio.output.format"),
    (_ga_input(turn_detection=_vad(threshold="high")), "audio.input.turn_detection.threshold"),
    (_ga_input(turn_detection=_vad(threshold=1.5)), "audio.input.turn_detection.threshold"),
    (
        _ga_input(turn_detection=_vad(prefix_padding_ms="x")),
        "audio.input.turn_detection.prefix_padding_ms",
    ),
    (
        _ga_input(turn_detection=_vad(silence_duration_ms=1.5)),
        "audio.input.turn_detection.silence_duration_ms",
    ),
    (
        _ga_input(turn_detection={"type": "semantic_vad", "eagerness": "max"}),
        "audio.input.turn_detection.eagerness",
    ),
    (
        _ga_input(turn_detection=_vad(create_response="yes")),
        "audio.input.turn_detection.create_response",
    ),
    (_ga_input(turn_detection={"type": "magic"}), "audio.input.turn_detection.type"),
    (_ga_input(noise_reduction={"type": "mid_field"}), "audio.input.noise_reduction.type"),
    (_ga_input(noise_reduction="near_field"), "audio.input.noise_reduction"),
    (_ga_input(transcription={"model": 3}), "audio.input.transcription.model"),
    (_ga_input(transcription={"language": 3}), "audio.input.transcription.language"),
    (_ga_input(transcription={"prompt": 3}), "audio.input.transcription.prompt"),
    (_ga_input(transcription="whisper-1"), "audio.input.transcription"),
]
BETA_REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": 2.5}, "temperature"),
    ({"max_response_output_tokens": "lots"}, "max_response_output_tokens"),
    ({"max_response_output_tokens": 4097}, "max_response_output_tokens"),
    ({"modalities": ["video"]}, "modalities"),
    ({"voice": 3}, "voice"),
    ({"speed": 2}, "speed"),
    ({"input_audio_format": "flac"}, "input_audio_format"),
    ({"output_audio_format": 3}, "output_audio_format"),
    ({"tool_choice": 3}, "tool_choice"),
    ({"tools": [{"type": "web", "name": "f"}]}, "tools[0].type"),
    ({"tracing": 3}, "tracing"),
    ({"turn_detection": _vad(threshold="high")}, "turn_detection.threshold"),
    ({"turn_detection": _vad(threshold=-0.1)}, "turn_detection.threshold"),
    ({"turn_detection": _vad(silence_duration_ms=-5)}, "turn_detection.silence_duration_ms"),
    ({"turn_detection": _vad(prefix_padding_ms=2.5)}, "turn_detection.prefix_padding_ms"),
    ({"turn_detection": {"type": "semantic_vad", "eagerness": 3}}, "turn_detection.eagerness"),
    ({"turn_detection": _vad(create_response=1)}, "turn_detection.create_response"),
    ({"turn_detection": {"type": "vad"}}, "turn_detection.type"),
    ({"input_audio_noise_reduction": {"type": "mid_field"}}, "input_audio_noise_reduction.type"),
    ({"input_audio_noise_reduction": 3}, "input_audio_noise_reduction"),
    ({"input_audio_transcription": {"model": 3}}, "input_audio_transcription.model"),
    (
        {"input_audio_transcription": {"model": "whisper-1", "language": 3}},
        "input_audio_transcription.language",
    ),
    (
        {"input_audio_transcription": {"model": "whisper-1", "prompt": ["x"]}},
        "input_audio_transcription.prompt",
    ),
]
# Every field above with a value OpenAI accepts: none is refused.
GA_ACCEPTED: dict[str, Any] = {
    "max_output_tokens": 4096,
    "output_modalities": ["text"],
    "tool_choice": "none",
    "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {}}],
    "tracing": {"workflow_name": "w", "group_id": "g", "metadata": {"k": "v"}},
    "truncation": {"type": "retention_ratio", "retention_ratio": 0.5},
    "prompt": {"id": "pmpt_1", "version": "2", "variables": {"city": "Paris"}},
    "include": ["item.input_audio_transcription.logprobs"],
    "audio": {
        "input": {
            "format": {"type": "audio/pcm", "rate": 24000},
            "turn_detection": {"type": "semantic_vad", "eagerness": "low"},
            "noise_reduction": {"type": "far_field"},
            "transcription": {"model": "whisper-1", "language": "en", "prompt": "names"},
        },
        "output": {"format": {"type": "audio/pcmu"}, "voice": "marin", "speed": 1.5},
    },
}
BETA_ACCEPTED: dict[str, Any] = {
    "temperature": 1.2,
    "max_response_output_tokens": "inf",
    "modalities": ["text", "audio"],
    "voice": "alloy",
    "speed": 0.25,
    "input_audio_format": "g711_ulaw",
    "output_audio_format": "pcm16",
    "tracing": "auto",
    "turn_detection": _vad(threshold=0.6, prefix_padding_ms=200, silence_duration_ms=400.0),
    "input_audio_noise_reduction": {"type": "near_field"},
    "input_audio_transcription": {"model": "whisper-1"},
}


@pytest.fixture(scope="module")
def server():
    with run_server("loopback") as running:
        yield running


async def _update(server: Any, dialect: str, fields: dict[str, Any]) -> list[dict[str, Any]]:
    """Send ``fields`` beside the instructions; every event up to the fence, validated."""
    if dialect == "ga":
        client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
        adapter, connection = GA, client.realtime.connect(model="loopback")
        session = {"type": "realtime", "instructions": MARKER, **fields}
    else:
        client = AsyncOpenAI(api_key="unused", websocket_base_url=server.ws_url.rsplit("/", 1)[0])
        adapter, connection = BETA, client.beta.realtime.connect(model="loopback")
        session = {"instructions": MARKER, **fields}
    events: list[dict[str, Any]] = []
    async with connection as conn:
        await conn.session.update(session=session)  # type: ignore[arg-type]
        await conn.response.cancel()
        while True:
            event = orjson.loads(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S))
            assert adapter.validate_python(event).type == event["type"]
            if event["type"] == "error" and event["error"]["code"] == FENCE_CODE:
                return events
            events.append(event)


def _outcome(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    assert events[0]["type"] == "session.created"
    errors = [e["error"] for e in events if e["type"] == "error"]
    updated = [e["session"] for e in events if e["type"] == "session.updated"]
    assert len(updated) == 1, events
    return errors, updated[0]


CASES = [("ga", fields, param) for fields, param in GA_REFUSED] + [
    ("beta", fields, param) for fields, param in BETA_REFUSED
]


@pytest.mark.parametrize(("dialect", "fields", "param"), CASES, ids=[c[2] for c in CASES])
async def test_a_wrong_value_is_refused_by_name_and_the_rest_applies(
    server: Any, dialect: str, fields: dict[str, Any], param: str
) -> None:
    errors, updated = _outcome(await _update(server, dialect, fields))
    assert [(e["type"], e["param"]) for e in errors] == [("invalid_request_error", param)]
    assert updated["instructions"] == MARKER


@pytest.mark.parametrize(
    ("dialect", "fields"), [("ga", GA_ACCEPTED), ("beta", BETA_ACCEPTED)], ids=["ga", "beta"]
)
async def test_every_field_with_a_value_openai_takes_is_accepted(
    server: Any, dialect: str, fields: dict[str, Any]
) -> None:
    errors, updated = _outcome(await _update(server, dialect, fields))
    assert errors == []
    assert updated["instructions"] == MARKER
    if dialect == "ga":
        assert updated["output_modalities"] == ["text"]
        assert updated["tracing"] == GA_ACCEPTED["tracing"]
        assert updated["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    else:
        assert updated["max_response_output_tokens"] == "inf"
        assert updated["turn_detection"]["silence_duration_ms"] == 400
        assert updated["input_audio_noise_reduction"] == {"type": "near_field"}
