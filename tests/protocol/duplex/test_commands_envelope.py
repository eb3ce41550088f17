"""Frame envelope checks (wire.md 1.3): size before parsing, JSON, object with a type."""

from __future__ import annotations

import base64

import orjson
import pytest

from omniduplex.protocol.duplex import commands as cmd
from omniduplex.protocol.duplex.errors import DuplexCommandError


def test_frame_parses_to_its_object() -> None:
    text = '{"type":"session.heartbeat","event_id":"hb1"}'
    assert cmd.parse_client_frame(text) == {"type": "session.heartbeat", "event_id": "hb1"}
    assert cmd.parse_client_frame(text.encode()) == {"type": "session.heartbeat", "event_id": "hb1"}
    assert cmd.decode_client_frame(text) == cmd.Heartbeat(event_id="hb1")


def test_size_limit_counts_utf8_bytes_and_is_checked_before_parsing() -> None:
    # 1000 two-byte characters: 1000 code points, 2000 bytes.
    text = '{"type":"input.text.append","text":"' + "é" * 1000 + '"}'
    limit = len(text.encode()) - 1
    assert len(text) < limit
    with pytest.raises(DuplexCommandError) as caught:
        cmd.parse_client_frame(text, max_bytes=limit)
    assert caught.value.code == "event_too_large"
    assert cmd.parse_client_frame(text, max_bytes=limit + 1)["type"] == "input.text.append"
    # Not JSON at all, yet too large is what it is told.
    with pytest.raises(DuplexCommandError) as caught:
        cmd.parse_client_frame(b"x" * 101, max_bytes=100)
    assert caught.value.code == "event_too_large"


def test_default_limit_is_15_mib() -> None:
    audio = base64.b64encode(b"\x00" * (12 * 1024 * 1024)).decode()  # 16 MiB of base64
    frame = orjson.dumps({"type": "input_audio_buffer.append", "event_id": "big", "audio": audio})
    assert len(frame) > cmd.MAX_EVENT_BYTES
    with pytest.raises(DuplexCommandError) as caught:
        cmd.decode_client_frame(frame)
    assert caught.value.code == "event_too_large"
    assert cmd.MAX_EVENT_BYTES == 15 * 1024 * 1024


@pytest.mark.parametrize(
    "text",
    ["", "{", "{'type': 'x'}", "NaN", '{"type": "x",}', "1e400", b"\xff\xfe", '"\\ud800"'],
)
def test_invalid_json(text: str | bytes) -> None:
    with pytest.raises(DuplexCommandError) as caught:
        cmd.parse_client_frame(text)
    assert caught.value.code == "invalid_json"
    assert caught.value.event_id is None


@pytest.mark.parametrize(
    ("text", "event_id"),
    [
        ("[]", None),
        ("3", None),
        ('"session.update"', None),
        ("null", None),
        ("{}", None),
        ('{"event_id": "e1"}', "e1"),
        ('{"type": null, "event_id": "e2"}', "e2"),
        ('{"type": ["session.update"], "event_id": "e3"}', "e3"),
    ],
)
def test_not_an_object_with_a_type(text: str, event_id: str | None) -> None:
    with pytest.raises(DuplexCommandError) as caught:
        cmd.parse_client_frame(text)
    assert caught.value.code == "bad_event"
    assert caught.value.event_id == event_id


def test_frame_must_be_text_or_bytes() -> None:
    with pytest.raises(DuplexCommandError) as caught:
        cmd.parse_client_frame(123)  # type: ignore[arg-type]
    assert caught.value.code == "bad_event"


def test_lone_surrogate_in_a_python_string_is_invalid_json() -> None:
    with pytest.raises(DuplexCommandError) as caught:
        cmd.parse_client_frame('{"type":"x","event_id":"\ud800"}')
    assert caught.value.code == "invalid_json"


# ---- oversized and hostile values inside a frame ----------------------------------------


def test_deep_nesting_is_refused_not_crashed() -> None:
    # orjson accepts 1024 levels; a recursive copy would not survive that.
    deep = "[" * 1000 + "]" * 1000
    frame = '{"type":"session.update","event_id":"d","session":{"tools":' + deep + "}}"
    with pytest.raises(DuplexCommandError) as caught:
        cmd.decode_client_frame(frame)
    assert (caught.value.code, caught.value.event_id) == ("bad_event", "d")


def test_nesting_limit_applies_to_in_process_objects_too() -> None:
    nested: list[object] = []
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(DuplexCommandError) as caught:
        cmd.command_from_realtime({"type": "turn.signal", "event": "x", "payload": {"n": nested}})
    assert caught.value.code == "bad_event"


@pytest.mark.parametrize(
    "event",
    [
        {"type": "conversation.item.delete", "item_id": "i" * 10_000},
        {"type": "response.cancel", "response_id": "r" * 10_000},
        {"type": "turn.signal", "event": "e" * 10_000},
        {"type": "session.resume", "session_id": "s" * 10_000, "resume_token": "t"},
        {"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": 10**30},
        {"type": "playback.ack", "played_ms": 1e300},
        {"type": "session.event_ack", "server_event_seq": 2**53},
        {"type": "session.update", "session": {"sample_rate_hz": 10**400}},
        {
            "type": "session.update",
            "session": {"input_audio_format": {"type": "audio/pcm", "rate": 10**400}},
        },
        {"type": "input_audio_buffer.append", "audio": "AAAA", "sample_rate_hz": 10**400},
        {"type": "session.update", "session": {"temperature": float("nan")}},
        {"type": "turn.signal", "event": "x", "payload": {"v": float("inf")}},
        {"type": "turn.signal", "event": "x", "payload": {1: "non-str key"}},
        {"type": "turn.signal", "event": "x", "payload": {"b": b"bytes"}},
    ],
)
def test_oversized_or_non_json_values_are_client_errors(event: dict[str, object]) -> None:
    event = {**event, "event_id": "v1"}
    with pytest.raises(DuplexCommandError) as caught:
        cmd.command_from_realtime(event)
    assert caught.value.event_id == "v1"
    assert caught.value.code in {
        "bad_event",
        "missing_item_id",
        "invalid_session_resume",
        "invalid_event_ack",
    }
