"""Replicas on one machine without Ray: each engine replica a child process, one front door.

``ProcessCluster`` is the ``ReplicaBackend`` of ``omniduplex serve --replicas N`` (or a
deploy YAML's ``cluster: {backend: processes, replicas: N}``). Every replica is a
``ReplicaServer`` in its own process, so each has its own interpreter and GIL; the front
door keeps the ``SessionDirectory`` (as ``LocalCluster`` does) and the client sockets.

Each child has one link to the front door, a Unix socket carrying length-prefixed pickled
messages, so each direction keeps its order: down go the opens and the deliveries (client
frames, credits, disconnects) of the front door's sockets; up go the directory reports and
the batches of all its sockets. A report goes up before the batch it precedes (``opened``
before the ``session.created`` it announces), so a resume through any front end finds the
session. A child whose link closes has died: the directory is told (its sessions end with
``replica_failed`` to their clients, new sessions go to the others) and a fresh child
takes its name, with a new incarnation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import struct
import tempfile
from typing import Any

from ...config.pipeline import PipelineConfig
from .directory import SessionDirectory
from .frontend import ReplicaConnection, ReplicaUnavailable
from .links import BatchQueue, BatchRoutes, QueuedConnection, RefusedConnection
from .local import DirectoryHere
from .replica import DirectoryReports, InboundItem, ReplicaServer
from .tunnel import TunnelScope

log = logging.getLogger(__name__)

#: The one front end each child serves (its channel's name on the replica).
FRONT_DOOR = "front-door"
_HEADER = struct.Struct("!I")


def _frame(message: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


async def _read_message(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next message, or ``None`` once the other side has gone."""
    try:
        header = await reader.readexactly(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        # Only this user can reach the socket (a 0700 temporary directory holds it).
        return pickle.loads(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


# ---- the child ------------------------------------------------------------------------


class _LinkReports(DirectoryReports):
    """The replica's reports, written up the link in order."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    def register(
        self, name: str, max_sessions: int, incarnation: str, sessions: list[str], version: int
    ) -> None:
        self.writer.write(_frame(("register", name, max_sessions, incarnation, sessions, version)))

    async def opened(self, name: str, session_id: str, ticket: str | None, version: int) -> None:
        self.writer.write(_frame(("opened", name, session_id, ticket, version)))

    def settle(self, name: str, ticket: str) -> None:
        self.writer.write(_frame(("settle", name, ticket)))

    def ended(self, name: str, session_id: str, version: int) -> None:
        self.writer.write(_frame(("ended", name, session_id, version)))


def run_replica(
    pipeline: PipelineConfig, name: str, path: str, heartbeat_s: float, log_level: int
) -> None:
    """A child process's body: serve as replica ``name`` until the front door goes; it
    logs at the front door's level, each line naming the replica."""
    # Ctrl-C and a supervisor's SIGTERM reach the whole process group: the front door
    # alone answers them, and shuts its children down in order (a child also ends when
    # its link closes, however the front door went).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format=f"%(levelname)s [{name}] %(name)s: %(message)s")
    asyncio.run(_serve_replica(pipeline, name, path, heartbeat_s))


async def _serve_replica(pipeline: PipelineConfig, name: str, path: str, heartbeat_s: float):
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(_frame(("hello", name)))
    server = ReplicaServer(
        pipeline, name=name, reports=_LinkReports(writer), heartbeat_s=heartbeat_s
    )
    await server.start()
    pump = asyncio.create_task(_pump_batches(server, writer))
    try:
        while (message := await _read_message(reader)) is not None:
            kind = message[0]
            if kind == "open":
                _, conn_id, scope, first_frames, ticket = message
                server.open(FRONT_DOOR, conn_id, scope, first_frames, ticket)
            elif kind == "deliver":
                server.deliver(message[1])
            elif kind == "shutdown":
                break
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump
        await server.shutdown()
        writer.close()


async def _pump_batches(server: ReplicaServer, writer: asyncio.StreamWriter) -> None:
    async for items in server.channel(FRONT_DOOR):
        if items:
            writer.write(_frame(("batches", items)))
            await writer.drain()  # a front door that reads slowly slows this replica's sends


# ---- the front door -------------------------------------------------------------------


class _ReplicaLink:
    """The front door's side of one child's link."""

    def __init__(self, name: str, writer: asyncio.StreamWriter) -> None:
        self.name = name
        self.writer = writer
        self.incarnation = ""
        self.routes = BatchRoutes()

    def write(self, message: tuple[Any, ...]) -> None:
        if self.routes.failure is not None:
            raise self.routes.failure
        self.writer.write(_frame(message))


class ProcessCluster(DirectoryHere):
    """``replicas`` engine replicas of ``pipeline``, each in a child process."""

    def __init__(
        self,
        pipeline: PipelineConfig,
        replicas: int = 2,
        *,
        heartbeat_s: float = 1.0,
        startup_timeout_s: float = 300.0,
    ) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be a positive integer, got {replicas!r}")
        self.pipeline = pipeline
        self.names = [f"replica-{i}" for i in range(replicas)]
        self.heartbeat_s = heartbeat_s
        self.startup_timeout_s = startup_timeout_s
        self.directory = SessionDirectory()
        self.processes: dict[str, multiprocessing.process.BaseProcess] = {}
        self._links: dict[str, _ReplicaLink] = {}
        self._registered: dict[str, asyncio.Event] = {n: asyncio.Event() for n in self.names}
        self._tmp = tempfile.TemporaryDirectory(prefix="omniduplex-replicas-")
        self._path = os.path.join(self._tmp.name, "link")
        self._server: asyncio.Server | None = None
        self._stopping = False
        self._context = multiprocessing.get_context("spawn")

    # ---- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Start every child and wait until each serves (``startup_timeout_s``)."""
        self._server = await asyncio.start_unix_server(self._accept, self._path)
        for name in self.names:
            self._spawn(name)
        waits = [self._serving(name) for name in self.names]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), self.startup_timeout_s)
        except BaseException:
            await self.shutdown()
            raise

    async def _serving(self, name: str) -> None:
        registered = self._registered[name]
        while not registered.is_set():
            process = self.processes[name]
            if not process.is_alive():
                raise RuntimeError(f"replica {name} exited with status {process.exitcode}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(registered.wait(), 0.2)

    def _spawn(self, name: str) -> None:
        self._registered[name].clear()
        process = self._context.Process(
            target=run_replica,
            args=(
                self.pipeline,
                name,
                self._path,
                self.heartbeat_s,
                logging.getLogger().getEffectiveLevel(),
            ),
            name=f"omniduplex-{name}",
        )
        process.start()
        self.processes[name] = process

    async def shutdown(self) -> None:
        self._stopping = True
        for link in list(self._links.values()):
            with contextlib.suppress(Exception):
                link.write(("shutdown",))
        loop = asyncio.get_running_loop()
        for process in self.processes.values():
            await loop.run_in_executor(None, process.join, 10.0)
            if process.is_alive():
                process.kill()
                await loop.run_in_executor(None, process.join, 5.0)
        if self._server is not None:
            self._server.close()
        self._tmp.cleanup()

    # ---- the links --------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = await _read_message(reader)
        if hello is None or hello[0] != "hello" or hello[1] not in self._registered:
            writer.close()
            return
        name = hello[1]
        link = self._links[name] = _ReplicaLink(name, writer)
        try:
            while (message := await _read_message(reader)) is not None:
                self._on_message(link, message)
        finally:
            writer.close()
            await self._lost(link)

    def _on_message(self, link: _ReplicaLink, message: tuple[Any, ...]) -> None:
        kind = message[0]
        directory = self.directory
        if kind == "batches":
            link.routes.route(message[1])
        elif kind == "opened":
            directory.opened(*message[1:])
        elif kind == "ended":
            directory.ended(*message[1:])
        elif kind == "settle":
            directory.settle(*message[1:])
        elif kind == "register":
            name, max_sessions, incarnation, sessions, version = message[1:]
            link.incarnation = incarnation
            directory.register(
                name,
                max_sessions=max_sessions,
                incarnation=incarnation,
                sessions=sessions,
                version=version,
            )
            self._registered[name].set()

    async def _lost(self, link: _ReplicaLink) -> None:
        link.routes.fail(ReplicaUnavailable(f"replica {link.name} died"))
        if self._links.get(link.name) is link:
            del self._links[link.name]
        self.directory.failed(link.name, link.incarnation or None)
        if self._stopping:
            return
        process = self.processes[link.name]
        await asyncio.get_running_loop().run_in_executor(None, process.join, 10.0)
        log.warning("replica %s died (status %s): starting it again", link.name, process.exitcode)
        self._spawn(link.name)

    # ---- ReplicaBackend ---------------------------------------------------------------

    def open_tunnel(
        self,
        replica: str,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None,
    ) -> ReplicaConnection:
        link = self._links.get(replica)
        if link is None or link.routes.failure is not None:
            return RefusedConnection(ReplicaUnavailable(f"replica {replica} is down"))
        queue = link.routes.open(conn_id)
        link.write(("open", conn_id, scope, list(first_frames), ticket))
        return _LinkConnection(link, conn_id, queue)


class _LinkConnection(QueuedConnection):
    def __init__(self, link: _ReplicaLink, conn_id: str, queue: BatchQueue) -> None:
        super().__init__(conn_id, queue)
        self.link = link

    async def send(self, frames: list[str | bytes], acked: int = 0) -> None:
        self.link.write(("deliver", [InboundItem(self.conn_id, tuple(frames), acked)]))
        try:
            await self.link.writer.drain()
        except ConnectionError as exc:
            raise ReplicaUnavailable(f"replica {self.link.name}: {exc}") from exc

    def ack(self, size: int) -> None:
        with contextlib.suppress(ReplicaUnavailable):
            self.link.write(("deliver", [InboundItem(self.conn_id, acked=size)]))

    def disconnect(self, code: int) -> None:
        with contextlib.suppress(ReplicaUnavailable):
            self.link.write(("deliver", [InboundItem(self.conn_id, disconnect=code)]))


__all__ = ["ProcessCluster"]
