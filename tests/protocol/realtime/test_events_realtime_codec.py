"""Tier 1 events: parse-back, snapshots at construction, and the SDK-driven shape fixes."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from test_events_realtime_samples import (
    ASSISTANT_ITEM_ID,
    AUDIO_100MS_B64,
    RESPONSE_ID,
    RESPONSES,
    assistant_item,
    session_object,
    tier1_samples,
    user_text_image_item,
    vad_g711_session,
)

from omniduplex.protocol.realtime import events as rt
from omniduplex.protocol.realtime.base import DIALECTS, RealtimeEvent
from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.event_shapes import DETAILED_REASON_KEY

SAMPLES = tier1_samples()


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_render_parse_render_is_identical(event: RealtimeEvent, dialect: str) -> None:
    rendered = event.to_realtime(dialect)  # type: ignore[arg-type]
    if rendered is None:
        return
    wire = orjson.loads(orjson.dumps(rendered))
    wire["server_event_seq"] = 7  # stamped by the transport; not the event's
    parsed = rt.realtime_event_from_realtime(wire)
    assert type(parsed) is type(event)
    assert parsed.event_id == event.event_id
    assert parsed.to_realtime(dialect) == rendered  # type: ignore[arg-type]


def test_payloads_are_snapshotted_when_built() -> None:
    item = assistant_item()
    added = rt.ConversationItemAdded(previous_item_id=None, item=item)
    before = copy.deepcopy(added.to_realtime())
    item["status"] = "completed"
    item["content"].append({"type": "output_audio", "transcript": "later"})
    assert added.to_realtime() == before
    assert added.to_realtime()["item"]["content"] == []

    session = session_object()
    created = rt.SessionCreated(session=session)
    rendered = copy.deepcopy(created.to_realtime())
    session["audio"]["input"]["format"]["rate"] = 8000
    session["model"] = "other"
    assert created.to_realtime() == rendered


def test_beta_rendering_leaves_the_event_untouched() -> None:
    event = rt.ResponseDone(response=RESPONSES["cancelled_barge_in"]())
    ga_before = copy.deepcopy(event.to_realtime("ga"))
    event.to_realtime("beta")
    assert event.to_realtime("ga") == ga_before


def test_internal_identity_is_not_rendered() -> None:
    event = rt.ResponseOutputAudioDelta(
        response_id=RESPONSE_ID,
        item_id=ASSISTANT_ITEM_ID,
        delta=AUDIO_100MS_B64,
        session_id="duplex-x",
        epoch=3,
    )
    for dialect in DIALECTS:
        rendered = event.to_realtime(dialect)
        assert rendered is not None
        assert "session_id" not in rendered and "epoch" not in rendered


def test_event_id_format() -> None:
    event_id = rt.InputAudioBufferCleared().event_id
    assert event_id.startswith("event_") and len(event_id) == 6 + 32
    int(event_id[6:], 16)


# ---- the shapes OpenAI's schema forces -----------------------------------------------


@pytest.mark.parametrize(
    ("ours", "openai"),
    [
        ("barge_in", "client_cancelled"),
        ("client_cancelled", "client_cancelled"),
        ("output_audio_buffer_clear", "client_cancelled"),
        ("turn_detected", "turn_detected"),
        ("server_vad_speech_started", "turn_detected"),
        ("barge_in_on_speech", "turn_detected"),
    ],
)
def test_cancel_reasons_fold_into_openais(ours: str, openai: str) -> None:
    response = RESPONSES["cancelled_client"]()
    response["status_details"]["reason"] = ours
    rendered = rt.ResponseDone(response=response).to_realtime()["response"]
    assert rendered["status_details"] == {"type": "cancelled", "reason": openai}
    assert rendered["metadata"].get(DETAILED_REASON_KEY) == (None if ours == openai else ours)
    assert rendered["output"][0]["status"] == "incomplete"


def test_completed_keeps_no_non_openai_reason() -> None:
    rendered = rt.ResponseDone(response=RESPONSES["completed_stop"]()).to_realtime()["response"]
    assert rendered["status_details"] == {"type": "completed"}
    assert rendered["metadata"][DETAILED_REASON_KEY] == "stop"


def test_failed_reason_becomes_an_error_object() -> None:
    rendered = rt.ResponseDone(response=RESPONSES["failed"]()).to_realtime()["response"]
    assert rendered["status_details"] == {
        "type": "failed",
        "error": {"type": "server_error", "code": "runtime_data_plane_stream_failed"},
    }
    assert rendered["metadata"][DETAILED_REASON_KEY] == "runtime_data_plane_stream_failed"


def test_metadata_values_become_strings() -> None:
    rendered = rt.ResponseCreated(response=RESPONSES["created"]()).to_realtime()["response"]
    assert rendered["metadata"] == {"request_id": "req-7", "epoch": "1", "end_of_turn": "true"}
    assert rendered["output_modalities"] == ["audio", "text"]


def test_beta_shapes() -> None:
    done = rt.ResponseDone(response=RESPONSES["completed_stop"]()).to_realtime("beta")
    response = done["response"]
    assert "output_modalities" not in response and response["modalities"] == ["audio", "text"]
    assert [p["type"] for p in response["output"][0]["content"]] == ["audio", "text"]

    image = rt.ConversationItemCreated(previous_item_id=None, item=user_text_image_item())
    assert [p["type"] for p in image.to_realtime("beta")["item"]["content"]] == ["input_text"]

    session = rt.SessionUpdated(session=vad_g711_session()).to_realtime("beta")["session"]
    for key in ("audio", "type", "output_modalities"):
        assert key not in session
    assert session["input_audio_format"] == "pcm16"
    assert session["output_audio_format"] == "g711_ulaw"
    assert session["model"] == "gpt-4o-realtime-preview"
    assert session["turn_detection"]["type"] == "server_vad"
    assert session["voice"] == "alloy"
    assert session["max_response_output_tokens"] == "inf"


def test_beta_session_derives_flat_fields_and_drops_what_beta_cannot_say() -> None:
    ga_only = {
        "type": "realtime",
        "model": "minicpmo_4_5",
        "output_modalities": ["audio"],
        "max_output_tokens": 512,
        "audio": {
            "input": {"format": {"type": "audio/pcma"}, "turn_detection": {"type": "server_vad"}},
            "output": {"format": {"type": "audio/pcm"}, "voice": "verse", "speed": 1.1},
        },
        "tools": [{"type": "mcp", "server_label": "x"}],
        "tool_choice": {"type": "function", "name": "f"},
    }
    session = rt.SessionCreated(session=ga_only).to_realtime("beta")["session"]
    assert session == {
        "modalities": ["audio"],
        "max_response_output_tokens": 512,
        "input_audio_format": "g711_alaw",
        "output_audio_format": "pcm16",
        "turn_detection": {"type": "server_vad"},
        "voice": "verse",
        "speed": 1.1,
        "tools": [],
    }


def test_function_call_arguments_done_names_the_function() -> None:
    sample = next(e for e in SAMPLES if isinstance(e, rt.ResponseFunctionCallArgumentsDone))
    assert sample.to_realtime()["name"] == "get_weather"


def test_transcription_usage_defaults_to_nothing_spent() -> None:
    usage = rt.ConversationItemInputAudioTranscriptionCompleted(
        item_id="i", transcript="x"
    ).to_realtime()["usage"]
    assert usage == {"type": "tokens", "input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


def test_transcription_delta_renders_openai_shape_without_logprobs() -> None:
    event = rt.ConversationItemInputAudioTranscriptionDelta(
        event_id="event_1", item_id="item_u", delta="what's"
    )
    expected = {
        "type": "conversation.item.input_audio_transcription.delta",
        "event_id": "event_1",
        "item_id": "item_u",
        "content_index": 0,
        "delta": "what's",
    }
    assert event.to_realtime("ga") == event.to_realtime("beta") == expected
    parsed = rt.realtime_event_from_realtime({**expected, "logprobs": None})
    assert parsed == event


def test_tier1_error_envelope() -> None:
    rendered = rt.RealtimeErrorEvent(
        code="bad_event", message="m", param="", client_event_id="c1"
    ).to_realtime()
    assert rendered["error"] == {
        "type": "invalid_request_error",
        "code": "bad_event",
        "message": "m",
        "event_id": "c1",
    }


# ---- parse failures ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "code"),
    [
        ([], "bad_event"),
        ("session.created", "bad_event"),
        ({}, "bad_event"),
        ({"type": 5}, "bad_event"),
        ({"type": "turn.event"}, "unknown_event"),
        ({"type": "response.audio.delta", "item_id": "i"}, "bad_event"),
        ({"type": "session.created", "session": []}, "bad_event"),
        (
            {"type": "input_audio_buffer.speech_started", "item_id": "i", "audio_start_ms": True},
            "bad_event",
        ),
        ({"type": "input_audio_buffer.speech_started", "item_id": None}, "bad_event"),
        ({"type": "error", "error": "boom"}, "bad_event"),
        ({"type": "error", "error": {"message": "m"}}, "bad_event"),
        ({"type": "rate_limits.updated", "rate_limits": [1]}, "bad_event"),
    ],
)
def test_bad_objects_raise_protocol_errors(obj: Any, code: str) -> None:
    with pytest.raises(RealtimeProtocolError) as info:
        rt.realtime_event_from_realtime(obj)
    assert info.value.code == code


def test_registry_has_both_spellings() -> None:
    assert rt.REALTIME_EVENT_TYPES["response.audio.delta"] is rt.ResponseOutputAudioDelta
    assert rt.REALTIME_EVENT_TYPES["response.output_audio.delta"] is rt.ResponseOutputAudioDelta
    assert len(rt.REALTIME_EVENT_CLASSES) == 42
    assert all(cls.tier == 1 for cls in rt.REALTIME_EVENT_CLASSES)
