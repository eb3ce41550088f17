"""The data plane: one stream link between a front end and a replica, for all its sockets.

A link carries length-prefixed pickled messages, in order, each way. Down (front end to
replica): ``open`` (a socket placed there: its scope, first frames and ticket),
``deliver`` (client frames, credits and disconnects, as ``InboundItem``) and
``shutdown``. Up: ``batches`` (what the replica's sockets of this front end write, many
at once) and, where the link is also the control plane (``ProcessCluster``), the
directory reports. Client frames go down as the front end received them and batches up as
the replica wrote them: neither end decodes the other's events, and the client's
WebSocket (its compression included) is the front end's alone.

``serve_front_end`` is the replica's end, ``ReplicaLink`` the front end's. Over TCP
(``LinkListener``, a Ray replica's own listener) a link opens with the replica's secret
token, checked before anything is unpickled, and keeps TCP keepalive on, so a peer
machine that vanishes without closing is found out in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import pickle
import secrets
import socket
import struct
from collections.abc import Callable
from typing import Any

from .frontend import ReplicaConnection, ReplicaUnavailable
from .replica import InboundItem, ReplicaServer
from .routes import BatchQueue, BatchRoutes, QueuedConnection
from .tunnel import TunnelScope

_HEADER = struct.Struct("!I")
TOKEN_BYTES = 32
#: How long a TCP peer has to present its token.
HANDSHAKE_TIMEOUT_S = 5.0
#: TCP keepalive: idle seconds before the first probe, seconds between probes, probes.
KEEPALIVE = (5, 2, 3)

Message = tuple[Any, ...]


def encode(message: Message) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


async def read_message(reader: asyncio.StreamReader) -> Message | None:
    """The next message, or ``None`` once the other side has gone. Only an authenticated
    peer gets this far (a 0700 directory holds a Unix link; a TCP link's token)."""
    try:
        header = await reader.readexactly(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        return pickle.loads(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def keep_alive(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle, interval, count = KEEPALIVE
    for option, value in (
        ("TCP_KEEPIDLE", idle),
        ("TCP_KEEPINTVL", interval),
        ("TCP_KEEPCNT", count),
    ):
        if hasattr(socket, option):  # Linux; elsewhere the system's defaults hold
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


# ---- the replica's end ------------------------------------------------------------------


async def serve_front_end(
    server: ReplicaServer,
    front_end: str,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Serve ``front_end``'s sockets on ``server`` until the link closes or says
    ``shutdown``; then its sockets are dropped (their sessions detach)."""
    pump = asyncio.get_running_loop().create_task(_pump_batches(server, front_end, writer))
    try:
        while (message := await read_message(reader)) is not None:
            kind = message[0]
            if kind == "open":
                _, conn_id, scope, first_frames, ticket = message
                server.open(front_end, conn_id, scope, first_frames, ticket)
            elif kind == "deliver":
                server.deliver(message[1])
            elif kind == "shutdown":
                return
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump


async def _pump_batches(server: ReplicaServer, front_end: str, writer: asyncio.StreamWriter):
    with contextlib.suppress(ConnectionError):
        async for items in server.channel(front_end):
            if items:
                writer.write(encode(("batches", items)))
                await writer.drain()  # a front end that reads slowly slows these sends


class LinkListener:
    """A replica's own TCP listener: each front end links to it with ``token``."""

    def __init__(self, server: ReplicaServer) -> None:
        self.server = server
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.address: tuple[str, int] | None = None
        self._listener: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()

    async def start(self, host: str) -> tuple[str, int]:
        if self._listener is None:
            self._listener = await asyncio.start_server(self._accept, host, 0)
            port = self._listener.sockets[0].getsockname()[1]
            self.address = (host, port)
        assert self.address is not None
        return self.address

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._links.add(task)
        try:
            keep_alive(writer)
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                token = await reader.readexactly(TOKEN_BYTES)
                if not hmac.compare_digest(token, self.token):
                    return
                hello = await read_message(reader)
            if hello is None or hello[0] != "hello":
                return
            await serve_front_end(self.server, str(hello[1]), reader, writer)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self._links.discard(task)
            writer.close()

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for task in list(self._links):
            task.cancel()


async def open_link(
    address: tuple[str, int], token: bytes, front_end: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A front end's TCP link to a replica's ``LinkListener``."""
    reader, writer = await asyncio.open_connection(*address)
    keep_alive(writer)
    writer.write(token + encode(("hello", front_end)))
    return reader, writer


# ---- the front end's end ----------------------------------------------------------------


class ReplicaLink:
    """A front end's side of its link to replica ``name``. Usable before the link is up:
    what is written meanwhile goes first, in order, once it is. What its sockets deliver
    in one turn of the event loop goes down as one message."""

    def __init__(self, name: str, on_report: Callable[[ReplicaLink, Message], None] | None = None):
        self.name = name
        self.incarnation = ""
        self.routes = BatchRoutes()
        self._on_report = on_report
        self._writer: asyncio.StreamWriter | None = None
        self._waiting: list[bytes] = []
        self._deliveries: list[InboundItem] = []
        self._up = asyncio.Event()  # the link is up, or has failed

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Carry the link until it closes; then every connection on it fails."""
        self._writer = writer
        waiting, self._waiting = self._waiting, []
        writer.writelines(waiting)
        self._up.set()
        try:
            while (message := await read_message(reader)) is not None:
                if message[0] == "batches":
                    self.routes.route(message[1])
                elif self._on_report is not None:
                    self._on_report(self, message)
        finally:
            writer.close()
            self.fail(ReplicaUnavailable(f"replica {self.name}: its link closed"))

    def fail(self, failure: ReplicaUnavailable) -> None:
        """The link is lost (the first failure names why)."""
        if self.routes.failure is None:
            self.routes.fail(failure)
        self._waiting.clear()
        self._deliveries.clear()
        self._up.set()

    def write(self, message: Message) -> None:
        if self.routes.failure is not None:
            raise self.routes.failure
        self._flush()  # what was delivered before goes before
        self._send(encode(message))

    def deliver(self, item: InboundItem) -> None:
        """``item`` goes down with every other delivery of this turn of the loop."""
        if self.routes.failure is not None:
            raise self.routes.failure
        self._deliveries.append(item)
        if len(self._deliveries) == 1:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        items, self._deliveries = self._deliveries, []
        if items and self.routes.failure is None:
            self._send(encode(("deliver", items)))

    def _send(self, data: bytes) -> None:
        if self._writer is None:
            self._waiting.append(data)
        else:
            self._writer.write(data)

    async def drain(self) -> None:
        await self._up.wait()
        if self.routes.failure is not None:
            raise self.routes.failure
        assert self._writer is not None
        try:
            await self._writer.drain()
        except ConnectionError as exc:
            raise ReplicaUnavailable(f"replica {self.name}: {exc}") from exc

    def open_tunnel(
        self,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None,
    ) -> ReplicaConnection:
        queue = self.routes.open(conn_id)
        with contextlib.suppress(ReplicaUnavailable):  # the queue already holds why
            self.write(("open", conn_id, scope, list(first_frames), ticket))
        return _LinkConnection(self, conn_id, queue)


class _LinkConnection(QueuedConnection):
    def __init__(self, link: ReplicaLink, conn_id: str, queue: BatchQueue) -> None:
        super().__init__(conn_id, queue)
        self.link = link

    async def send(self, frames: list[str | bytes], acked: int = 0) -> None:
        self.link.deliver(InboundItem(self.conn_id, tuple(frames), acked))
        await self.link.drain()

    def ack(self, size: int) -> None:
        with contextlib.suppress(ReplicaUnavailable):
            self.link.deliver(InboundItem(self.conn_id, acked=size))

    def disconnect(self, code: int) -> None:
        with contextlib.suppress(ReplicaUnavailable):
            self.link.deliver(InboundItem(self.conn_id, disconnect=code))


__all__ = [
    "LinkListener",
    "ReplicaLink",
    "encode",
    "open_link",
    "read_message",
    "serve_front_end",
]
