"""EventCollector: records, queries and the latency summary."""

from __future__ import annotations

import asyncio
import base64
import math

import numpy as np

from omniduplex.clients import EventCollector, InlineDuplexClient, loopback_session
from omniduplex.clients.collector import distribution
from omniduplex.entrypoints.duplex_omni import DuplexOmni

TIMEOUT_S = 30.0


def response(rid: str, status: str) -> dict:
    return {"id": rid, "object": "realtime.response", "status": status, "output": []}


def delta(rid: str, ms: int) -> dict:
    pcm = np.zeros(24 * ms, dtype="<i2").tobytes()
    return {
        "type": "response.output_audio.delta",
        "response_id": rid,
        "delta": base64.b64encode(pcm).decode(),
        "sample_rate_hz": 24_000,
    }


def test_summary_from_a_scripted_timeline() -> None:
    c = EventCollector()
    c.sent({"type": "input_audio_buffer.commit"}, at=1.000)
    c.add({"type": "input_audio_buffer.committed"}, at=1.010)
    c.add({"type": "response.created", "response": response("r1", "in_progress")}, at=1.020)
    c.add(delta("r1", 100), at=1.050)
    c.add(
        {"type": "response.output_audio_transcript.delta", "response_id": "r1", "delta": "a "},
        at=1.051,
    )
    c.add(delta("r1", 100), at=1.150)
    c.sent({"type": "barge_in"}, at=1.200)
    c.add({"type": "response.done", "response": response("r1", "cancelled")}, at=1.204)
    # A response the server opened on its own: timed from its committed event.
    c.add({"type": "input_audio_buffer.committed"}, at=2.000)
    c.add({"type": "response.created", "response": response("r2", "in_progress")}, at=2.001)
    c.add(delta("r2", 50), at=2.030)
    c.add({"type": "response.done", "response": response("r2", "completed")}, at=2.100)
    c.add({"type": "session.closed", "reason": "client_close"}, at=2.200)

    s = c.summary()
    r1, r2 = s["responses"]["r1"], s["responses"]["r2"]
    assert r1["status"] == "cancelled" and r1["chunks"] == 2 and r1["audio_ms"] == 200.0
    assert math.isclose(r1["commit_to_first_audio_ms"], 50.0)
    assert math.isclose(r1["created_to_first_audio_ms"], 30.0)
    assert math.isclose(r1["cancel_to_done_ms"], 4.0)
    assert math.isclose(r2["commit_to_first_audio_ms"], 30.0)
    assert r2["cancel_to_done_ms"] is None
    assert s["commit_to_first_audio_ms"]["count"] == 2
    assert math.isclose(s["commit_to_first_audio_ms"]["max"], 50.0)
    assert s["cancel_to_done_ms"]["count"] == 1
    assert s["counts"]["response.output_audio.delta"] == 3
    assert s["sent"] == {"input_audio_buffer.commit": 1, "barge_in": 1}
    assert s["errors"] == 0 and s["closed"] is True
    assert math.isclose(s["duration_ms"], 1200.0)
    assert c.response_ids() == ["r1", "r2"]
    assert c.transcript("r1") == "a "
    assert len(c.audio_bytes("r1")) == 2 * 24 * 200
    assert len(c.audio_bytes()) == 2 * 24 * 250
    assert c.timeline()[0] == (0.0, "->", "input_audio_buffer.commit")


def test_user_transcript_is_the_deltas_until_the_completed_transcript() -> None:
    c = EventCollector()
    kind = "conversation.item.input_audio_transcription"
    c.add({"type": f"{kind}.delta", "item_id": "item_u", "delta": "what"})
    c.add({"type": f"{kind}.delta", "item_id": "item_other", "delta": "no"})
    c.add({"type": f"{kind}.delta", "item_id": "item_u", "delta": " time"})
    assert c.user_transcript("item_u") == "what time"
    c.add({"type": f"{kind}.completed", "item_id": "item_u", "transcript": "what time is it"})
    assert c.user_transcript("item_u") == "what time is it"
    assert c.user_transcript("item_none") == ""


def test_distribution_drops_negative_and_non_finite_values() -> None:
    assert distribution([]) is None
    assert distribution([-1.0, math.nan, math.inf]) is None
    d = distribution([3.0, 1.0, 2.0, -5.0])
    assert d == {"count": 3, "mean": 2.0, "p50": 2.0, "p95": 3.0, "min": 1.0, "max": 3.0}


async def test_summary_of_a_real_conversation_is_complete_and_non_negative() -> None:
    pcm = (0.3 * np.sin(2 * np.pi * 440 * np.arange(8_000) / 16_000)).astype(np.float32)
    async with DuplexOmni("loopback-fast") as omni:
        client = await InlineDuplexClient.open(omni, loopback_session())
        attached = EventCollector().attach(client)
        consumed = EventCollector()
        async with client:
            consumer = asyncio.create_task(consumed.consume(client))
            for _ in range(2):
                responses = client.responses()
                await client.stream_pcm(pcm, sample_rate_hz=16_000)
                await client.commit()
                handle = await responses.next(timeout=TIMEOUT_S)
                await handle.wait(TIMEOUT_S)
        await asyncio.wait_for(consumer, TIMEOUT_S)

    for collector in (attached, consumed):
        s = collector.summary()
        assert len(s["responses"]) == 2
        for info in s["responses"].values():
            assert info["status"] == "completed"
            assert info["audio_ms"] == 500.0
            assert info["created_to_first_audio_ms"] >= 0
            assert info["created_to_done_ms"] >= 0
        assert s["created_to_first_audio_ms"]["count"] == 2
        assert s["counts"]["response.done"] == 2
        assert s["counts"]["session.closed"] == 1
        assert s["errors"] == 0 and s["closed"] is True
        assert s["duration_ms"] >= 0
    # Only the attached collector sees the commands, so only it times commits.
    s = attached.summary()
    assert s["commit_to_first_audio_ms"]["count"] == 2
    assert all(v >= 0 for k, v in s["commit_to_first_audio_ms"].items() if k != "count")
    assert s["sent"]["input_audio_buffer.commit"] == 2
    assert consumed.summary()["sent"] == {}
    assert attached.types[-1] == consumed.types[-1] == "session.closed"
    assert consumed.types == attached.types[len(attached.types) - len(consumed.types) :]
