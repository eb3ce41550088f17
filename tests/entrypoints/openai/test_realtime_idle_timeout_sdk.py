"""Server VAD's ``idle_timeout_ms`` through the unmodified OpenAI SDK against the real
server (loopback, paced): the user speaks, is answered, then stays quiet and is prompted.

Every event received is validated with the SDK's pydantic server-event union of its
dialect. GA clients get ``input_audio_buffer.timeout_triggered``; the beta union has no
such event, so beta clients get the commit of the silent turn and the response alone.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai import AsyncOpenAI
from server_harness import SdkEvents, b64, run_server, sine_pcm16

CHUNK = 4800  # 100 ms of 24 kHz pcm16
IDLE_MS = 5000
VAD = {"type": "server_vad", "silence_duration_ms": 300, "prefix_padding_ms": 100}


@pytest.fixture(scope="module")
def server():
    with run_server("loopback") as running:
        yield running


class Conversation(SdkEvents):
    """One SDK connection (every event it reads validated by its dialect's SDK union)."""

    async def send(self, pcm: bytes) -> None:
        for i in range(0, len(pcm), CHUNK):
            await self.conn.input_audio_buffer.append(audio=b64(pcm[i : i + CHUNK]))

    async def answered_then_quiet(self) -> list[dict[str, Any]]:
        """Speak, hear the reply play out, stay quiet: the events after the playout up
        to the prompt's response.done."""
        await self.send(sine_pcm16(600) + bytes(CHUNK * 4))
        await self.until("output_audio_buffer.stopped")
        await self.send(bytes(CHUNK * (IDLE_MS // 100 + 1)))
        return await self.until("response.done")


async def test_ga_client_is_prompted_after_the_reply_played_out(server) -> None:
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    async with client.realtime.connect(model="loopback") as conn:
        talk = Conversation(conn, "ga")
        await talk.until("session.created")
        detection = {**VAD, "idle_timeout_ms": IDLE_MS}
        await conn.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": detection}}}
        )
        updated = (await talk.until("session.updated"))[-1]
        events = await talk.answered_then_quiet()
    assert updated["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == IDLE_MS
    kinds = [e["type"] for e in events]
    assert "error" not in kinds and "input_audio_buffer.speech_started" not in kinds
    timeout = events[kinds.index("input_audio_buffer.timeout_triggered")]
    assert timeout["audio_end_ms"] - timeout["audio_start_ms"] >= IDLE_MS
    committed = events[kinds.index("input_audio_buffer.committed")]
    assert committed["item_id"] == timeout["item_id"]
    assert kinds.index("input_audio_buffer.timeout_triggered") < kinds.index("response.created")
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert any(e["type"] == "response.output_audio.delta" for e in events)


async def test_beta_client_gets_the_commit_and_the_prompt_without_the_ga_event(server) -> None:
    client = AsyncOpenAI(api_key="unused", websocket_base_url=server.ws_url.rsplit("/", 1)[0])
    async with client.beta.realtime.connect(model="loopback") as conn:
        talk = Conversation(conn, "beta")
        await talk.until("session.created")
        detection = {**VAD, "idle_timeout_ms": IDLE_MS}
        await conn.session.update(session={"turn_detection": detection})
        await talk.until("session.updated")
        events = await talk.answered_then_quiet()
    kinds = [e["type"] for e in events]
    assert "input_audio_buffer.timeout_triggered" not in kinds
    assert "input_audio_buffer.speech_started" not in kinds
    committed = events[kinds.index("input_audio_buffer.committed")]
    created = events[kinds.index("conversation.item.created")]
    assert created["item"]["id"] == committed["item_id"] and created["item"]["role"] == "user"
    assert kinds.index("input_audio_buffer.committed") < kinds.index("response.created")
    assert events[-1]["response"]["status"] == "completed"
    assert any(e["type"] == "response.audio.delta" for e in events)


@pytest.mark.parametrize("timeout_ms", [4999, 30001, "5000"])
async def test_ga_client_out_of_range_is_refused_naming_the_param(server, timeout_ms) -> None:
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    async with client.realtime.connect(model="loopback") as conn:
        talk = Conversation(conn, "ga")
        await talk.until("session.created")
        detection = {**VAD, "idle_timeout_ms": timeout_ms}
        await conn.send(
            {
                "type": "session.update",
                "session": {"type": "realtime", "audio": {"input": {"turn_detection": detection}}},
            }
        )
        error = (await talk.until("error"))[-1]["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "audio.input.turn_detection.idle_timeout_ms"
