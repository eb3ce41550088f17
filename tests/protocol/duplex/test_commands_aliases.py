"""Aliases (wire.md 3.0), beta field spellings, and turn.signal events that name a command."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from omniduplex.protocol.duplex import commands as cmd
from omniduplex.protocol.realtime.base import RealtimeCommand

PCM = base64.b64encode(b"\x10\x00" * 480).decode()

ALIASES: list[tuple[str, dict[str, Any], RealtimeCommand]] = [
    ("input_text.append", {"text": "hi"}, cmd.AppendText(event_id="a", text="hi")),
    ("push_text", {"text": ""}, cmd.AppendText(event_id="a", text="")),
    ("signal_turn", {"event": "user_started"}, cmd.SignalTurn(event_id="a", event="user_started")),
    ("audio.playback_ack", {"played_ms": 80}, cmd.AckPlayback(event_id="a", played_ms=80)),
    ("close", {}, cmd.CloseSession(event_id="a")),
    ("close_session", {"reason": "bye"}, cmd.CloseSession(event_id="a", reason="bye")),
    ("input.commit", {}, cmd.Commit(event_id="a", create_response=True)),
    (
        "transcription_session.update",
        {"session": {"input_audio_format": "pcm16"}},
        cmd.UpdateSession(
            event_id="a", patch={"input_audio_format": "pcm16", "type": "transcription"}
        ),
    ),
]


@pytest.mark.parametrize(("wire_type", "fields", "expected"), ALIASES, ids=[a[0] for a in ALIASES])
def test_alias_decodes_like_its_canonical_type(
    wire_type: str, fields: dict[str, Any], expected: RealtimeCommand
) -> None:
    command = cmd.command_from_realtime({"type": wire_type, "event_id": "a", **fields})
    assert command == expected
    rendered = command.to_realtime()
    assert rendered["type"] == type(expected).type
    assert cmd.command_from_realtime(rendered) == command


def test_every_alias_is_registered_once() -> None:
    seen: dict[str, type] = {}
    for cls in cmd.COMMAND_CLASSES:
        for name in (cls.type, *cls.aliases):
            assert name not in seen, name
            seen[name] = cls
    assert set(seen) == set(cmd.COMMAND_TYPES)
    assert {alias for alias, _, _ in ALIASES} == set(cmd.COMMAND_TYPES) - cmd.CANONICAL_TYPES


def test_twenty_one_wire_types_plus_aliases() -> None:
    # wire.md 3.0: 21 canonical wire types (the 20 classes + input.commit), plus 7 aliases
    # (beta's transcription_session.update among them).
    assert len(cmd.CANONICAL_TYPES) == 20
    assert len(cmd.COMMAND_TYPES) == 28


@pytest.mark.parametrize(
    ("fields", "create_response"),
    [
        ({}, True),
        ({"create_response": False}, False),
        ({"response_create": False}, False),
        ({"response_create": False, "create_response": True}, False),
    ],
)
def test_input_commit_defaults_to_creating_a_response(
    fields: dict[str, Any], create_response: bool
) -> None:
    command = cmd.command_from_realtime({"type": "input.commit", **fields})
    assert isinstance(command, cmd.Commit)
    assert command.create_response is create_response


def test_stock_commit_default_and_response_create_spelling() -> None:
    plain = cmd.command_from_realtime({"type": "input_audio_buffer.commit"})
    assert isinstance(plain, cmd.Commit) and plain.create_response is None and plain.final is True
    ours = cmd.command_from_realtime(
        {
            "type": "input_audio_buffer.commit",
            "response_create": True,
            "final": False,
            "is_speech": False,
            "item_id": "item_u1",
        }
    )
    assert ours == cmd.Commit(final=False, create_response=True, is_speech=False, item_id="item_u1")


def test_append_accepts_delta_and_input_audio_format_spellings() -> None:
    spelled = cmd.command_from_realtime(
        {
            "type": "input_audio_buffer.append",
            "delta": PCM,
            "input_audio_format": "s16le",
            "sample_rate": 16000,
        }
    )
    assert isinstance(spelled, cmd.AppendAudio)
    assert (spelled.format, spelled.sample_rate_hz) == ("pcm16", 16000)
    assert spelled.audio == base64.b64decode(PCM)


def test_beta_and_ga_session_spellings_are_equivalent() -> None:
    from omniduplex.protocol.realtime.session import next_input_defaults

    beta = cmd.command_from_realtime(
        {
            "type": "session.update",
            "session": {"input_audio_format": "g711_ulaw", "output_audio_format": "pcm16"},
        }
    )
    ga = cmd.command_from_realtime(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "audio": {
                    "input": {"format": {"type": "audio/pcmu"}},
                    "output": {"format": {"type": "audio/pcm"}},
                },
            },
        }
    )
    assert isinstance(beta, cmd.UpdateSession) and isinstance(ga, cmd.UpdateSession)
    assert next_input_defaults(None, beta.patch) == next_input_defaults(None, ga.patch)


def test_flat_session_update_without_session_key() -> None:
    command = cmd.command_from_realtime(
        {"type": "session.update", "event_id": "e", "voice": "alloy"}
    )
    assert command == cmd.UpdateSession(event_id="e", patch={"voice": "alloy"})


# ---- turn.signal ------------------------------------------------------------------------

REMAPPED: list[tuple[str, dict[str, Any], RealtimeCommand]] = [
    ("input.cancel", {}, cmd.CancelInput(event_id="s")),
    ("barge_in", {}, cmd.BargeIn(event_id="s")),
    ("response.cancel", {"response_id": "r1"}, cmd.CancelResponse(event_id="s", response_id="r1")),
    ("output_audio_buffer.clear", {}, cmd.ClearOutputAudio(event_id="s")),
    ("session.update", {"voice": "ash"}, cmd.UpdateSession(event_id="s", patch={"voice": "ash"})),
    ("conversation.item.delete", {"item_id": "i1"}, cmd.DeleteItem(event_id="s", item_id="i1")),
    ("conversation.item.retrieve", {"item_id": "i1"}, cmd.RetrieveItem(event_id="s", item_id="i1")),
    (
        "conversation.item.truncate",
        {"item_id": "i1", "audio_end_ms": 30},
        cmd.TruncateItem(event_id="s", item_id="i1", audio_end_ms=30),
    ),
]


@pytest.mark.parametrize(("event", "payload", "expected"), REMAPPED, ids=[r[0] for r in REMAPPED])
def test_signal_naming_a_command_decodes_to_it(
    event: str, payload: dict[str, Any], expected: RealtimeCommand
) -> None:
    for wire_type in ("turn.signal", "signal_turn"):
        command = cmd.command_from_realtime(
            {"type": wire_type, "event_id": "s", "event": event, "payload": payload}
        )
        assert command == expected


def test_signalled_item_create() -> None:
    command = cmd.command_from_realtime(
        {
            "type": "turn.signal",
            "event": "conversation.item.create",
            "payload": {"item": {"id": "item_7"}},
        }
    )
    assert isinstance(command, cmd.CreateItem)
    assert command.item["id"] == "item_7"


def test_signalled_cancel_falls_back_to_top_level_response_id() -> None:
    command = cmd.command_from_realtime(
        {"type": "turn.signal", "event": "response.cancel", "response_id": "r9"}
    )
    assert command == cmd.CancelResponse(response_id="r9")


def test_other_signals_stay_signals() -> None:
    for event in (
        "user_started",
        "assistant_done",
        "close",
        "timeout",
        "input_audio_buffer.commit",
    ):
        command = cmd.command_from_realtime(
            {"type": "turn.signal", "event": event, "payload": {"k": [1]}}
        )
        assert command == cmd.SignalTurn(event=event, signal_payload={"k": [1]})
