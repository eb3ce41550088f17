"""DuplexClientBase and ResponseHandle over a scripted transport (no engine)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Mapping
from typing import Any

import numpy as np
import pytest

from omniduplex.clients import (
    DuplexClientBase,
    DuplexConnectionError,
    DuplexEventOverflowError,
    DuplexProtocolError,
    DuplexSessionClosedError,
    ResponseHandle,
    UnparsedEvent,
    parse_server_event,
    response_id_of,
)
from omniduplex.protocol.duplex import b64decode_strict, command_from_realtime
from omniduplex.protocol.duplex import events as ev

# A guard against hangs only; nothing depends on how long anything takes.
TIMEOUT_S = 10.0
SID = "duplex-test"


class ScriptedClient(DuplexClientBase):
    """A transport whose events the test pushes and whose sends it records."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sent: list[Mapping[str, Any]] = []
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.released = False

    async def _send(self, command: Any) -> None:
        self.sent.append(command)
        if isinstance(command, Mapping) and command.get("type") == "session.close":
            self.push(closed())

    async def _events(self) -> AsyncIterator[Any]:
        while True:
            item = await self.inbox.get()
            if isinstance(item, BaseException):
                raise item
            if item is None:
                return
            yield item

    async def aclose(self) -> None:
        self.released = True
        await self._stop_reader()

    def push(self, *events: Any) -> None:
        for event in events:
            self.inbox.put_nowait(
                parse_server_event(event) if isinstance(event, Mapping) else event
            )

    async def settle(self) -> None:
        """Until every pushed event was dispatched."""

        async def drained() -> None:
            while not self.inbox.empty():
                await asyncio.sleep(0)
            for _ in range(5):
                await asyncio.sleep(0)

        await asyncio.wait_for(drained(), TIMEOUT_S)


# ---- wire objects ------------------------------------------------------------------------


def session_created() -> dict[str, Any]:
    return {
        "type": "session.created",
        "session": {"id": SID, "type": "realtime", "object": "realtime.session"},
    }


def response_object(rid: str, status: str, details: Any = None) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "realtime.response",
        "status": status,
        "status_details": details,
        "output": [],
        "output_modalities": ["audio"],
        "metadata": None,
    }


def created(rid: str) -> dict[str, Any]:
    return {"type": "response.created", "response": response_object(rid, "in_progress")}


def done(rid: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "response.done", "response": response_object(rid, status, {"type": status})}


def audio(rid: str, pcm: bytes, *, fmt: str = "pcm16", rate: int = 24_000) -> dict[str, Any]:
    return {
        "type": "response.output_audio.delta",
        "response_id": rid,
        "item_id": f"item_{rid}",
        "output_index": 0,
        "content_index": 0,
        "delta": base64.b64encode(pcm).decode(),
        "format": fmt,
        "sample_rate_hz": rate,
    }


def transcript(rid: str, text: str) -> dict[str, Any]:
    return {
        "type": "response.output_audio_transcript.delta",
        "response_id": rid,
        "item_id": f"item_{rid}",
        "output_index": 0,
        "content_index": 0,
        "delta": text,
    }


def listen(rid: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"object": "realtime.response", "status": "listening"}
    out: dict[str, Any] = {"type": "response.listen", "response": response}
    if rid is not None:
        response["id"] = rid
        out["response_id"] = rid
    response["metadata"] = {}
    return out


def error(code: str, event_id: str | None = None) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "code": code,
            "message": f"refused: {code}",
            "param": None,
            "event_id": event_id,
        },
    }


def closed(reason: str = "client_close") -> dict[str, Any]:
    return {"type": "session.closed", "session_id": SID, "reason": reason, "event": {}}


