"""Decode-stage validation (wire.md 3.2, 3.5): every rule, its code, its param, and the echo
of the client's ``event_id`` on the error."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from omniduplex.protocol.duplex import commands as cmd
from omniduplex.protocol.duplex.errors import ERROR_CODES, DuplexCommandError
from omniduplex.protocol.realtime.capabilities import RealtimeProtocolCapabilities
from omniduplex.protocol.realtime.errors import RealtimeProtocolError

PCM = base64.b64encode(b"\x00\x01" * 240).decode()
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40).decode()
ANY = object()

# (label, event without event_id, expected code, expected param or ANY)
REFUSALS: list[tuple[str, dict[str, Any], str, Any]] = [
    # envelope
    ("type not a string", {"type": 7}, "bad_event", "type"),
    ("type missing", {"session": {}}, "bad_event", "type"),
    ("unknown type", {"type": "session.create"}, "unknown_event", "type"),
    ("old push_chunk alias", {"type": "push_chunk", "audio": PCM}, "unknown_event", "type"),
    ("old input.audio.append", {"type": "input.audio.append"}, "unknown_event", "type"),
    ("empty type", {"type": ""}, "unknown_event", "type"),
    # session.update: formats first, then turn detection (3.2 order)
    (
        "input format",
        {"type": "session.update", "session": {"input_audio_format": "opus"}},
        "unsupported_audio_format",
        "input_audio_format",
    ),
    (
        "wav is not an input format",
        {"type": "session.update", "session": {"audio": {"input": {"format": "wav"}}}},
        "unsupported_audio_format",
        "audio.input.format",
    ),
    (
        "output format",
        {"type": "session.update", "session": {"output_audio_format": "mp3"}},
        "unsupported_audio_format",
        "output_audio_format",
    ),
    (
        "response_format spelling",
        {"type": "session.update", "session": {"response_format": "flac"}},
        "unsupported_audio_format",
        "response_format",
    ),
    (
        "f32 is not an output format",
        {"type": "session.update", "session": {"audio": {"output": {"format": "pcm_f32le"}}}},
        "unsupported_audio_format",
        "audio.output.format",
    ),
    (
        "input before output before turn detection",
        {
            "type": "session.update",
            "session": {
                "turn_detection": {"type": "vad"},
                "output_audio_format": "mp3",
                "input_audio_format": "opus",
            },
        },
        "unsupported_audio_format",
        "input_audio_format",
    ),
    (
        "output before turn detection",
        {
            "type": "session.update",
            "session": {"turn_detection": {"type": "vad"}, "output_audio_format": "mp3"},
        },
        "unsupported_audio_format",
        "output_audio_format",
    ),
    (
        "unknown turn detection type",
        {"type": "session.update", "session": {"turn_detection": {"type": "vad"}}},
        "unsupported_turn_detection",
        "turn_detection.type",
    ),
    (
        "nested unknown turn detection type",
        {
            "type": "session.update",
            "session": {"audio": {"input": {"turn_detection": {"type": "vad"}}}},
        },
        "unsupported_turn_detection",
        "audio.input.turn_detection.type",
    ),
    ("session not an object", {"type": "session.update", "session": "x"}, "bad_event", "session"),
    ("session null", {"type": "session.update", "session": None}, "bad_event", "session"),
    (
        "unknown session type",
        {"type": "session.update", "session": {"type": "translation"}},
        "invalid_session_config",
        "type",
    ),
    (
        "input rate out of range",
        {"type": "session.update", "session": {"sample_rate_hz": 4000}},
        "bad_event",
        "sample_rate_hz",
    ),
    (
        "format object rate",
        {
            "type": "session.update",
            "session": {"input_audio_format": {"type": "audio/pcm", "rate": 16000.5}},
        },
        "bad_event",
        "input_audio_format.rate",
    ),
    (
        "temperature type",
        {"type": "session.update", "session": {"temperature": "hot"}},
        "bad_event",
        "temperature",
    ),
    (
        "unknown modality",
        {"type": "session.update", "session": {"output_modalities": ["video"]}},
        "bad_event",
        "output_modalities",
    ),
    ("voice type", {"type": "session.update", "session": {"voice": 3}}, "bad_event", "voice"),
    (
        "token cap zero",
        {"type": "session.update", "session": {"max_response_output_tokens": 0}},
        "bad_event",
        "max_response_output_tokens",
    ),
    (
        "instructions type",
        {"type": "session.update", "session": {"instructions": ["a"]}},
        "bad_event",
        "instructions",
    ),
    ("speed zero", {"type": "session.update", "session": {"speed": 0}}, "bad_event", "speed"),
    (
        "extra_body type",
        {"type": "session.update", "session": {"extra_body": "x"}},
        "bad_event",
        "extra_body",
    ),
    # conversation.item.create
    (
        "item audio format, checked first",
        {
            "type": "conversation.item.create",
            "item": {"role": "robot", "content": [{"type": "input_audio", "format": "opus"}]},
        },
        "unsupported_audio_format",
        "item.content[0].format",
    ),
    ("item missing", {"type": "conversation.item.create"}, "bad_event", "item"),
    ("item not an object", {"type": "conversation.item.create", "item": []}, "bad_event", "item"),
    (
        "previous_item_id type",
        {"type": "conversation.item.create", "item": {}, "previous_item_id": 3},
        "bad_event",
        "previous_item_id",
    ),
    (
        "content not a list",
        {"type": "conversation.item.create", "item": {"content": "hi"}},
        "bad_event",
        "item.content",
    ),
    (
        "part without type",
        {"type": "conversation.item.create", "item": {"content": [{"text": "hi"}]}},
        "bad_event",
        "item.content[0]",
    ),
    (
        "role",
        {"type": "conversation.item.create", "item": {"role": "robot", "content": []}},
        "bad_event",
        "item.role",
    ),
    (
        "item id too long",
        {"type": "conversation.item.create", "item": {"id": "i" * 300}},
        "bad_event",
        "item.id",
    ),
    (
        "function output without output",
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "call_id": "c"},
        },
        "invalid_function_call_output",
        "item.output",
    ),
    (
        "function output without call",
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "output": "x"},
        },
        "invalid_function_call_output",
        "item.call_id",
    ),
    # delete / retrieve / truncate
    ("delete without id", {"type": "conversation.item.delete"}, "missing_item_id", "item_id"),
    (
        "delete empty id",
        {"type": "conversation.item.delete", "item_id": ""},
        "missing_item_id",
        "item_id",
    ),
    (
        "delete id type",
        {"type": "conversation.item.delete", "item_id": 5},
        "missing_item_id",
        "item_id",
    ),
    ("retrieve without id", {"type": "conversation.item.retrieve"}, "missing_item_id", "item_id"),
    (
        "truncate without id",
        {"type": "conversation.item.truncate", "audio_end_ms": 10},
        "missing_item_id",
        "item_id",
    ),
    (
        "truncate end not a number",
        {"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": "10"},
        "bad_event",
        "audio_end_ms",
    ),
    (
        "truncate end missing",
        {"type": "conversation.item.truncate", "item_id": "i"},
        "bad_event",
        "audio_end_ms",
    ),
    (
        "truncate end negative",
        {"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": -1},
        "bad_event",
        "audio_end_ms",
    ),
    (
        "truncate end bool",
        {"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": True},
        "bad_event",
        "audio_end_ms",
    ),
    (
        "truncate content index",
        {
            "type": "conversation.item.truncate",
            "item_id": "i",
            "audio_end_ms": 1,
            "content_index": "0",
        },
        "bad_event",
        "content_index",
    ),
    # input_audio_buffer.append (wire.md 5.3)
    ("append without audio", {"type": "input_audio_buffer.append"}, "bad_event", "audio"),
    ("append bad base64", {"type": "input_audio_buffer.append", "audio": "@@@@"}, "bad_audio", ANY),
    (
        "append odd pcm16",
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x00" * 3).decode()},
        "bad_audio",
        ANY,
    ),
    (
        "append format",
        {"type": "input_audio_buffer.append", "audio": PCM, "format": "opus"},
        "unsupported_audio_format",
        "format",
    ),
    (
        "append rate",
        {"type": "input_audio_buffer.append", "audio": PCM, "sample_rate_hz": 1},
        "bad_event",
        "sample_rate_hz",
    ),
    (
        "append frames not a list",
        {"type": "input_audio_buffer.append", "audio": PCM, "video_frames": PNG},
        "invalid_video_frames",
        "video_frames",
    ),
    (
        "append three frames",
        {"type": "input_audio_buffer.append", "video_frames": [PNG, PNG, PNG]},
        "invalid_video_frames",
        "video_frames",
    ),
    (
        "append data url frame",
        {"type": "input_audio_buffer.append", "video_frames": ["data:image/png;base64," + PNG]},
        "invalid_video_frames",
        "video_frames",
    ),
    # commit extensions (ours; stock commits never fail)
    (
        "commit final type",
        {"type": "input_audio_buffer.commit", "final": "yes"},
        "bad_event",
        "final",
    ),
    (
        "commit create_response type",
        {"type": "input.commit", "create_response": 1},
        "bad_event",
        "create_response",
    ),
    # responses
    (
        "cancel id type",
        {"type": "response.cancel", "response_id": 1},
        "bad_event",
        "response_id",
    ),
    (
        "clear id type",
        {"type": "output_audio_buffer.clear", "response_id": {}},
        "bad_event",
        "response_id",
    ),
    (
        "response not an object",
        {"type": "response.create", "response": "now"},
        "bad_event",
        "response",
    ),
    (
        "response output format",
        {"type": "response.create", "response": {"output_audio_format": "opus"}},
        "unsupported_audio_format",
        "response.output_audio_format",
    ),
    (
        "response nested output format",
        {
            "type": "response.create",
            "response": {"audio": {"output": {"format": {"type": "audio/ogg"}}}},
        },
        "unsupported_audio_format",
        "response.audio.output.format",
    ),
    (
        "response temperature type",
        {"type": "response.create", "response": {"temperature": "warm"}},
        "bad_event",
        "response.temperature",
    ),
    (
        "response token cap",
        {"type": "response.create", "response": {"max_output_tokens": -5}},
        "bad_event",
        "response.max_output_tokens",
    ),
    (
        "response metadata type",
        {"type": "response.create", "response": {"metadata": ["x"]}},
        "bad_event",
        "response.metadata",
    ),
    # playback.ack
    ("ack without played_ms", {"type": "playback.ack"}, "bad_event", "played_ms"),
    ("ack played_ms type", {"type": "playback.ack", "played_ms": "100"}, "bad_event", "played_ms"),
    ("ack played_ms negative", {"type": "playback.ack", "played_ms": -1}, "bad_event", "played_ms"),
    (
        "ack committed_ms type",
        {"type": "playback.ack", "played_ms": 1, "committed_ms": "0"},
        "bad_event",
        "committed_ms",
    ),
    (
        "ack truncate type",
        {"type": "playback.ack", "played_ms": 1, "truncate": "yes"},
        "bad_event",
        "truncate",
    ),
    # text, close, turn.signal
    ("text missing", {"type": "input.text.append"}, "bad_event", "text"),
    ("text type", {"type": "input.text.append", "text": 12}, "bad_event", "text"),
    ("close reason type", {"type": "session.close", "reason": 3}, "bad_event", "reason"),
    ("signal without event", {"type": "turn.signal"}, "bad_event", "event"),
    ("signal empty event", {"type": "turn.signal", "event": ""}, "bad_event", "event"),
    (
        "signal payload type",
        {"type": "turn.signal", "event": "user_started", "payload": [1]},
        "bad_event",
        "payload",
    ),
    (
        "signalled truncate keeps its own code",
        {
            "type": "turn.signal",
            "event": "conversation.item.truncate",
            "payload": {"audio_end_ms": 1},
        },
        "missing_item_id",
        "item_id",
    ),
    (
        "signalled session.update is validated",
        {
            "type": "turn.signal",
            "event": "session.update",
            "payload": {"turn_detection": {"type": "vad"}},
        },
        "unsupported_turn_detection",
        "turn_detection.type",
    ),
    (
        "signalled item create is validated",
        {
            "type": "turn.signal",
            "event": "conversation.item.create",
            "payload": {"item": {"content": [{"type": "audio", "format": "opus"}]}},
        },
        "unsupported_audio_format",
        "item.content[0].format",
    ),
    # transport commands (3.5)
    (
        "resume without session",
        {"type": "session.resume", "resume_token": "t"},
        "invalid_session_resume",
        "session_id",
    ),
    (
        "resume without token",
        {"type": "session.resume", "session_id": "duplex-1"},
        "invalid_session_resume",
        "resume_token",
    ),
    (
        "resume empty token",
        {"type": "session.resume", "session_id": "duplex-1", "resume_token": ""},
        "invalid_session_resume",
        "resume_token",
    ),
    (
        "resume negative seq",
        {
            "type": "session.resume",
            "session_id": "s",
            "resume_token": "t",
            "last_received_server_event_seq": -1,
        },
        "invalid_session_resume",
        "last_received_server_event_seq",
    ),
    (
        "resume fractional seq",
        {
            "type": "session.resume",
            "session_id": "s",
            "resume_token": "t",
            "last_received_server_event_seq": 1.5,
        },
        "invalid_session_resume",
        "last_received_server_event_seq",
    ),
    (
        "resume seq as text",
        {
            "type": "session.resume",
            "session_id": "s",
            "resume_token": "t",
            "last_received_server_event_seq": "3",
        },
        "invalid_session_resume",
        "last_received_server_event_seq",
    ),
    ("event ack missing", {"type": "session.event_ack"}, "invalid_event_ack", "server_event_seq"),
    (
        "event ack negative",
        {"type": "session.event_ack", "server_event_seq": -3},
        "invalid_event_ack",
        "server_event_seq",
    ),
    (
        "event ack bool",
        {"type": "session.event_ack", "server_event_seq": True},
        "invalid_event_ack",
        "server_event_seq",
    ),
    (
        "event ack huge",
        {"type": "session.event_ack", "server_event_seq": 2**53},
        "invalid_event_ack",
        "server_event_seq",
    ),
]


@pytest.mark.parametrize(
    ("label", "event", "code", "param"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
def test_refusal_code_param_and_event_id_echo(
    label: str, event: dict[str, Any], code: str, param: Any
) -> None:
    event = {**event, "event_id": f"evt_{abs(hash(label)) % 10**8}"}
    with pytest.raises(DuplexCommandError) as caught:
        cmd.command_from_realtime(event)
    error = caught.value
    assert isinstance(error, RealtimeProtocolError)
    assert error.code == code
    assert error.code in ERROR_CODES
    assert error.event_id == event["event_id"]
    if param is not ANY:
        assert error.param == param


@pytest.mark.parametrize(
    ("label", "event", "code", "param"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
def test_refusal_without_event_id_echoes_none(
    label: str, event: dict[str, Any], code: str, param: Any
) -> None:
    with pytest.raises(DuplexCommandError) as caught:
        cmd.command_from_realtime(event)
    assert caught.value.code == code
    assert caught.value.event_id is None


@pytest.mark.parametrize("event_id", [5, ["a"], "x" * 300])
def test_unusable_event_id_is_refused_and_not_echoed(event_id: Any) -> None:
    with pytest.raises(DuplexCommandError) as caught:
        cmd.command_from_realtime({"type": "session.heartbeat", "event_id": event_id})
    assert caught.value.code == "bad_event"
    assert caught.value.param == "event_id"
    assert caught.value.event_id is None


def test_empty_event_id_is_absent() -> None:
    assert (
        cmd.command_from_realtime({"type": "session.heartbeat", "event_id": ""}) == cmd.Heartbeat()
    )


def test_not_an_object_is_bad_event() -> None:
    for value in (None, 3, "session.update", ["session.update"]):
        with pytest.raises(DuplexCommandError) as caught:
            cmd.command_from_realtime(value)
        assert caught.value.code == "bad_event"


def test_unknown_type_message_is_short_whatever_the_type() -> None:
    with pytest.raises(DuplexCommandError) as caught:
        cmd.command_from_realtime({"type": "x" * 100_000, "event_id": "e"})
    assert caught.value.code == "unknown_event"
    assert len(caught.value.message) < 200


def test_huge_format_spelling_is_not_quoted_whole() -> None:
    with pytest.raises(DuplexCommandError) as caught:
        cmd.command_from_realtime(
            {"type": "session.update", "session": {"input_audio_format": "p" * 10**6}}
        )
    assert caught.value.code == "unsupported_audio_format"
    assert len(caught.value.message) < 200


# ---- what is accepted -------------------------------------------------------------------


def test_turn_detection_null_and_server_vad_are_accepted() -> None:
    for detection in (
        None,
        {"type": "server_vad"},
        {"type": "server_vad", "idle_timeout_ms": None},
    ):
        command = cmd.command_from_realtime(
            {"type": "session.update", "session": {"turn_detection": detection}}
        )
        assert isinstance(command, cmd.UpdateSession)
        assert command.patch == {"turn_detection": detection}


def test_permissive_capabilities_pass_turn_detection_through() -> None:
    permissive = RealtimeProtocolCapabilities()
    event = {
        "type": "session.update",
        "session": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}},
    }
    command = cmd.command_from_realtime(event, capabilities=permissive)
    assert isinstance(command, cmd.UpdateSession)
    assert command.patch["turn_detection"]["type"] == "semantic_vad"


def test_narrowed_capabilities_refuse_other_formats() -> None:
    pcm_only = RealtimeProtocolCapabilities(
        input_audio_formats={"pcm16"},
        output_audio_formats={"audio/pcm"},
        validate_turn_detection=True,
    )
    refused = [
        {"type": "session.update", "session": {"input_audio_format": "g711_ulaw"}},
        {
            "type": "session.update",
            "session": {"audio": {"output": {"format": {"type": "audio/pcmu"}}}},
        },
        {"type": "response.create", "response": {"output_audio_format": "g711_alaw"}},
        {"type": "input_audio_buffer.append", "audio": PCM, "format": "pcm_f32le"},
        {
            "type": "conversation.item.create",
            "item": {"content": [{"type": "input_audio", "format": "ulaw"}]},
        },
    ]
    for event in refused:
        with pytest.raises(DuplexCommandError) as caught:
            cmd.command_from_realtime(event, capabilities=pcm_only)
        assert caught.value.code == "unsupported_audio_format", event
    assert isinstance(
        cmd.command_from_realtime(
            {"type": "input_audio_buffer.append", "audio": PCM}, capabilities=pcm_only
        ),
        cmd.AppendAudio,
    )


def test_text_input_capability() -> None:
    no_text = RealtimeProtocolCapabilities(text_input=False)
    with pytest.raises(DuplexCommandError) as caught:
        cmd.command_from_realtime(
            {"type": "input.text.append", "text": "hi", "event_id": "t"}, capabilities=no_text
        )
    assert (caught.value.code, caught.value.event_id) == ("native_text_append_unsupported", "t")


def test_ids_and_optional_fields_read_leniently_where_openai_does() -> None:
    assert (
        cmd.command_from_realtime({"type": "response.cancel", "response_id": ""})
        == cmd.CancelResponse()
    )
    assert (
        cmd.command_from_realtime({"type": "response.cancel", "response_id": None})
        == cmd.CancelResponse()
    )
    assert cmd.command_from_realtime({"type": "session.close", "reason": ""}) == cmd.CloseSession()
    assert cmd.command_from_realtime({"type": "session.close", "reason": "done"}).reason == "done"  # type: ignore[attr-defined]
    truncate = cmd.command_from_realtime(
        {"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": 12.9}
    )
    assert truncate == cmd.TruncateItem(item_id="i", content_index=0, audio_end_ms=12)
    index = cmd.command_from_realtime(
        {
            "type": "conversation.item.truncate",
            "item_id": "i",
            "audio_end_ms": 0,
            "content_index": 1.0,
        }
    )
    assert index == cmd.TruncateItem(item_id="i", content_index=1, audio_end_ms=0)


def test_response_create_options_are_kept_for_the_engine() -> None:
    # Decision 7: decoded into the command, never refused at decode time.
    options = {"instructions": "x", "temperature": 0.2, "max_output_tokens": 5, "voice": "alloy"}
    command = cmd.command_from_realtime({"type": "response.create", "response": options})
    assert isinstance(command, cmd.CreateResponse)
    assert command.options == options
    assert (
        command.instructions,
        command.temperature,
        command.max_output_tokens,
        command.voice,
    ) == (
        "x",
        0.2,
        5,
        "alloy",
    )


def test_playback_ack_decodes_truncate() -> None:
    # Decision 5.
    command = cmd.command_from_realtime(
        {
            "type": "playback.ack",
            "played_ms": 640.9,
            "committed_ms": 600,
            "item_id": "item_r",
            "truncate": True,
        }
    )
    assert command == cmd.AckPlayback(
        played_ms=640, committed_ms=600, item_id="item_r", truncate=True
    )


def test_resume_defaults_and_token_kept_out_of_repr() -> None:
    command = cmd.command_from_realtime(
        {"type": "session.resume", "session_id": "duplex-1", "resume_token": "secret"}
    )
    assert command == cmd.ResumeSession(
        session_id="duplex-1", resume_token="secret", last_received_server_event_seq=0
    )
    assert "secret" not in repr(command)


def test_event_ack_accepts_zero_and_integral_float() -> None:
    assert cmd.command_from_realtime(
        {"type": "session.event_ack", "server_event_seq": 0}
    ) == cmd.AckEvents(server_event_seq=0)
    assert cmd.command_from_realtime(
        {"type": "session.event_ack", "server_event_seq": 7.0}
    ) == cmd.AckEvents(server_event_seq=7)
