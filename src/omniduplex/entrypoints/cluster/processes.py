"""Replicas on one machine without Ray: each engine replica a child process, one front door.

``ProcessCluster`` is the ``ReplicaBackend`` of ``omniduplex serve --replicas N`` (or a
deploy YAML's ``cluster: {backend: processes, replicas: N}``). Every replica is a
``ReplicaServer`` in its own process, so each has its own interpreter and GIL; the front
door keeps the ``SessionDirectory`` (as ``LocalCluster`` does) and the client sockets.

Each child has one link (``link.py``) to the front door, over a Unix socket; besides the
batches of all its sockets it carries the directory reports up. A report goes up before
the batch it precedes (``opened`` before the ``session.created`` it announces), so a
resume through any front end finds the session. A child whose link closes has died: the
directory is told (its sessions end with ``replica_failed`` to their clients, new
sessions go to the others) and a fresh child takes its name, with a new incarnation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import tempfile

from ...config.pipeline import PipelineConfig
from .directory import SessionDirectory
from .frontend import ReplicaConnection, ReplicaUnavailable
from .link import Message, ReplicaLink, encode, read_message, serve_front_end
from .local import DirectoryHere
from .replica import DirectoryReports, ReplicaServer
from .routes import RefusedConnection
from .tunnel import TunnelScope

log = logging.getLogger(__name__)

#: The one front end each child serves (its channel's name on the replica).
FRONT_DOOR = "front-door"


# ---- the child ------------------------------------------------------------------------


class _LinkReports(DirectoryReports):
    """The replica's reports, written up the link in order."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    def register(
        self, name: str, max_sessions: int, incarnation: str, sessions: list[str], version: int
    ) -> None:
        self.writer.write(encode(("register", name, max_sessions, incarnation, sessions, version)))

    async def opened(self, name: str, session_id: str, ticket: str | None, version: int) -> None:
        self.writer.write(encode(("opened", name, session_id, ticket, version)))

    def settle(self, name: str, ticket: str) -> None:
        self.writer.write(encode(("settle", name, ticket)))

    def ended(self, name: str, session_id: str, version: int) -> None:
        self.writer.write(encode(("ended", name, session_id, version)))


def run_replica(pipeline: PipelineConfig, name: str, path: str, log_level: int) -> None:
    """A child process's body: serve as replica ``name`` until the front door goes; it
    logs at the front door's level, each line naming the replica."""
    # Ctrl-C and a supervisor's SIGTERM reach the whole process group: the front door
    # alone answers them, and shuts its children down in order (a child also ends when
    # its link closes, however the front door went).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format=f"%(levelname)s [{name}] %(name)s: %(message)s")
    asyncio.run(_serve_replica(pipeline, name, path))


async def _serve_replica(pipeline: PipelineConfig, name: str, path: str) -> None:
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(encode(("hello", name)))
    server = ReplicaServer(pipeline, name=name, reports=_LinkReports(writer))
    await server.start()
    try:
        await serve_front_end(server, FRONT_DOOR, reader, writer)
    finally:
        await server.shutdown()
        writer.close()


# ---- the front door -------------------------------------------------------------------


class ProcessCluster(DirectoryHere):
    """``replicas`` engine replicas of ``pipeline``, each in a child process."""

    def __init__(
        self,
        pipeline: PipelineConfig,
        replicas: int = 2,
        *,
        startup_timeout_s: float = 300.0,
    ) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be a positive integer, got {replicas!r}")
        self.pipeline = pipeline
        self.names = [f"replica-{i}" for i in range(replicas)]
        self.startup_timeout_s = startup_timeout_s
        self.directory = SessionDirectory()
        self.processes: dict[str, multiprocessing.process.BaseProcess] = {}
        self._links: dict[str, ReplicaLink] = {}
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
        hello = await read_message(reader)
        if hello is None or hello[0] != "hello" or hello[1] not in self._registered:
            writer.close()
            return
        link = self._links[hello[1]] = ReplicaLink(hello[1], on_report=self._on_report)
        try:
            await link.serve(reader, writer)
        finally:
            await self._lost(link)

    def _on_report(self, link: ReplicaLink, message: Message) -> None:
        kind = message[0]
        directory = self.directory
        if kind == "opened":
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

    async def _lost(self, link: ReplicaLink) -> None:
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
        return link.open_tunnel(conn_id, scope, first_frames, ticket)


__all__ = ["ProcessCluster"]
