"""semantic_vad on the wire, and session.update applied field by field.

A field the codec cannot honour is left out of the decoded patch and reported (param
named); the rest of the update goes on. The session objects we echo for semantic_vad
(natively served, or mapped onto server VAD with ``served_as``) validate against the
OpenAI SDK's server-event unions of both dialects.
"""

from __future__ import annotations

from typing import Any

import openai.types.beta.realtime as sdk_beta
import openai.types.realtime as sdk_ga
import pydantic
import pytest

from omniduplex.engine.duplex.session.turn_detection import served_turn_detection
from omniduplex.protocol.duplex import (
    FieldRejection,
    RealtimeProtocolError,
    apply_partially,
    build_session_object,
    command_from_realtime,
    events,
    validate_turn_detection,
)
from omniduplex.protocol.duplex import commands as cmd

GA = pydantic.TypeAdapter(sdk_ga.RealtimeServerEvent)
BETA = pydantic.TypeAdapter(sdk_beta.RealtimeServerEvent)


def _update(session: dict[str, Any]) -> cmd.UpdateSession:
    command = command_from_realtime({"type": "session.update", "session": session})
    assert isinstance(command, cmd.UpdateSession)
    return command


@pytest.mark.parametrize(
    "session",
    [
        # openai-agents 0.24's default (beta-style flat spelling through its converter)
        {"turn_detection": {"type": "semantic_vad", "interrupt_response": True}},
        # livekit-plugins-openai 1.8.9 (GA): eagerness medium by default, auto elsewhere
        {
            "type": "realtime",
            "audio": {
                "input": {
                    "turn_detection": {
                        "type": "semantic_vad",
                        "eagerness": "medium",
                        "create_response": True,
                        "interrupt_response": True,
                    }
                }
            },
        },
        # pipecat 1.14 (GA, exclude_none)
        {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}}},
    ],
)
def test_client_defaults_decode_whole(session: dict[str, Any]) -> None:
    command = _update(session)
    assert command.patch == session
    assert command.rejected == ()


def test_an_unsupported_turn_detection_key_is_left_out_and_the_rest_kept() -> None:
    command = _update(
        {
            "instructions": "be brief",
            "voice": "alloy",
            "turn_detection": {"type": "semantic_vad", "eagerness": "high", "idle_timeout_ms": 5},
        }
    )
    assert command.patch == {
        "instructions": "be brief",
        "voice": "alloy",
        "turn_detection": {"type": "semantic_vad", "eagerness": "high"},
    }
    assert [r.param for r in command.rejected] == ["turn_detection.idle_timeout_ms"]
    assert command.rejected[0].code == "unsupported_turn_detection"


def test_several_refusals_are_each_reported_in_order() -> None:
    command = _update(
        {
            "instructions": "hi",
            "input_audio_format": "opus",
            "audio": {
                "input": {"turn_detection": {"type": "server_vad", "interrupt_response": False}}
            },
            "overlap_policy": "listen_only",
        }
    )
    assert [r.param for r in command.rejected] == [
        "input_audio_format",
        "audio.input.turn_detection.interrupt_response",
        "overlap_policy",
    ]
    assert command.patch == {
        "instructions": "hi",
        "audio": {"input": {"turn_detection": {"type": "server_vad"}}},
    }


def test_an_update_with_nothing_usable_is_refused_whole() -> None:
    with pytest.raises(RealtimeProtocolError) as caught:
        _update({"type": "realtime", "turn_detection": {"type": "vad"}})
    assert caught.value.code == "unsupported_turn_detection"
    assert caught.value.param == "turn_detection.type"


def test_a_format_loses_its_whole_setting_not_just_the_rate() -> None:
    command = _update(
        {"instructions": "x", "input_audio_format": {"type": "audio/pcm", "rate": 16000.5}}
    )
    assert command.patch == {"instructions": "x"}
    assert [r.param for r in command.rejected] == ["input_audio_format.rate"]


def test_apply_partially_reraises_what_it_cannot_locate() -> None:
    def attempt(patch: dict[str, Any]) -> None:
        raise RealtimeProtocolError("no", "bad_event")  # no param: the whole update

    with pytest.raises(RealtimeProtocolError):
        apply_partially({"instructions": "x"}, attempt)


def test_apply_partially_finds_the_other_spelling() -> None:
    seen: list[dict[str, Any]] = []

    def attempt(patch: dict[str, Any]) -> int:
        seen.append(patch)
        if "output_modalities" in patch:
            raise RealtimeProtocolError("no modalities", "bad_event", param="modalities")
        return len(patch)

    outcome = apply_partially({"output_modalities": ["x"], "instructions": "y"}, attempt)
    assert outcome.applied and outcome.value == 1
    assert outcome.rejected == (FieldRejection("bad_event", "no modalities", "modalities"),)
    assert seen[-1] == {"instructions": "y"}


SEMANTIC = validate_turn_detection({"type": "semantic_vad", "eagerness": "low"})


@pytest.mark.parametrize("supported", [True, False])
@pytest.mark.parametrize(("dialect", "adapter"), [("ga", GA), ("beta", BETA)])
def test_semantic_session_objects_validate_against_the_sdk(supported, dialect, adapter) -> None:
    detection = served_turn_detection(SEMANTIC, semantic_supported=supported)
    session = build_session_object("duplex-1", turn_detection=detection)
    for event in (events.SessionCreated(session=session), events.SessionUpdated(session=session)):
        rendered = event.to_realtime(dialect)
        parsed = adapter.validate_python(rendered)
        assert parsed.type == event.type
        flat = rendered["session"].get("turn_detection")
        nested = rendered["session"].get("audio", {}).get("input", {}).get("turn_detection")
        echoed = nested if dialect == "ga" else flat
        assert echoed["type"] == "semantic_vad"
        assert echoed["eagerness"] == "low"
        # The mapping survives the SDK's parse (its models keep extra keys).
        dumped = parsed.model_dump()["session"]
        parsed_td = (
            dumped["audio"]["input"]["turn_detection"]
            if dialect == "ga"
            else dumped["turn_detection"]
        )
        if supported:
            assert "served_as" not in echoed
        else:
            assert echoed["served_as"]["type"] == "server_vad"
            assert echoed["served_as"]["silence_duration_ms"] == 1000
            assert parsed_td["served_as"]["silence_duration_ms"] == 1000
