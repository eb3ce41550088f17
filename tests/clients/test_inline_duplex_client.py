"""InlineDuplexClient over a real DuplexOmni with the loopback model."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys

import numpy as np
import pytest

from omniduplex.clients import (
    DuplexProtocolError,
    DuplexSessionClosedError,
    EventCollector,
    InlineDuplexClient,
    loopback_session,
)
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import b64decode_strict, encode_audio

# A guard against hangs only; no assertion depends on how long anything takes.
TIMEOUT_S = 30.0
RATE = 16_000


def sine(ms: int, *, freq: float = 440.0) -> np.ndarray:
    t = np.arange(RATE * ms // 1000) / RATE
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def index_of(types: list[str], wanted: str, start: int = 0) -> int:
    assert wanted in types[start:], f"{wanted} missing after position {start}: {types}"
    return types.index(wanted, start)


async def test_one_turn_streams_audio_and_transcript_then_closes_last() -> None:
    async with DuplexOmni("loopback-fast") as omni:
        client = await InlineDuplexClient.open(omni, loopback_session())
        collector = EventCollector().attach(client)
        async with client:
            assert client.session_id is not None and client.session_id.startswith("duplex-")
            assert client.session_info is not None
            assert client.session_info["playback_commit_policy"] == "ack_only"
            responses = client.responses()
            events = client.events()

            sent_ms = await client.stream_pcm(sine(500), sample_rate_hz=RATE)
            assert sent_ms == pytest.approx(500.0)
            await client.commit()
            response = await responses.next(timeout=TIMEOUT_S)
            chunks = [chunk async for chunk in response.audio()]
            assert await response.wait(TIMEOUT_S) == "completed"

            assert response.done and response.decision == "speak"
            assert response.item_id == f"item_{response.response_id}"
            assert response.status_details == {"type": "completed"}
            assert response.sample_rate_hz == 24_000
            # The loopback answers with as much audio as it heard (500 ms at 16 kHz).
            assert response.received_ms == pytest.approx(500.0)
            assert b"".join(chunks) == response.audio_bytes
            assert len(response.pcm()) == 24_000 * 500 // 1000

            deltas = collector.of_type("response.output_audio_transcript.delta")
            assert response.transcript == "".join(e.delta for e in deltas)
            assert response.transcript == collector.transcript(response.response_id)
            audio = collector.of_type("response.output_audio.delta")
            assert b"".join(b64decode_strict(e.delta) for e in audio) == response.audio_bytes

            mark = client.mark()
            await client.ack_playback(response.response_id, 400)
            acked = await client.wait_for("playback.acknowledged", TIMEOUT_S, since=mark)
            assert acked.event["played_ms"] == 400
            assert response.played_ms == 400

        assert client.closed and client.closed_reason == "client_close"
        types = [e.type async for e in events]
        assert types[-1] == "session.closed" and types.count("session.closed") == 1
        created = index_of(types, "response.created")
        first_audio = index_of(types, "response.output_audio.delta", created)
        index_of(types, "response.done", first_audio)
        assert collector.types[-1] == "session.closed"


async def test_barge_in_mid_response_truncate_and_a_second_turn() -> None:
    # Real-time pacing: the answer is still being spoken when the user barges in.
    async with DuplexOmni("loopback") as omni:
        client = await InlineDuplexClient.open(omni, loopback_session())
        collector = EventCollector().attach(client)
        async with client:
            responses = client.responses()
            await client.stream_pcm(sine(1500), sample_rate_hz=RATE)
            await client.commit()
            first = await responses.next(timeout=TIMEOUT_S)
            async for _chunk in first.audio():
                if first.received_ms >= 200:
                    break
            await client.barge_in()
            assert await first.wait(TIMEOUT_S) == "cancelled"
            assert first.cancelled and first.decision == "speak"
            assert first.received_ms < 1500  # the rest of the answer never came
            heard = first.received_ms

            mark = client.mark()
            await client.ack_playback(first.response_id, heard, truncate=True)
            acked = await client.wait_for("playback.acknowledged", TIMEOUT_S, since=mark)
            assert acked.event["truncate"] is True
            assert first.played_ms == heard

            mark = client.mark()
            await client.send(
                {
                    "type": "conversation.item.truncate",
                    "item_id": first.item_id,
                    "content_index": 0,
                    "audio_end_ms": 100,
                }
            )
            truncated = await client.wait_for("conversation.item.truncated", TIMEOUT_S, since=mark)
            assert truncated.item_id == first.item_id and truncated.audio_end_ms == 100

            await client.stream_pcm(sine(400, freq=300.0), sample_rate_hz=RATE)
            await client.commit()
            second = await responses.next(timeout=TIMEOUT_S)
            assert second.response_id != first.response_id
            assert await second.wait(TIMEOUT_S) == "completed"
            assert second.received_ms == pytest.approx(400.0)
            assert second.transcript == collector.transcript(second.response_id)

        summary = collector.summary()
        assert summary["responses"][first.response_id]["status"] == "cancelled"
        assert summary["responses"][first.response_id]["cancel_to_done_ms"] >= 0
        assert summary["cancel_to_done_ms"]["count"] == 1
        assert summary["errors"] == 0
        assert collector.types[-1] == "session.closed"


async def test_refused_commands_are_answered_with_error_events() -> None:
    async with (
        DuplexOmni("loopback-fast") as omni,
        await InlineDuplexClient.open(omni, loopback_session()) as client,
    ):
        # Refused by the decoder, answered locally as the server would answer it.
        mark = client.mark()
        event_id = await client.send({"type": "playback.ack"})
        with pytest.raises(DuplexProtocolError) as info:
            await client.wait_for("playback.acknowledged", TIMEOUT_S, since=mark)
        assert info.value.code == "bad_event" and info.value.event_id == event_id
        assert info.value.param == "played_ms"

        mark = client.mark()
        event_id = await client.send({"type": "no.such.event"})
        error = await client.wait_for("error", TIMEOUT_S, since=mark)
        assert error.code == "unknown_event" and error.client_event_id == event_id

        # Refused by the engine: nothing to cancel (DESIGN decision 6).
        mark = client.mark()
        event_id = await client.cancel_response()
        error = await client.wait_for("error", TIMEOUT_S, since=mark)
        assert error.client_event_id == event_id
        assert error.code == "response_cancel_not_active"
        assert client.last_error is not None and client.last_error.code == error.code


async def test_attach_drives_an_open_handle_and_a_server_close_ends_the_client() -> None:
    async with DuplexOmni("loopback-fast") as omni:
        handle = await omni.open_session(loopback_session())
        client = InlineDuplexClient.attach(handle, session=loopback_session())
        assert client.session_id == handle.session_id
        responses = client.responses()
        await client.wait_for("session.created", TIMEOUT_S, since=0)
        await client.stream_pcm(sine(300), sample_rate_hz=RATE)
        await client.commit()
        response = await responses.next(timeout=TIMEOUT_S)
        assert await response.wait(TIMEOUT_S) == "completed"

        await omni.close_session(handle.session_id, "server_shutdown")
        assert await client.wait_closed(TIMEOUT_S) == "server_shutdown"
        with pytest.raises(DuplexSessionClosedError):
            await responses.next(timeout=TIMEOUT_S)
        with pytest.raises(DuplexSessionClosedError):
            await client.commit()
        await client.aclose()


async def test_a_session_update_changes_the_append_defaults() -> None:
    async with (
        DuplexOmni("loopback-fast") as omni,
        await InlineDuplexClient.open(omni, loopback_session()) as client,
    ):
        mark = client.mark()
        await client.update_session(audio={"input": {"format": {"type": "audio/pcmu"}}})
        await client.wait_for("session.updated", TIMEOUT_S, since=mark)
        # An append without format or rate is now read as 8 kHz G.711.
        mark = client.mark()
        tone = 0.3 * np.sin(2 * np.pi * 440.0 * np.arange(4_000) / 8_000)
        ulaw = encode_audio(tone, "g711_ulaw", 8_000)  # 500 ms of G.711
        await client.send({"type": "input_audio_buffer.append", "audio": _b64(ulaw)})
        await client.commit()
        stopped = await client.wait_for("input_audio_buffer.speech_stopped", TIMEOUT_S, since=mark)
        # 4000 one-byte samples at 8 kHz, not 2000 two-byte ones at 16 kHz.
        assert stopped.audio_end_ms == 500


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


async def test_many_clients_share_one_engine() -> None:
    async with DuplexOmni("loopback-fast") as omni:
        clients = [await InlineDuplexClient.open(omni, loopback_session()) for _ in range(4)]

        async def turn(client: InlineDuplexClient, ms: int) -> float:
            responses = client.responses()
            await client.stream_pcm(sine(ms), sample_rate_hz=RATE)
            await client.commit()
            response = await responses.next(timeout=TIMEOUT_S)
            await response.wait(TIMEOUT_S)
            return response.received_ms

        got = await asyncio.gather(*(turn(c, 200 + 100 * i) for i, c in enumerate(clients)))
        assert got == pytest.approx([200.0, 300.0, 400.0, 500.0])
        assert len({c.session_id for c in clients}) == 4
        for c in clients:
            await c.close()
            assert c.closed


def test_importing_the_clients_loads_no_server_runtime() -> None:
    code = (
        "import sys, omniduplex.clients; "
        "print('\\n'.join(m for m in sys.modules if m.startswith("
        "('omniduplex.engine', 'omniduplex.entrypoints', 'omniduplex.model_executor'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == []


async def test_release_without_closing_leaves_the_session_to_its_owner() -> None:
    async with DuplexOmni("loopback-fast") as omni:
        handle = await omni.open_session(loopback_session())
        client = InlineDuplexClient.attach(handle, close_session=False)
        await client.wait_for("session.created", TIMEOUT_S, since=0)
        await client.aclose()
        assert client.closed and client.closed_reason == "client_released"
        assert not handle.closed and omni.get_session(handle.session_id) is handle
        with pytest.raises(DuplexSessionClosedError):
            await client.barge_in()
        await handle.close()


async def test_shutting_the_engine_down_closes_open_clients() -> None:
    omni = DuplexOmni("loopback-fast")
    await omni.start()
    client = await InlineDuplexClient.open(omni, loopback_session())
    events = client.events()
    await omni.shutdown()
    assert await client.wait_closed(TIMEOUT_S) == "shutdown"
    assert [e.type async for e in events][-1] == "session.closed"
    await client.aclose()