def pcm_ms(ms: int, rate: int = 24_000, value: int = 1000) -> bytes:
    return np.full(rate * ms // 1000, value, dtype="<i2").tobytes()


@pytest.fixture
async def client() -> AsyncIterator[ScriptedClient]:
    c = ScriptedClient()
    c.start()
    c.push(session_created())
    await c.settle()
    yield c
    await c.aclose()


# ---- lifecycle and session -------------------------------------------------------------


async def test_session_created_sets_the_session_id_and_info(client: ScriptedClient) -> None:
    assert client.session_id == SID
    assert client.session_info is not None and client.session_info["id"] == SID
    assert client.mark() == 1


async def test_close_sends_session_close_and_waits_for_session_closed() -> None:
    c = ScriptedClient()
    async with c:
        c.push(session_created())
        await c.settle()
    assert [s["type"] for s in c.sent] == ["session.close"]
    assert c.closed and c.closed_reason == "client_close"
    assert c.released
    with pytest.raises(DuplexSessionClosedError):
        await c.commit()


async def test_send_stamps_an_event_id_and_keeps_one_given(client: ScriptedClient) -> None:
    first = await client.send({"type": "input_audio_buffer.clear"})
    second = await client.send({"type": "input_audio_buffer.clear", "event_id": "mine"})
    assert first.startswith("evt_") and client.sent[0]["event_id"] == first
    assert second == "mine"
    with pytest.raises(TypeError):
        await client.send({"no": "type"})


async def test_command_helpers_build_valid_wire_commands(client: ScriptedClient) -> None:
    await client.commit()
    await client.commit(create_response=False)
    await client.create_response(instructions="hi")
    await client.cancel_response("resp_1")
    await client.cancel_response()
    await client.barge_in()
    await client.ack_playback("resp_1", 250.4, truncate=True)
    await client.update_session(playback_commit_policy="ack_only")
    sent = [dict(s) for s in client.sent]
    assert [s["type"] for s in sent] == [
        "input_audio_buffer.commit",
        "input_audio_buffer.commit",
        "response.create",
        "response.cancel",
        "response.cancel",
        "barge_in",
        "playback.ack",
        "session.update",
    ]
    assert "create_response" not in sent[0] and sent[1]["create_response"] is False
    assert sent[2]["response"] == {"instructions": "hi"}
    assert sent[3]["response_id"] == "resp_1" and "response_id" not in sent[4]
    assert sent[6]["played_ms"] == 250 and sent[6]["truncate"] is True
    # Every one of them decodes with the server's own decoder.
    for obj in sent:
        command_from_realtime(obj)


# ---- streaming input -------------------------------------------------------------------


async def test_stream_pcm_chunks_bytes_and_states_format_and_rate(client: ScriptedClient) -> None:
    pcm = np.arange(16_000 * 45 // 1000, dtype="<i2").tobytes()  # 45 ms at 16 kHz
    sent_ms = await client.stream_pcm(pcm, sample_rate_hz=16_000, chunk_ms=20)
    appends = [s for s in client.sent if s["type"] == "input_audio_buffer.append"]
    sizes = [len(b64decode_strict(a["audio"])) for a in appends]
    assert sizes == [640, 640, 160]
    assert all(a["format"] == "pcm16" and a["sample_rate_hz"] == 16_000 for a in appends)
    assert b"".join(b64decode_strict(a["audio"]) for a in appends) == pcm
    assert sent_ms == pytest.approx(45.0)
    assert client.input_ms_sent == pytest.approx(45.0)
    for a in appends:
        command = command_from_realtime(a)
        assert command.sample_rate_hz == 16_000


async def test_stream_pcm_accepts_float_and_int16_arrays(client: ScriptedClient) -> None:
    floats = np.full(160, 0.5, dtype=np.float32)
    await client.stream_pcm(floats, sample_rate_hz=8_000, chunk_ms=10)
    ints = np.full(160, 123, dtype=np.int16)
    await client.stream_pcm(ints, sample_rate_hz=8_000, chunk_ms=10, realtime=True)
    decoded = [np.frombuffer(b64decode_strict(s["audio"]), "<i2") for s in client.sent]
    assert len(decoded) == 4
    assert all(abs(int(v) - 16384) <= 1 for v in np.concatenate(decoded[:2]))
    assert np.all(np.concatenate(decoded[2:]) == 123)
    with pytest.raises(ValueError):
        await client.stream_pcm(b"\x00\x01\x02", sample_rate_hz=16_000)


# ---- responses -------------------------------------------------------------------------


async def test_response_handle_follows_its_response(client: ScriptedClient) -> None:
    responses = client.responses()
    client.push(created("resp_1"))
    handle = await responses.next(timeout=TIMEOUT_S)
    assert isinstance(handle, ResponseHandle)
    assert handle.response_id == "resp_1" and not handle.done and handle.decision is None

    chunks: list[bytes] = []

    async def read() -> None:
        async for chunk in handle.audio():
            chunks.append(chunk)

    reader = asyncio.create_task(read())
    client.push(
        {
            "type": "response.speak",
            "response_id": "resp_1",
            "item_id": "item_resp_1",
            "output_index": 0,
            "content_index": 0,
            "metadata": {},
        },
        audio("resp_1", pcm_ms(100)),
        transcript("resp_1", "hello "),
        audio("resp_1", pcm_ms(50)),
        transcript("resp_1", "world"),
        done("resp_1"),
    )
    status = await handle.wait(TIMEOUT_S)
    await asyncio.wait_for(reader, TIMEOUT_S)
    assert status == "completed" and handle.done
    assert handle.decision == "speak"
    assert handle.item_id == "item_resp_1"
    assert handle.transcript == "hello world"
    assert chunks == [pcm_ms(100), pcm_ms(50)]
    assert handle.audio_bytes == pcm_ms(100) + pcm_ms(50)
    assert handle.pcm().dtype == np.int16 and len(handle.pcm()) == 3600
    assert handle.received_ms == pytest.approx(150.0)
    assert handle.played_ms == pytest.approx(150.0)
    assert handle.status_details == {"type": "completed"}
    # A second reader, started late, still sees every chunk.
    assert [c async for c in handle.audio()] == chunks
    assert client.response("resp_1") is handle

    await client.ack_playback("resp_1", 120)
    assert handle.played_ms == 120
    assert client.sent[-1]["item_id"] == "item_resp_1"
    await client.ack_playback("resp_1", 80)
    assert handle.played_ms == 120  # a plain ack never moves backwards
    await client.ack_playback("resp_1", 80, truncate=True)
    assert handle.played_ms == 80


async def test_audio_deltas_are_decoded_per_their_format(client: ScriptedClient) -> None:
    responses = client.responses()
    client.push(created("resp_1"), audio("resp_1", b"\xff" * 80, fmt="g711_ulaw", rate=8_000))
    client.push(done("resp_1"))
    handle = await responses.next(timeout=TIMEOUT_S)
    await handle.wait(TIMEOUT_S)
    assert handle.sample_rate_hz == 8_000
    assert len(handle.audio_bytes) == 160  # 80 samples as PCM16
    assert handle.received_ms == pytest.approx(10.0)


async def test_listen_decisions(client: ScriptedClient) -> None:
    responses = client.responses()
    client.push(created("resp_1"), listen("resp_1"), done("resp_1"))
    client.push(created("resp_2"), listen(), audio("resp_2", pcm_ms(10)), listen("resp_2"))
    client.push(done("resp_2", "cancelled"), created("resp_3"), done("resp_3", "cancelled"))
    first = await responses.next(timeout=TIMEOUT_S)
    second = await responses.next(timeout=TIMEOUT_S)
    third = await responses.next(timeout=TIMEOUT_S)
    await third.wait(TIMEOUT_S)
    assert first.decision == "listen" and first.status == "completed"
    # A listen after the response spoke never downgrades it; an id-less one is not its.
    assert second.decision == "speak" and second.status == "cancelled" and second.cancelled
    assert third.decision is None


async def test_responses_since_a_mark_include_those_already_created(
    client: ScriptedClient,
) -> None:
    mark = client.mark()
    client.push(created("resp_1"))
    await client.settle()
    late = client.responses()
    caught_up = client.responses(since=mark)
    assert (await caught_up.next(timeout=TIMEOUT_S)).response_id == "resp_1"
    client.push(created("resp_2"))
    assert (await late.next(timeout=TIMEOUT_S)).response_id == "resp_2"
    assert (await caught_up.next(timeout=TIMEOUT_S)).response_id == "resp_2"


async def test_responses_end_and_handles_finish_when_the_session_closes(
    client: ScriptedClient,
) -> None:
    responses = client.responses()
    client.push(created("resp_1"), closed("idle_ttl_expired"))
    handle = await responses.next(timeout=TIMEOUT_S)
    assert await handle.wait(TIMEOUT_S) is None
    assert handle.done and handle.status_details["type"] == "session_ended"
    with pytest.raises(DuplexSessionClosedError):
        await responses.next(timeout=TIMEOUT_S)
    assert [h async for h in client.responses()] == []


# ---- events, wait_for ------------------------------------------------------------------


async def test_each_subscriber_gets_every_event_after_it_subscribed(
    client: ScriptedClient,
) -> None:
    early = client.events()
    client.push(created("resp_1"))
    await client.settle()
    late = client.events()
    client.push(done("resp_1"), closed())
    early_types = [e.type async for e in early]
    late_types = [e.type async for e in late]
    assert early_types == ["response.created", "response.done", "session.closed"]
    assert late_types == ["response.done", "session.closed"]
    # Subscribing after the end yields nothing.
    assert [e async for e in client.events()] == []


async def test_a_slow_subscriber_gets_an_overflow_error_at_the_gap() -> None:
    c = ScriptedClient(max_queued_events=3)
    c.start()
    slow = c.events()
    fast = c.events()
    fast_seen: list[str] = []

    async def read_fast() -> None:
        async for event in fast:
            fast_seen.append(event.type)

    fast_task = asyncio.create_task(read_fast())
    for event in (session_created(), *[transcript("resp_x", str(i)) for i in range(5)], closed()):
        c.push(event)
        await c.settle()  # the fast reader keeps up, one event at a time
    await asyncio.wait_for(fast_task, TIMEOUT_S)
    got = []
    with pytest.raises(DuplexEventOverflowError) as info:
        async for event in slow:
            got.append(event.type)
    assert got == ["session.created"] + ["response.output_audio_transcript.delta"] * 2
    assert info.value.dropped == 4  # three deltas and session.closed
    assert len(fast_seen) == 7 and fast_seen[-1] == "session.closed"
    await c.aclose()


async def test_wait_for_matches_types_classes_predicates_and_since(
    client: ScriptedClient,
) -> None:
    mark = client.mark()
    client.push(created("resp_1"), transcript("resp_1", "a"))
    await client.settle()
    # Already arrived: found through the mark.
    event = await client.wait_for("response.created", TIMEOUT_S, since=mark)
    assert response_id_of(event) == "resp_1"
    by_class = await client.wait_for(ev.ResponseOutputAudioTranscriptDelta, TIMEOUT_S, since=mark)
    assert by_class.delta == "a"
    waiting = asyncio.create_task(
        client.wait_for(lambda e: getattr(e, "delta", None) == "b", TIMEOUT_S)
    )
    await asyncio.sleep(0)
    client.push(transcript("resp_1", "b"))
    assert (await waiting).delta == "b"
    with pytest.raises(TimeoutError):
        await client.wait_for("response.done", 0.01)


async def test_wait_for_raises_the_servers_error(client: ScriptedClient) -> None:
    waiting = asyncio.create_task(client.wait_for("response.done", TIMEOUT_S))
    await asyncio.sleep(0)
    client.push(error("response_cancel_not_active", "evt_42"))
    with pytest.raises(DuplexProtocolError) as info:
        await waiting
    assert info.value.code == "response_cancel_not_active"
    assert info.value.event_id == "evt_42"
    assert info.value.error_type == "invalid_request_error"
    assert client.last_error is not None and client.last_error.code == "response_cancel_not_active"
    # An error can be waited for, and ignored.
    mark = client.mark()
    client.push(error("bad_event"), transcript("resp_1", "x"))
    got = await client.wait_for("error", TIMEOUT_S, since=mark)
    assert got.code == "bad_event"
    delta = await client.wait_for(
        "response.output_audio_transcript.delta", TIMEOUT_S, since=mark, raise_on_error=False
    )
    assert delta.delta == "x"


async def test_wait_for_raises_when_the_session_closes(client: ScriptedClient) -> None:
    waiting = asyncio.create_task(client.wait_for("response.done", TIMEOUT_S))
    await asyncio.sleep(0)
    client.push(closed("idle_ttl_expired"))
    with pytest.raises(DuplexSessionClosedError) as info:
        await waiting
    assert info.value.reason == "idle_ttl_expired"
    with pytest.raises(DuplexSessionClosedError):
        await client.wait_for("response.done", TIMEOUT_S)
    assert await client.wait_closed(TIMEOUT_S) == "idle_ttl_expired"


async def test_wait_closed_answers_an_end_that_comes_while_it_waits() -> None:
    # No terminal event: the session ends for this client some other way (here released;
    # a network client taken over ends the same way), after the wait began.
    c = ScriptedClient()
    c.start()
    c.push(session_created())
    await c.settle()
    waiting = asyncio.create_task(c.wait_closed(TIMEOUT_S))
    await asyncio.sleep(0)
    await c.aclose()
    assert await waiting == "client_released"
    assert await c.wait_closed(TIMEOUT_S) == "client_released"


async def test_a_transport_failure_reaches_every_reader() -> None:
    c = ScriptedClient()
    c.start()
    events = c.events()
    responses = c.responses()
    waiting = asyncio.create_task(c.wait_for("response.done", TIMEOUT_S))
    await asyncio.sleep(0)
    c.push(session_created(), created("resp_1"), RuntimeError("socket reset"))
    handle = await responses.next(timeout=TIMEOUT_S)
    with pytest.raises(DuplexConnectionError):
        await waiting
    seen = []
    with pytest.raises(DuplexConnectionError):
        async for event in events:
            seen.append(event.type)
    assert seen == ["session.created", "response.created"]
    assert handle.done
    with pytest.raises(DuplexConnectionError):
        await c.commit()
    await c.aclose()


async def test_listeners_see_sends_and_events_in_order(client: ScriptedClient) -> None:
    seen: list[tuple[str, str]] = []
    remove = client.add_listener(lambda kind, obj, at: seen.append((kind, _type(obj))))
    await client.commit()
    client.push(created("resp_1"))
    await client.settle()
    remove()
    client.push(done("resp_1"))
    await client.settle()
    assert seen == [("send", "input_audio_buffer.commit"), ("event", "response.created")]


def _type(obj: Any) -> str:
    return obj["type"] if isinstance(obj, Mapping) else obj.type


def test_unknown_server_events_are_kept_unparsed() -> None:
    event = parse_server_event({"type": "future.event", "event_id": "e1", "x": 1})
    assert isinstance(event, UnparsedEvent)
    assert event.type == "future.event" and event.to_realtime()["x"] == 1
    beta = parse_server_event(
        {
            "type": "response.audio.delta",
            "response_id": "r",
            "item_id": "i",
            "output_index": 0,
            "content_index": 0,
            "delta": "AAAA",
        }
    )
    assert beta.type == "response.output_audio.delta"
