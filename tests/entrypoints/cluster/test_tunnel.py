"""The replica's side of a front-end socket, without Ray: order, window, abort, close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from omniduplex.entrypoints.cluster.tunnel import OutboundBatch, TunnelScope, TunnelSocket

SCOPE = TunnelScope(
    path="/v1/duplex",
    query_string="model=loopback&duplex=1",
    headers=(("Sec-WebSocket-Protocol", "realtime"),),
)


async def batches(socket: TunnelSocket) -> AsyncIterator[OutboundBatch]:
    """``socket``'s batches as the replica's channel takes them: when it says something
    waits, until the final one."""
    changed = asyncio.Event()
    socket.on_change = changed.set
    while True:
        changed.clear()
        batch = socket.take()
        if batch is None:
            await changed.wait()
            continue
        yield batch
        if batch.final:
            return


async def _next(stream) -> OutboundBatch:
    return await asyncio.wait_for(stream.__anext__(), 10.0)


async def test_the_route_reads_the_handshake_it_would_read_locally() -> None:
    socket = TunnelSocket(SCOPE)
    assert socket.query_params["model"] == "loopback"
    assert socket.headers.get("sec-websocket-protocol") == "realtime"
    assert SCOPE.duplex_route
    socket.feed(["a", b"b"])
    socket.disconnect(1001)
    assert await socket.receive() == {"type": "websocket.receive", "text": "a"}
    assert await socket.receive() == {"type": "websocket.receive", "bytes": b"b"}
    assert await socket.receive() == {"type": "websocket.disconnect", "code": 1001}


async def test_frames_leave_in_order_and_wait_for_credit_beyond_the_window() -> None:
    socket = TunnelSocket(SCOPE, incarnation="i1", window_bytes=9)
    stream = batches(socket)
    await socket.send_text("12345")
    await socket.send_text("6789")
    first = await _next(stream)
    assert first.frames == ("12345", "6789") and first.incarnation == "i1"
    # 9 characters are in flight, the whole window: the next send waits for an ack.
    blocked = asyncio.create_task(socket.send_text("abc"))
    await asyncio.sleep(0)
    assert not blocked.done()
    socket.ack(first.size)
    await asyncio.wait_for(blocked, 10.0)
    assert (await _next(stream)).frames == ("abc",)


async def test_an_abort_overtakes_what_waits() -> None:
    socket = TunnelSocket(SCOPE, window_bytes=1000)
    stream = batches(socket)
    await socket.send_text("unsent audio")
    socket.abort()
    batch = await _next(stream)
    assert batch.abort and batch.frames == () and batch.final
    assert await socket.receive() == {"type": "websocket.disconnect", "code": 1006}
    assert [b async for b in stream] == []


async def test_the_close_follows_the_last_frames_and_ends_the_stream() -> None:
    socket = TunnelSocket(SCOPE)
    stream = batches(socket)
    await socket.send_text("session.closed")
    await socket.close(1000, "client_close")
    batch = await _next(stream)
    assert batch.frames == ("session.closed",)
    assert (batch.close_code, batch.close_reason) == (1000, "client_close")
    assert [b async for b in stream] == []
