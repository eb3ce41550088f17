"""Render -> parse gives an equal command, and render -> parse -> render is stable, for
every command class; Tier 2 extensions of the append survive the trip."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from omniduplex.protocol.duplex import commands as cmd
from omniduplex.protocol.realtime import commands as tier1
from omniduplex.protocol.realtime.base import RealtimeCommand
from omniduplex.protocol.realtime.session import next_input_defaults

PCM = base64.b64encode(b"\x01\x02" * 320).decode()
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 40).decode()

# One or more wire objects per command class, as a client could send them.
WIRE: dict[type[RealtimeCommand], list[dict[str, Any]]] = {
    cmd.UpdateSession: [
        {
            "type": "session.update",
            "event_id": "u",
            "session": {"type": "realtime", "instructions": "hi"},
        },
        {"type": "session.update", "voice": "alloy", "turn_detection": None},
    ],
    cmd.AppendAudio: [
        {"type": "input_audio_buffer.append", "audio": PCM},
        {
            "type": "input_audio_buffer.append",
            "event_id": "a",
            "audio": PCM,
            "format": {"type": "audio/pcm", "rate": 16000},
            "video_frames": [JPEG, PNG],
            "is_speech": True,
            "transcript": "hello",
            "vad": {"speech_probability": 0.9},
            "audio_start_ms": 120,
        },
        {"type": "input_audio_buffer.append", "video_frames": [PNG]},
        {"type": "input_audio_buffer.append", "audio": PCM[:8], "format": "g711_alaw"},
        {"type": "input_audio_buffer.append", "audio": PCM, "format": "pcm_f32le", "speech": False},
    ],
    cmd.Commit: [
        {"type": "input_audio_buffer.commit"},
        {
            "type": "input.commit",
            "event_id": "c",
            "final": False,
            "is_speech": True,
            "item_id": "item_1",
        },
    ],
    cmd.ClearInput: [{"type": "input_audio_buffer.clear", "event_id": "x"}],
    cmd.ClearOutputAudio: [{"type": "output_audio_buffer.clear", "response_id": "resp_1"}],
    cmd.CreateResponse: [
        {"type": "response.create"},
        {
            "type": "response.create",
            "response": {
                "instructions": "be brief",
                "temperature": 0.3,
                "max_response_output_tokens": "inf",
                "modalities": ["audio", "text"],
                "audio": {"output": {"voice": {"id": "v1"}, "format": {"type": "audio/pcmu"}}},
                "metadata": {"k": "v"},
            },
        },
    ],
    cmd.CancelResponse: [
        {"type": "response.cancel"},
        {"type": "response.cancel", "response_id": "r"},
    ],
    cmd.CreateItem: [
        {
            "type": "conversation.item.create",
            "item": {"content": [{"type": "input_text", "text": "hi"}]},
        },
        {
            "type": "conversation.item.create",
            "previous_item_id": "item_0",
            "item": {"type": "function_call_output", "call_id": "c1", "output": "{}"},
        },
    ],
    cmd.DeleteItem: [{"type": "conversation.item.delete", "item_id": "item_1"}],
    cmd.RetrieveItem: [{"type": "conversation.item.retrieve", "item_id": "item_1"}],
    cmd.TruncateItem: [
        {
            "type": "conversation.item.truncate",
            "item_id": "item_1",
            "content_index": 0,
            "audio_end_ms": 5,
        }
    ],
    cmd.AppendText: [{"type": "push_text", "text": "hello"}],
    cmd.CancelInput: [{"type": "input.cancel"}],
    cmd.BargeIn: [{"type": "barge_in", "event_id": "b"}],
    cmd.SignalTurn: [
        {"type": "turn.signal", "event": "user_started"},
        {"type": "turn.signal", "event": "custom", "payload": {"a": [1, {"b": None}]}},
    ],
    cmd.AckPlayback: [
        {"type": "playback.ack", "played_ms": 10},
        {
            "type": "audio.playback_ack",
            "played_ms": 900,
            "committed_ms": 850,
            "response_id": "r",
            "item_id": "item_r",
            "truncate": True,
        },
    ],
    cmd.Heartbeat: [{"type": "session.heartbeat"}],
    cmd.CloseSession: [{"type": "close", "reason": "done"}],
    cmd.ResumeSession: [
        {
            "type": "session.resume",
            "session_id": "duplex-1",
            "resume_token": "tok",
            "last_received_server_event_seq": 41,
        }
    ],
    cmd.AckEvents: [{"type": "session.event_ack", "server_event_seq": 12}],
}

CASES = [(cls, wire) for cls, wires in WIRE.items() for wire in wires]


def _id(case: tuple[type, dict[str, Any]]) -> str:
    return case[1]["type"]


def test_every_command_class_has_round_trip_samples() -> None:
    assert set(WIRE) == set(cmd.COMMAND_CLASSES)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_round_trip(case: tuple[type[RealtimeCommand], dict[str, Any]]) -> None:
    cls, wire = case
    command = cmd.command_from_realtime(wire)
    assert type(command) is cls
    rendered = command.to_realtime()
    assert rendered["type"] == cls.type
    # Through JSON, as the wire carries it.
    again = cmd.command_from_realtime(orjson.loads(orjson.dumps(rendered)))
    assert again == command
    assert again.to_realtime() == rendered


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_round_trip_is_independent_of_connection_defaults(
    case: tuple[type[RealtimeCommand], dict[str, Any]],
) -> None:
    # An append renders its format and rate: another connection reads it the same.
    command = cmd.command_from_realtime(case[1])
    g711 = next_input_defaults(None, {"input_audio_format": "g711_ulaw"})
    assert cmd.command_from_realtime(command.to_realtime(), defaults=g711) == command


def test_append_extensions_survive() -> None:
    wire = WIRE[cmd.AppendAudio][1]
    command = cmd.command_from_realtime(wire)
    assert isinstance(command, cmd.AppendAudio)
    assert command.video_frames == (JPEG, PNG)
    assert command.is_speech is True
    assert command.hints == {
        "is_speech": True,
        "transcript": "hello",
        "vad": {"speech_probability": 0.9},
        "audio_start_ms": 120,
    }
    assert (command.format, command.sample_rate_hz) == ("pcm16", 16000)
    assert command.duration_ms == pytest.approx(20.0)


def test_frames_only_append_is_not_speech() -> None:
    command = cmd.command_from_realtime(WIRE[cmd.AppendAudio][2])
    assert isinstance(command, cmd.AppendAudio)
    assert (command.audio, command.is_speech, command.video_frames) == (b"", False, (PNG,))


def test_hand_built_verdict_is_stated_when_hints_do_not_imply_it() -> None:
    built = cmd.AppendAudio(audio=b"\x00\x00", is_speech=False)
    rendered = built.to_realtime()
    assert rendered["is_speech"] is False
    decoded = cmd.command_from_realtime(rendered)
    assert isinstance(decoded, cmd.AppendAudio) and decoded.is_speech is False
    assert cmd.AppendAudio(audio=b"\x00\x00").to_realtime().get("is_speech") is None


def test_tier1_classes_render_pure_openai_fields() -> None:
    append = tier1.AppendAudio(audio=b"\x00\x01", format="pcm16", sample_rate_hz=24000)
    assert append.to_realtime() == {
        "type": "input_audio_buffer.append",
        "audio": "AAE=",
        "format": "pcm16",
        "sample_rate_hz": 24000,
    }
    assert tier1.Commit(event_id="c").to_realtime() == {
        "type": "input_audio_buffer.commit",
        "event_id": "c",
    }
    assert issubclass(cmd.AppendAudio, tier1.AppendAudio) and cmd.AppendAudio.tier == 2
    assert issubclass(cmd.Commit, tier1.Commit) and cmd.Commit.tier == 2


def test_tiers() -> None:
    tiers = {cls.type: cls.tier for cls in cmd.COMMAND_CLASSES}
    assert sorted(t for t, tier in tiers.items() if tier == 2) == [
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
    ]
    assert sorted(t for t, tier in tiers.items() if tier == 3) == [
        "barge_in",
        "input.cancel",
        "input.text.append",
        "playback.ack",
        "session.close",
        "session.event_ack",
        "session.heartbeat",
        "session.resume",
        "turn.signal",
    ]
    assert sum(1 for tier in tiers.values() if tier == 1) == 9
