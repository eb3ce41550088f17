"""The session readers hold every numeric, enum and shaped field to OpenAI's session object.

Table-driven: each wrong value is refused by ``validate_session`` (what the codec runs on
every ``session.update``) naming the precise param in the client's spelling, and by the
engine's ``SessionSettings.updated`` with the same param (it reads through the same
readers); each value OpenAI takes is accepted by both.
"""

from __future__ import annotations

from typing import Any

import pytest

from omniduplex.engine.duplex.settings import SessionSettings
from omniduplex.protocol.realtime.capabilities import RealtimeProtocolCapabilities
from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.session import validate_session

# What the engine's decoder is given: turn detection checked at decode time too.
SERVED = RealtimeProtocolCapabilities(validate_turn_detection=True)

REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"temperature": "0.8"}, "temperature"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": 2.01}, "temperature"),
    ({"speed": 0.24}, "speed"),
    ({"speed": 1.51}, "speed"),
    ({"speed": True}, "speed"),
    ({"audio": {"output": {"speed": 0}}}, "audio.output.speed"),
    ({"max_output_tokens": 4097}, "max_output_tokens"),
    ({"max_response_output_tokens": 0}, "max_response_output_tokens"),
    ({"max_response_output_tokens": 10.0}, "max_response_output_tokens"),
    ({"max_output_tokens": "some"}, "max_output_tokens"),
    ({"tracing": 1}, "tracing"),
    ({"tracing": "on"}, "tracing"),
    ({"tracing": {"group_id": ["g"]}}, "tracing.group_id"),
    ({"tracing": {"metadata": "m"}}, "tracing.metadata"),
    ({"truncation": "never"}, "truncation"),
    ({"truncation": {"type": "oldest"}}, "truncation.type"),
    ({"truncation": {"type": "retention_ratio"}}, "truncation.retention_ratio"),
    (
        {"truncation": {"type": "retention_ratio", "retention_ratio": -1}},
        "truncation.retention_ratio",
    ),
    (
        {
            "truncation": {
                "type": "retention_ratio",
                "retention_ratio": 0.5,
                "token_limits": {"post_instructions": 1.5},
            }
        },
        "truncation.token_limits.post_instructions",
    ),
    ({"prompt": "pmpt_1"}, "prompt"),
    ({"prompt": {}}, "prompt.id"),
    ({"prompt": {"id": "p", "version": 2}}, "prompt.version"),
    ({"prompt": {"id": "p", "variables": ["a"]}}, "prompt.variables"),
    ({"include": "item.input_audio_transcription.logprobs"}, "include"),
    ({"include": [None]}, "include"),
    ({"input_audio_noise_reduction": {"type": "near"}}, "input_audio_noise_reduction.type"),
    ({"input_audio_noise_reduction": []}, "input_audio_noise_reduction"),
    ({"audio": {"input": {"noise_reduction": {"type": 1}}}}, "audio.input.noise_reduction.type"),
    (
        {"input_audio_transcription": {"model": None, "language": 1}},
        "input_audio_transcription.language",
    ),
    ({"audio": {"input": {"transcription": {"prompt": {}}}}}, "audio.input.transcription.prompt"),
    (
        {"audio": {"input": {"transcription": {"keywords": "a"}}}},
        "audio.input.transcription.keywords",
    ),
    ({"audio": {"input": {"transcription": {"delay": "slow"}}}}, "audio.input.transcription.delay"),
    ({"audio": {"input": {"transcription": 1}}}, "audio.input.transcription"),
    (
        {"turn_detection": {"type": "server_vad", "silence_duration_ms": 0.5}},
        "turn_detection.silence_duration_ms",
    ),
    ({"turn_detection": {"type": 1}}, "turn_detection.type"),
    ({"turn_detection": {"type": "server_vad", "threshold": "high"}}, "turn_detection.threshold"),
]
ACCEPTED: list[dict[str, Any]] = [
    {"temperature": 0},
    {"temperature": 2},
    {"speed": 0.25},
    {"audio": {"output": {"speed": 1.5}}},
    {"max_output_tokens": 1},
    {"max_response_output_tokens": 4096},
    {"max_output_tokens": "inf"},
    {"tracing": None},
    {"tracing": "auto"},
    {"tracing": {}},
    {"truncation": "auto"},
    {"truncation": "disabled"},
    {
        "truncation": {
            "type": "retention_ratio",
            "retention_ratio": 1,
            "token_limits": {"post_instructions": 1000},
        }
    },
    {"prompt": None},
    {"prompt": {"id": "p", "version": None, "variables": {"a": "b"}}},
    {"include": []},
    {"input_audio_noise_reduction": None},
    {"input_audio_noise_reduction": {"type": "near_field"}},
    {"audio": {"input": {"noise_reduction": {"type": "far_field"}}}},
    {"input_audio_transcription": None},
    {"input_audio_transcription": {"model": "whisper-1", "language": "de", "prompt": "x"}},
    {"audio": {"input": {"transcription": {"model": "m", "keywords": ["a"], "delay": "low"}}}},
    {"turn_detection": {"type": "server_vad", "silence_duration_ms": 300.0}},
]


@pytest.mark.parametrize(("session", "param"), REFUSED, ids=[r[1] for r in REFUSED])
def test_a_wrong_value_is_refused_naming_its_param(session: dict[str, Any], param: str) -> None:
    with pytest.raises(RealtimeProtocolError) as caught:
        validate_session(session, SERVED)
    assert caught.value.param == param


# The fields the engine's settings read (the rest are echoed as the codec accepted them).
ENGINE_READ = [
    (session, param)
    for session, param in REFUSED
    if param.startswith(("temperature", "max_", "turn_detection"))
]


@pytest.mark.parametrize(("session", "param"), ENGINE_READ, ids=[r[1] for r in ENGINE_READ])
def test_the_engine_refuses_what_the_codec_refuses(session: dict[str, Any], param: str) -> None:
    with pytest.raises(RealtimeProtocolError) as caught:
        SessionSettings(model="m").updated(session)
    assert caught.value.param == param


@pytest.mark.parametrize("session", ACCEPTED)
def test_a_value_openai_takes_is_accepted(session: dict[str, Any]) -> None:
    validate_session(session, SERVED)
    SessionSettings(model="m").updated(session)
