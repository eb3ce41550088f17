"""The unmodified OpenAI Python SDK holds a conversation with loopback, GA and beta.

Every Tier 1 / Tier 2 event the SDK receives is validated with the SDK's own pydantic
server-event union of its dialect; our Tier 3 events are the only ones outside it.
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
from server_harness import TIMEOUT_S, b64, run_server, sine_pcm16

from omniduplex.protocol.duplex.events import DUPLEX_EVENT_TYPES

GA = pydantic.TypeAdapter(ga_types.RealtimeServerEvent)
BETA = pydantic.TypeAdapter(beta_types.RealtimeServerEvent)
OURS = {
    "session.resumed",
    "session.replaced",
    "session.resync_required",
    "session.closed",
    "session.expired",
    "session.heartbeat_ack",
    "turn.event",
    "response.listen",
    "response.speak",
    "overlap.decision",
    "playback.acknowledged",
}


@pytest.fixture(scope="module")
def server():
    with run_server("loopback") as running:
        yield running


def _check(raw: bytes, adapter: pydantic.TypeAdapter) -> dict[str, Any]:
    event = orjson.loads(raw)
    assert event["type"] in DUPLEX_EVENT_TYPES or event["type"].startswith("duplex.")
    if event["type"] not in OURS:
        parsed = adapter.validate_python(event)
        assert parsed.type == event["type"]
    return event


async def _converse(conn: Any, adapter: pydantic.TypeAdapter, audio_delta: str) -> list[dict]:
    seen: list[dict] = []

    async def until(wanted: str) -> dict:
        while True:
            event = _check(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S), adapter)
            seen.append(event)
            assert event["type"] != "error", event
            if event["type"] == wanted:
                return event

    pcm = sine_pcm16(1500)
    for i in range(0, len(pcm), 4800):
        await conn.input_audio_buffer.append(audio=b64(pcm[i : i + 4800]))
    await conn.input_audio_buffer.commit()
    await conn.response.create()
    await until(audio_delta)
    await conn.response.cancel()
    done = await until("response.done")
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "client_cancelled"
    item_id = done["response"]["output"][0]["id"]
    await conn.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=0)
    await until("conversation.item.truncated")
    # a second turn runs to completion
    for i in range(0, len(pcm) // 3, 4800):
        await conn.input_audio_buffer.append(audio=b64(pcm[i : i + 4800]))
    await conn.input_audio_buffer.commit()
    await conn.response.create()
    done = await until("response.done")
    assert done["response"]["status"] == "completed"
    return seen


async def test_ga_sdk_conversation(server) -> None:
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    async with client.realtime.connect(model="loopback") as conn:
        first = _check(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S), GA)
        assert first["type"] == "session.created"  # decision 17: autostart, created first
        await conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["audio"],
                "audio": {"input": {"turn_detection": None}},
            }
        )
        seen = await _converse(conn, GA, "response.output_audio.delta")
    types = [e["type"] for e in seen]
    assert "session.updated" in types
    assert "response.audio.delta" not in types  # media is never sent in both spellings


async def test_beta_sdk_conversation(server) -> None:
    client = AsyncOpenAI(api_key="unused", websocket_base_url=server.ws_url.rsplit("/", 1)[0])
    async with client.beta.realtime.connect(model="loopback") as conn:
        first = _check(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S), BETA)
        assert first["type"] == "session.created"
        await conn.session.update(session={"modalities": ["audio", "text"], "turn_detection": None})
        seen = await _converse(conn, BETA, "response.audio.delta")
    types = [e["type"] for e in seen]
    assert "response.output_audio.delta" not in types
    assert "conversation.item.added" not in types  # GA-only events are not sent in beta
