"""What a stock OpenAI Realtime client sees (issue 12): OpenAI's vocabulary only, OpenAI's
error codes where OpenAI has one, a bare ``response.create`` answered, usage on every
``response.done`` and the request's metadata echoed on ``response.created``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import openai.types.realtime as ga_types
import pydantic
import pytest
from server_harness import b64, run_server, sine_pcm16, wire

from omniduplex.protocol.duplex.errors import OPENAI_CODES

GA = pydantic.TypeAdapter(ga_types.RealtimeServerEvent)
PROTOCOL_DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"


@pytest.fixture(scope="module")
def server():
    with run_server("loopback-fast") as running:
        yield running


async def _conversation(client: Any) -> list[dict]:
    """Open, a turn answered, a bare response.create, close: every event received."""
    await client.recv()
    await client.send({"type": "input_audio_buffer.append", "audio": b64(sine_pcm16(500))})
    await client.send({"type": "input_audio_buffer.commit"})
    await client.send({"type": "response.create"})
    await client.until("response.done")
    await client.send({"type": "response.create"})
    await client.until("response.done")
    return client.received


@pytest.mark.parametrize("query", ["?model=loopback", "?model=loopback&duplex=0"])
async def test_a_stock_connection_receives_only_openai_event_types(server, query) -> None:
    async with wire(server.ws_url + query) as client:
        for event in await _conversation(client):
            assert GA.validate_python(event).type == event["type"]


@pytest.mark.parametrize(
    "url_tail",
    ["/v1/realtime?model=loopback&duplex=1", "/v1/duplex?model=loopback"],
)
async def test_an_opted_in_connection_receives_our_event_types(server, url_tail) -> None:
    base = server.ws_url.removesuffix("/v1/realtime")
    async with wire(base + url_tail) as client:
        types = {event["type"] for event in await _conversation(client)}
    assert "response.speak" in types or "response.listen" in types


async def test_cancel_with_nothing_active_is_openais_error(server) -> None:
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        await client.send({"type": "response.cancel", "event_id": "evt_c"})
        error = (await client.until("error"))[-1]["error"]
        assert error["code"] == "response_cancel_not_active"
        assert error["message"].startswith(OPENAI_CODES["response_cancel_not_active"])
        assert (error["type"], error["event_id"]) == ("invalid_request_error", "evt_c")


async def test_create_during_a_response_is_openais_error(server) -> None:
    with run_server("loopback") as paced:  # real-time pacing: the first reply is still on
        async with wire(paced.ws_url + "?model=loopback") as client:
            await client.recv()
            pcm = sine_pcm16(2000)
            await client.send({"type": "input_audio_buffer.append", "audio": b64(pcm)})
            await client.send({"type": "input_audio_buffer.commit"})
            await client.send({"type": "response.create"})
            await client.until("response.created")
            await client.send({"type": "response.create", "event_id": "evt_2"})
            error = (await client.until("error"))[-1]["error"]
            code = "conversation_already_has_active_response"
            assert error["code"] == code and error["event_id"] == "evt_2"
            assert error["message"].startswith(OPENAI_CODES[code])


async def test_commit_of_an_empty_buffer_is_openais_error(server) -> None:
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        await client.send({"type": "input_audio_buffer.commit"})
        error = (await client.until("error"))[-1]["error"]
        assert error["code"] == "input_audio_buffer_commit_empty"
        assert error["message"].startswith(OPENAI_CODES["input_audio_buffer_commit_empty"])


async def test_bare_response_create_completes_without_an_error(server) -> None:
    """Loopback has nothing to say unprompted: the response completes empty."""
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        await client.send({"type": "response.create", "response": {"metadata": {"k": "v"}}})
        events = await client.until("response.done")
    types = [event["type"] for event in events]
    assert "error" not in types
    created = next(e for e in events if e["type"] == "response.created")
    assert created["response"]["metadata"] == {"k": "v"}
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["usage"]["output_tokens"] == 0 and done["usage"]["input_tokens"] == 0


async def test_every_response_done_carries_usage(server) -> None:
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        await client.send({"type": "input_audio_buffer.append", "audio": b64(sine_pcm16(500))})
        await client.send({"type": "input_audio_buffer.commit"})
        await client.send({"type": "response.create"})
        done = (await client.until("response.done"))[-1]
    usage = done["response"]["usage"]
    # 500 ms in, as much audio out: five 100 ms audio tokens each way
    assert usage["input_token_details"]["audio_tokens"] == 5
    assert usage["output_token_details"]["audio_tokens"] == 5
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert GA.validate_python(done).type == "response.done"


def test_the_protocol_doc_lists_every_openai_code() -> None:
    text = PROTOCOL_DOC.read_text()
    row = r"^\s*\| [^|]+ \| `([a-z_]+)` \| `[a-z_]+` \| \"([^\"]+)\" \|$"
    listed = dict(re.findall(row, text, flags=re.MULTILINE))
    assert listed == dict(OPENAI_CODES)


async def test_a_session_update_after_open_reaches_the_next_response(server) -> None:
    """Stock clients configure after ``session.created`` (the session autostarted)."""
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        await client.send({"type": "session.update", "session": {"output_modalities": ["text"]}})
        await client.until("session.updated")
        await client.send({"type": "input_audio_buffer.append", "audio": b64(sine_pcm16(300))})
        await client.send({"type": "input_audio_buffer.commit"})
        await client.send({"type": "response.create"})
        events = await client.until("response.done")
    types = {event["type"] for event in events}
    assert "response.output_audio.delta" not in types
    assert events[-1]["response"]["output_modalities"] == ["text"]


async def test_no_speech_events_without_turn_detection_unless_opted_in(server) -> None:
    """OpenAI sends speech_started/stopped only under server-side turn detection; with it
    off, LiveKit and Pipecat would take ours for the user talking over the assistant."""
    seen = {}
    for query in ("?model=loopback", "?model=loopback&duplex=1"):
        async with wire(server.ws_url + query) as client:
            await client.recv()
            update = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
            await client.send({"type": "session.update", "session": update})
            await client.until("session.updated")
            pcm = sine_pcm16(400)
            await client.send({"type": "input_audio_buffer.append", "audio": b64(pcm)})
            await client.send({"type": "input_audio_buffer.commit"})
            seen[query] = {e["type"] for e in await client.until("input_audio_buffer.committed")}
    assert "input_audio_buffer.speech_started" not in seen["?model=loopback"]
    assert "input_audio_buffer.speech_started" in seen["?model=loopback&duplex=1"]


@pytest.mark.parametrize(
    ("deployment", "in_force"), [("loopback-fast", None), ("cascade", {"model": "whisper-1"})]
)
async def test_session_updated_reports_the_input_transcription_in_force(
    deployment, in_force
) -> None:
    """GA asks under ``audio.input.transcription``; only a model that transcribes has one."""
    with run_server(deployment) as running:
        async with wire(running.ws_url + f"?model={deployment}") as client:
            await client.recv()
            wanted = {
                "type": "realtime",
                "audio": {"input": {"transcription": {"model": "whisper-1"}}},
            }
            await client.send({"type": "session.update", "session": wanted})
            updated = (await client.until("session.updated"))[-1]["session"]
    assert updated["audio"]["input"]["transcription"] == in_force


async def test_an_opening_update_reports_the_fields_it_could_not_apply(server) -> None:
    session = {
        "instructions": "be brief",
        # Below OpenAI's 5 s minimum.
        "turn_detection": {"type": "server_vad", "idle_timeout_ms": 1000},
    }
    async with wire(server.ws_url) as client:
        await client.send({"type": "session.update", "event_id": "evt_open", "session": session})
        created = await client.recv()
        error = await client.recv()
    assert created["type"] == "session.created"
    assert created["session"]["instructions"] == "be brief"
    assert error["type"] == "error" and error["error"]["event_id"] == "evt_open"
    assert error["error"]["param"].endswith("idle_timeout_ms")
    assert error["server_event_seq"] == created["server_event_seq"] + 1


async def test_an_update_naming_another_model_keeps_the_sessions(server) -> None:
    """The Agents SDK repeats its default model name in every session.update."""
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        update = {"type": "realtime", "model": "gpt-realtime", "instructions": "hi"}
        await client.send({"type": "session.update", "session": update})
        events = await client.until("session.updated")
    assert [e["type"] for e in events] == ["session.updated"]
    assert events[-1]["session"]["model"] == "loopback"
    assert events[-1]["session"]["instructions"] == "hi"
