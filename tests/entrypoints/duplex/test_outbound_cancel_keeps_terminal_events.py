"""DESIGN decision 13 on the wire: when a cancelled ``response.done`` reaches a socket's
outbound, the unsent audio (and transcript) deltas of that response are dropped so the
done overtakes them, and nothing else is: the response's terminal events (item, content
part, audio and transcript ``done``), other responses' events, and the numbering without
a hole.

The events are a real loopback response's, taken from the real engine and rendered in
both dialects; the outbound and its journal are the real ones (no socket needed).
"""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import orjson
import pytest

from omniduplex.entrypoints.duplex.journal import ReplayJournal
from omniduplex.entrypoints.duplex.outbound import RealtimeOutbound
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import command_from_realtime

# A guard against hangs only; no assertion depends on how long anything takes.
TIMEOUT_S = 30.0

MEDIA = {
    "response.output_audio.delta",
    "response.output_audio_transcript.delta",
    "response.audio.delta",
    "response.audio_transcript.delta",
}


def _pcm16(ms: int, rate: int = 16_000) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    return (0.3 * np.sin(2 * np.pi * 440.0 * t) * 32767).astype("<i2").tobytes()


async def _a_real_response() -> list:
    """Every event of one loopback response, ``response.created`` to ``response.done``."""
    audio = base64.b64encode(_pcm16(600)).decode()
    async with DuplexOmni("loopback-fast") as omni, await omni.open_session() as handle:
        handle.submit(
            command_from_realtime(
                {
                    "type": "input_audio_buffer.append",
                    "audio": audio,
                    "format": {"type": "audio/pcm", "rate": 16_000},
                }
            )
        )
        handle.submit(
            command_from_realtime({"type": "input_audio_buffer.commit", "create_response": True})
        )
        events = []
        async with asyncio.timeout(TIMEOUT_S):
            async for event in handle.events():
                events.append(event)
                if event.type == "response.done":
                    break
    start = next(i for i, e in enumerate(events) if e.type == "response.created")
    return events[start:]


@pytest.mark.parametrize("dialect", ["ga", "beta"])
async def test_a_cancelled_done_drops_only_the_unsent_deltas_of_its_response(dialect):
    events = await _a_real_response()
    *body, done = events
    response_id = done.response_id
    assert sum(e.type == "response.output_audio.delta" for e in body) >= 2

    journal = ReplayJournal(max_bytes=1 << 24, ttl_s=60)
    outbound = RealtimeOutbound(max_events=10_000, max_bytes=1 << 26)
    outbound.bind(lambda rendered: journal.append(rendered)[1])
    # Another response's delta, queued among them, is not the cancelled one's.
    other = {"type": "response.output_audio.delta", "response_id": "resp_other", "delta": "AA=="}
    # What the dialect lacks (None) goes nowhere, as on a real connection.
    rendered_body = [r for r in (e.to_realtime(dialect) for e in body) if r is not None]
    for rendered in rendered_body[:2]:
        outbound.send_event(rendered)
    outbound.send_event(other)
    for rendered in rendered_body[2:]:
        outbound.send_event(rendered)
    cancelled = done.to_realtime(dialect)
    cancelled["response"]["status"] = "cancelled"
    outbound.send_event(cancelled)

    sent = []
    while (frame := outbound.next_frame()) is not None:
        sent.append(orjson.loads(frame.data))

    def is_dropped(rendered: dict) -> bool:
        return rendered["type"] in MEDIA and rendered.get("response_id") == response_id

    kept = [r for r in rendered_body if not is_dropped(r)]
    assert len(kept) < len(rendered_body)  # there was media of the response to drop
    want = [(r["type"], r.get("event_id")) for r in rendered_body[:2] if not is_dropped(r)]
    want.append((other["type"], other.get("event_id")))
    want += [(r["type"], r.get("event_id")) for r in rendered_body[2:] if not is_dropped(r)]
    want.append((cancelled["type"], cancelled.get("event_id")))
    assert [(s["type"], s.get("event_id")) for s in sent] == want
    # Every terminal event of the cancelled response is among them.
    types = {s["type"] for s in sent}
    done_types = {r["type"] for r in rendered_body if r["type"].endswith(".done")}
    assert done_types and done_types <= types
    assert not [s for s in sent if is_dropped(s)]
    assert [s["server_event_seq"] for s in sent] == list(range(1, len(sent) + 1))
