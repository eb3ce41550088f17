"""A socket's outbound queue: bounded, cancel overtakes unsent audio, nothing unnumbered
is lost when the socket is abandoned."""

from __future__ import annotations

import asyncio

from omniduplex.entrypoints.duplex.connection import RealtimeConnection
from omniduplex.entrypoints.duplex.journal import ReplayJournal


class StalledSocket:
    """A test double for a socket whose peer stopped reading: sends never complete."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed_with: tuple[int, str] | None = None
        self.release = asyncio.Event()

    async def send_text(self, text: str) -> None:
        self.sent.append(text)
        await self.release.wait()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed_with = (code, reason)


def _delta(response_id: str, n: int) -> dict:
    return {
        "type": "response.output_audio.delta",
        "response_id": response_id,
        "delta": "A" * 400,
        "event_id": f"e{n}",
    }


async def test_overflow_is_reported_and_the_queue_stays_bounded() -> None:
    socket = StalledSocket()
    overflowed: list[RealtimeConnection] = []
    journal = ReplayJournal(max_bytes=1 << 20, ttl_s=60)
    conn = RealtimeConnection(
        socket, max_events=32, max_bytes=1 << 20, on_overflow=overflowed.append
    )
    conn.protocol.opened("duplex-s", journal, public_session=None)
    conn.start()
    for n in range(40):
        conn.protocol.send_event(_delta("resp_1", n))
    await asyncio.sleep(0)
    assert overflowed and overflowed[0] is conn
    await conn.abandon(1001, "detached")
    # what never left was numbered into the journal: a resume replays all of it in order
    assert journal.head == 40
    assert socket.closed_with == (1001, "detached")


async def test_a_cancelled_response_done_overtakes_its_unsent_audio() -> None:
    socket = StalledSocket()
    journal = ReplayJournal(max_bytes=1 << 20, ttl_s=60)
    conn = RealtimeConnection(socket, max_events=1000, max_bytes=1 << 22)
    conn.protocol.opened("duplex-s", journal, public_session=None)
    conn.start()
    conn.protocol.send_event(_delta("resp_1", 0))
    while not socket.sent:  # the writer took the first delta and is stuck sending it
        await asyncio.sleep(0)
    for n in range(1, 10):
        conn.protocol.send_event(_delta("resp_1", n))
    conn.protocol.send_event(_delta("resp_2", 99))
    conn.protocol.send_event(
        {
            "type": "response.done",
            "event_id": "d",
            "response": {"id": "resp_1", "status": "cancelled"},
        }
    )
    await asyncio.sleep(0)
    socket.release.set()
    conn.protocol.close_after_pending()
    await conn.drain()
    types = [text for text in socket.sent]
    # the first delta was already on the wire; the other nine of resp_1 were dropped
    assert sum('"resp_1"' in t and "output_audio.delta" in t for t in types) == 1
    assert sum('"resp_2"' in t for t in types) == 1
    assert '"response.done"' in types[-1]
    assert journal.head == 3  # numbering has no holes: only sent events were numbered
