"""A replica's own TCP listener (the data plane of a Ray cluster), without Ray.

A real ``ReplicaServer`` of loopback-fast behind a ``LinkListener`` on 127.0.0.1; a front
end's ``ReplicaLink`` reaches it with ``open_link``. A peer without the token is cut off
before anything it sent is unpickled, a front end whose link closes leaves its sessions in
their disconnect grace, and what a front end's sockets deliver in one turn of its loop
goes down as one message, never ahead of an open written before it.
"""

from __future__ import annotations

import asyncio
import pickle
import struct

import orjson
import pytest
from server_harness import TIMEOUT_S

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.cluster.link import (
    TOKEN_BYTES,
    LinkListener,
    ReplicaLink,
    open_link,
    read_message,
)
from omniduplex.entrypoints.cluster.replica import DirectoryReports, ReplicaServer
from omniduplex.entrypoints.cluster.tunnel import TunnelScope

SCOPE = TunnelScope(path="/v1/realtime", query_string="model=loopback-fast")

#: What an unauthenticated peer's payload would do if it were ever unpickled.
UNPICKLED: list[str] = []


class _Tripwire:
    def __reduce__(self):
        return (UNPICKLED.append, ("unpickled",))


class _NoReports(DirectoryReports):
    """No directory here: the replica's reports go nowhere (this test reads none)."""

    def register(self, *args) -> None:
        pass

    async def opened(self, *args) -> None:
        pass

    def settle(self, *args) -> None:
        pass

    def ended(self, *args) -> None:
        pass


@pytest.fixture
async def replica():
    server = ReplicaServer(load_deploy_config("loopback-fast"), name="r0", reports=_NoReports())
    await server.start()
    listener = LinkListener(server)
    address = await listener.start("127.0.0.1")
    try:
        yield server, listener, address
    finally:
        await listener.close()
        await server.shutdown()


async def _events_until(connection, wanted: str) -> list[dict]:
    events: list[dict] = []
    async with asyncio.timeout(TIMEOUT_S):
        async for batch in connection.batches():
            events.extend(orjson.loads(frame) for frame in batch.frames)
            connection.ack(batch.size)
            if any(e["type"] == wanted for e in events):
                return events
    raise AssertionError(f"the stream ended before {wanted}: {events}")


async def test_a_peer_without_the_token_is_cut_off_unheard(replica) -> None:
    _, listener, address = replica
    reader, writer = await asyncio.open_connection(*address)
    wrong = bytes(a ^ 1 for a in listener.token)
    body = pickle.dumps(("hello", _Tripwire()))
    writer.write(wrong + struct.pack("!I", len(body)) + body)
    await writer.drain()
    async with asyncio.timeout(TIMEOUT_S):
        assert await reader.read() == b""  # closed, nothing said
    writer.close()
    assert UNPICKLED == []
    assert len(wrong) == TOKEN_BYTES


async def test_a_front_end_link_serves_a_session_and_its_close_detaches_it(replica) -> None:
    server, listener, address = replica
    link = ReplicaLink("r0")
    # Written before the link is up: it goes first once it is.
    connection = link.open_tunnel("c1", SCOPE, [], None)
    reader, writer = await open_link(address, listener.token, "front-end-1")
    carrying = asyncio.create_task(link.serve(reader, writer))
    created = (await _events_until(connection, "session.created"))[-1]
    session_id = created["session"]["id"]
    await connection.send([orjson.dumps({"type": "session.heartbeat"}).decode()])
    await _events_until(connection, "session.heartbeat_ack")
    assert server.info().detached == ()

    writer.close()  # the front end goes
    await asyncio.wait_for(carrying, TIMEOUT_S)
    async with asyncio.timeout(TIMEOUT_S):
        while session_id not in server.info().detached:
            await asyncio.sleep(0.02)
    assert session_id in server.info().sessions  # in its grace, resumable elsewhere
    with pytest.raises(Exception, match="link closed"):
        await connection.send(["{}"])


async def test_one_turn_of_deliveries_goes_down_as_one_message_behind_the_opens_before_it() -> None:
    received: asyncio.Queue = asyncio.Queue()

    async def replica_end(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (message := await read_message(reader)) is not None:
            received.put_nowait(message)

    listener = await asyncio.start_server(replica_end, "127.0.0.1", 0)
    link = ReplicaLink("r0")
    one = link.open_tunnel("c1", SCOPE, ["first"], None)
    one.ack(10)
    one.disconnect(1000)
    two = link.open_tunnel("c2", SCOPE, [], None)  # after c1's deliveries, not before
    two.ack(5)
    three = link.open_tunnel("c3", SCOPE, [], None)
    reader, writer = await asyncio.open_connection(*listener.sockets[0].getsockname()[:2])
    carrying = asyncio.create_task(link.serve(reader, writer))
    await asyncio.sleep(0)  # a later turn of the loop
    three.ack(1)
    two.ack(2)
    async with asyncio.timeout(TIMEOUT_S):
        messages = [await received.get() for _ in range(6)]
    shape = [
        (m[0], m[1])
        if m[0] == "open"
        else (m[0], [(i.conn_id, i.acked, i.disconnect) for i in m[1]])
        for m in messages
    ]
    assert shape == [
        ("open", "c1"),
        ("deliver", [("c1", 10, None), ("c1", 0, 1000)]),
        ("open", "c2"),
        ("deliver", [("c2", 5, None)]),
        ("open", "c3"),
        ("deliver", [("c3", 1, None), ("c2", 2, None)]),
    ]
    assert messages[0][3] == ["first"]
    writer.close()
    await asyncio.wait_for(carrying, TIMEOUT_S)
    listener.close()
