"""Item ids and the normalisation of client items (wire.md 7.1)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from omniduplex.protocol.realtime.capabilities import RealtimeProtocolCapabilities
from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.items import (
    assistant_item_id,
    audio_parts,
    new_item_id,
    normalize_item,
    response_id_of_item,
)

ITEM_ID = re.compile(r"^item_[0-9a-f]{32}$")


def test_ids() -> None:
    first, second = new_item_id(), new_item_id()
    assert ITEM_ID.match(first) and ITEM_ID.match(second) and first != second
    response_id = "resp-duplex-abc-0-1a2b3c4d"
    item_id = assistant_item_id(response_id)
    assert item_id == "item_resp-duplex-abc-0-1a2b3c4d"
    assert response_id_of_item(item_id) == response_id
    assert response_id_of_item("msg_1") is None
    assert response_id_of_item("item_") is None


def test_empty_item_becomes_a_completed_user_message() -> None:
    item = normalize_item({})
    assert ITEM_ID.match(item.pop("id"))
    assert item == {
        "object": "realtime.item",
        "type": "message",
        "status": "completed",
        "role": "user",
        "content": [],
    }


def test_client_values_are_kept_and_unknown_keys_too() -> None:
    raw = {
        "id": "item_mine",
        "type": "message",
        "role": "assistant",
        "status": "incomplete",
        "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        "x_custom": {"a": 1},
    }
    item = normalize_item(raw)
    assert item == {**raw, "object": "realtime.item"}
    # A fresh copy: the client's dict is neither kept nor changed.
    item["content"][0]["text"] = "changed"
    assert raw["content"][0]["text"] == "hi"
    assert "object" not in raw


def test_null_fields_are_completed_like_missing_ones() -> None:
    item = normalize_item({"id": None, "type": None, "role": None, "content": None, "status": None})
    assert ITEM_ID.match(item["id"])
    assert (item["type"], item["role"], item["content"], item["status"]) == (
        "message",
        "user",
        [],
        "completed",
    )


def test_non_message_items_get_no_role_or_content() -> None:
    call = normalize_item({"type": "function_call", "name": "f", "call_id": "c", "arguments": "{}"})
    assert "role" not in call and "content" not in call
    output = normalize_item({"type": "function_call_output", "call_id": "c", "output": ""})
    assert output["status"] == "completed"
    mcp = normalize_item(
        {"type": "mcp_approval_response", "approval_request_id": "a", "approve": False}
    )
    assert mcp["type"] == "mcp_approval_response"


@pytest.mark.parametrize(
    ("raw", "code", "param"),
    [
        ("text", "bad_event", "item"),
        (None, "bad_event", "item"),
        ({"id": ""}, "bad_event", "item.id"),
        ({"id": 3}, "bad_event", "item.id"),
        ({"type": 3}, "bad_event", "item.type"),
        ({"type": ""}, "bad_event", "item.type"),
        ({"status": 1}, "bad_event", "item.status"),
        ({"role": "tool"}, "bad_event", "item.role"),
        ({"role": ["user"]}, "bad_event", "item.role"),
        ({"content": {"type": "input_text"}}, "bad_event", "item.content"),
        ({"content": ["hi"]}, "bad_event", "item.content[0]"),
        ({"content": [{"type": ["input_text"]}]}, "bad_event", "item.content[0]"),
        ({"content": [{"type": "input_text", "text": 5}]}, "bad_event", "item.content[0].text"),
        ({"content": [{"type": "input_audio", "audio": 5}]}, "bad_event", "item.content[0].audio"),
        ({"type": "function_call", "arguments": {}}, "bad_event", "item.arguments"),
        (
            {"type": "function_call_output", "output": "x"},
            "invalid_function_call_output",
            "item.call_id",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": {}},
            "invalid_function_call_output",
            "item.output",
        ),
        (
            {"content": [{"type": "audio", "format": "mp3"}]},
            "unsupported_audio_format",
            "item.content[0].format",
        ),
        (
            {"content": [{"type": "input_audio", "format": {"type": "audio/pcm", "rate": 1}}]},
            "bad_event",
            "item.content[0].format.rate",
        ),
    ],
)
def test_refusals(raw: Any, code: str, param: str) -> None:
    with pytest.raises(RealtimeProtocolError) as caught:
        normalize_item(raw)
    assert (caught.value.code, caught.value.param) == (code, param)


def test_audio_format_is_checked_before_anything_else() -> None:
    raw = {
        "id": 5,
        "role": "robot",
        "content": [{"type": "input_text"}, {"type": "audio", "format": "opus"}],
    }
    with pytest.raises(RealtimeProtocolError) as caught:
        normalize_item(raw)
    assert caught.value.code == "unsupported_audio_format"
    assert caught.value.param == "item.content[1].format"


def test_audio_formats_follow_capabilities() -> None:
    raw = {"content": [{"type": "input_audio", "audio": "AAAA", "format": "g711_ulaw"}]}
    assert normalize_item(raw)["content"][0]["format"] == "g711_ulaw"
    pcm_only = RealtimeProtocolCapabilities(input_audio_formats={"pcm16"})
    with pytest.raises(RealtimeProtocolError) as caught:
        normalize_item(raw, capabilities=pcm_only)
    assert caught.value.code == "unsupported_audio_format"


def test_audio_parts() -> None:
    item = normalize_item(
        {
            "content": [
                {"type": "input_text", "text": "a"},
                {"type": "input_audio", "audio": "AAAA"},
                {"type": "audio", "audio": "BBBB"},
            ]
        }
    )
    assert [index for index, _ in audio_parts(item)] == [1, 2]
    assert audio_parts({"content": "x"}) == []
