"""A client that stops reading, over a real socket (DESIGN decision 13, issue 17 defect 3).

The server must let it go as soon as the socket's queue passes its bound: the socket is
aborted (a close handshake would wait forever behind a send buffer the client never
drains), the session detaches, one line is logged, and a second connection resumes the
session with every event the first one missed. A client that does read is never dropped,
however far ahead of the socket a model without pacing runs.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import orjson
import pytest
from server_harness import TIMEOUT_S, b64, run_server, sine_pcm16, wire
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError

from omniduplex.engine.duplex.runtime_config import DuplexSessionRuntimeConfig

# The shipped bound (256 KiB): one 1 s turn's reply (about 65 KB) stays under it, so the
# queue passes it only once the socket itself has stopped taking frames.
UNSENT_BOUND = DuplexSessionRuntimeConfig().max_unsent_output_bytes_per_session
SERVING_LOG = "omniduplex.entrypoints.duplex.serving"


async def _turn(ws: ClientConnection, ms: int = 1000) -> None:
    pcm = sine_pcm16(ms)
    for i in range(0, len(pcm), 4800):
        append = {"type": "input_audio_buffer.append", "audio": b64(pcm[i : i + 4800])}
        await ws.send(orjson.dumps(append).decode())
    await ws.send('{"type":"input_audio_buffer.commit"}')
    await ws.send('{"type":"response.create"}')


async def _non_reading_client(port: int) -> ClientConnection:
    """Connected, and reading no more than its kernel and library buffers hold (a tiny
    receive buffer, a library queue of one message)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return await connect(
        f"ws://127.0.0.1:{port}/v1/realtime?model=loopback&duplex=1",
        sock=sock,
        max_queue=1,
        max_size=None,
        open_timeout=TIMEOUT_S,
    )


async def _until(predicate, what: str) -> None:
    try:
        async with asyncio.timeout(TIMEOUT_S):  # a hang guard, not a measurement
            while not predicate():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"never happened: {what}") from None


async def test_a_client_that_stops_reading_is_detached_its_socket_aborted_and_it_can_resume(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=SERVING_LOG)
    # A journal that keeps everything: the resume below must find every event it missed.
    with run_server("loopback-fast", resume_replay_max_bytes_per_session=64 << 20) as server:
        ws = await _non_reading_client(server.port)
        created = orjson.loads(await ws.recv())
        session_id, token = created["session"]["id"], created["resume_token"]
        await ws.send(
            orjson.dumps({"type": "session.update", "session": {"turn_detection": None}}).decode()
        )
        # Keep talking, never read: the server drops the socket once its queue passes the
        # bound. Only a reset can end this loop; a close frame would sit unread.
        with pytest.raises(ConnectionClosedError) as closed:
            async with asyncio.timeout(TIMEOUT_S):
                while True:
                    await _turn(ws)
                    await asyncio.sleep(0.05)
        assert closed.value.rcvd is None  # no close frame: the connection was aborted
        ws.transport.abort()

        route = server.handler
        handle = route.omni.get_session(session_id)
        await _until(lambda: not handle.attached, "the engine detaches the session")
        assert route.registry.socket_of(session_id) is None
        assert session_id in route.registry  # kept for a resume, not closed

        async with wire(server.ws_url + "?resume=1") as again:
            await again.send(
                {
                    "type": "session.resume",
                    "session_id": session_id,
                    "resume_token": token,
                    "last_received_server_event_seq": created["server_event_seq"],
                }
            )
            resumed = await again.recv()
            assert resumed["type"] == "session.resumed"
            await again.send({"type": "session.close"})
            await again.until("session.closed")
        missed = [e["server_event_seq"] for e in again.received[1:]]
        # Every event the first socket did not read, once and in order, then the close.
        assert missed == list(range(2, 2 + len(missed)))
        assert any(e["type"] == "response.output_audio.delta" for e in again.received)

    lines = [r for r in caplog.records if "client stopped reading" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert session_id in lines[0].getMessage() and "detached" in lines[0].getMessage()


async def test_a_client_that_reads_is_not_dropped_by_a_reply_larger_than_the_bound() -> None:
    # loopback-fast has no pacing: a 10 s reply (about 650 KB) is made at once, more than
    # twice the bound; the engine's pump lets the socket's writer keep up with it.
    with run_server("loopback-fast") as server:
        async with wire(server.ws_url + "?model=loopback") as client:
            await client.recv()
            await client.send({"type": "session.update", "session": {"turn_detection": None}})
            await client.speak(10_000)
            await client.send({"type": "input_audio_buffer.commit"})
            await client.send({"type": "response.create"})
            events = await client.until("response.done")
            assert events[-1]["response"]["status"] == "completed"
            audio = sum(
                len(e["delta"]) for e in events if e["type"] == "response.output_audio.delta"
            )
            assert audio > 2 * UNSENT_BOUND
            await client.send({"type": "session.close"})
            await client.until("session.closed")
