"""``input_image`` content parts through the unmodified OpenAI SDK, against models that
cannot see (loopback, the cascade): refused whole, naming the part, and the session goes
on. Every event received is validated with the SDK's own server-event union."""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any

import openai.types.beta.realtime as beta_types
import openai.types.realtime as ga_types
import orjson
import pydantic
import pytest
from openai import AsyncOpenAI
from PIL import Image
from server_harness import TIMEOUT_S, run_server

GA = pydantic.TypeAdapter(ga_types.RealtimeServerEvent)
BETA = pydantic.TypeAdapter(beta_types.RealtimeServerEvent)


def png_data_url(width: int = 4, height: int = 3) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


async def next_event(conn: Any, adapter: pydantic.TypeAdapter) -> dict[str, Any]:
    event = orjson.loads(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S))
    adapter.validate_python(event)
    return event


async def until(conn: Any, adapter: pydantic.TypeAdapter, wanted: str) -> list[dict[str, Any]]:
    seen = []
    while True:
        seen.append(await next_event(conn, adapter))
        if seen[-1]["type"] == wanted:
            return seen


async def text_item_is_accepted(conn: Any, adapter: pydantic.TypeAdapter) -> None:
    """The session still works: a plain text item is acknowledged, nothing else first."""
    await conn.conversation.item.create(
        item={
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "after the image"}],
        }
    )
    # GA acknowledges with added, created and done; beta has only created.
    last = "conversation.item.done" if adapter is GA else "conversation.item.created"
    seen = await until(conn, adapter, last)
    assert [e["type"] for e in seen if e["type"] == "error"] == []
    assert seen[-1]["item"]["content"] == [{"type": "input_text", "text": "after the image"}]


@pytest.fixture(scope="module")
def loopback():
    with run_server("loopback") as running:
        yield running


@pytest.fixture(scope="module", params=["loopback", "cascade"])
def blind_server(request):
    with run_server(request.param) as running:
        yield request.param, running


async def test_a_model_that_cannot_see_refuses_the_image_part_and_goes_on(blind_server) -> None:
    model, server = blind_server
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    async with client.realtime.connect(model=model) as conn:
        created = await next_event(conn, GA)
        assert created["type"] == "session.created"
        # Declared where the session says what it can do, then kept to.
        assert created["session"]["capabilities"]["supports_image_input"] is False
        await conn.conversation.item.create(
            event_id="evt_image",
            item={
                "id": "item_refused",
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this?"},
                    {"type": "input_image", "image_url": png_data_url(), "detail": "low"},
                ],
            },
        )
        error = await next_event(conn, GA)
        assert error["type"] == "error", error
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["code"] == "unsupported"
        assert error["error"]["param"] == "item.content[1]"
        assert error["error"]["event_id"] == "evt_image"
        await text_item_is_accepted(conn, GA)
        # Nothing of the refused item was half-applied: not even its text part is stored.
        await conn.conversation.item.retrieve(item_id="item_refused")
        missing = await next_event(conn, GA)
        assert missing["type"] == "error" and missing["error"]["code"] == "item_not_found"


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "input_image", "image_url": "https://example.com/a.png"}, "image_url"),
        ({"type": "input_image", "image_url": "data:image/gif;base64,R0lGODlh"}, "image_url"),
        ({"type": "input_image", "image_url": "data:image/png;base64,not base64!"}, "image_url"),
        # A JPEG that says PNG: the bytes must match the type the URL names.
        ({"type": "input_image", "image_url": "data:image/png;base64,/9j/4AAQ"}, "image_url"),
        ({"type": "input_image"}, "image_url"),
        ({"type": "input_image", "image_url": png_data_url(), "detail": "ultra"}, "detail"),
    ],
)
async def test_bad_image_parts_are_refused_with_invalid_image(loopback, part, param) -> None:
    # The wire's own check, before any model: one deployment covers it.
    model, server = "loopback", loopback
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    async with client.realtime.connect(model=model) as conn:
        await next_event(conn, GA)
        await conn.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [part]},
            }
        )
        error = await next_event(conn, GA)
        assert error["type"] == "error", error
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["code"] == "invalid_image"
        assert error["error"]["param"] == f"item.content[0].{param}"
        await text_item_is_accepted(conn, GA)


async def test_an_image_outside_a_user_message_is_refused(blind_server) -> None:
    model, server = blind_server
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    async with client.realtime.connect(model=model) as conn:
        await next_event(conn, GA)
        await conn.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "system",
                    "content": [{"type": "input_image", "image_url": png_data_url()}],
                },
            }
        )
        error = await next_event(conn, GA)
        assert error["error"]["code"] == "invalid_image"
        assert error["error"]["param"] == "item.content[0]"


async def test_a_beta_client_gets_a_typed_refusal_not_a_dropped_part(blind_server) -> None:
    model, server = blind_server
    client = AsyncOpenAI(api_key="unused", websocket_base_url=server.ws_url.rsplit("/", 1)[0])
    async with client.beta.realtime.connect(model=model) as conn:
        assert (await next_event(conn, BETA))["type"] == "session.created"
        await conn.send(
            {
                "type": "conversation.item.create",
                "event_id": "evt_beta",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "look"},
                        {"type": "input_image", "image_url": png_data_url()},
                    ],
                },
            }
        )
        error = await next_event(conn, BETA)
        assert error["type"] == "error", error
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["code"] == "unsupported"
        assert error["error"]["param"] == "item.content[1]"
        assert error["error"]["event_id"] == "evt_beta"
        assert "GA" in error["error"]["message"]
        await text_item_is_accepted(conn, BETA)
