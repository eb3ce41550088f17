"""The cluster in one process: replicas and the directory beside the front end, no Ray.

``LocalCluster`` is a ``ReplicaBackend`` whose replicas are ``ReplicaServer``\\ s on the
front end's own event loop: the front-end logic (placement, location, tunnels, a replica
that dies under a connection) runs exactly as on Ray, without a cluster to start. Tests
use it; so can a single machine that wants the cluster's admission over several engines.
``take_down`` makes a replica refuse every new tunnel, as one Ray has not yet reported
dead would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ...config.pipeline import PipelineConfig
from .directory import ClusterView, Placement, SessionDirectory
from .frontend import ReplicaBackend, ReplicaConnection, ReplicaUnavailable
from .replica import DirectoryReports, InboundItem, ReplicaServer
from .routes import RefusedConnection
from .tunnel import OutboundBatch, TunnelScope


class _Reports(DirectoryReports):
    def __init__(self, directory: SessionDirectory) -> None:
        self.directory = directory

    def register(
        self, name: str, max_sessions: int, incarnation: str, sessions: list[str], version: int
    ) -> None:
        self.directory.register(
            name,
            max_sessions=max_sessions,
            incarnation=incarnation,
            sessions=sessions,
            version=version,
        )

    async def opened(self, name: str, session_id: str, ticket: str | None, version: int) -> None:
        self.directory.opened(name, session_id, ticket, version)

    def settle(self, name: str, ticket: str) -> None:
        self.directory.settle(name, ticket)

    def ended(self, name: str, session_id: str, version: int) -> None:
        self.directory.ended(name, session_id, version)


class DirectoryHere(ReplicaBackend):
    """A backend whose session directory lives in this process (``self.directory``)."""

    directory: SessionDirectory

    async def place(self) -> Placement | None:
        return self.directory.place()

    async def locate(self, session_id: str) -> str | None:
        return self.directory.locate(session_id)

    async def failed(self, replica: str, incarnation: str) -> None:
        self.directory.failed(replica, incarnation or None)

    async def view(self) -> ClusterView:
        return self.directory.view()


class LocalCluster(DirectoryHere):
    """``replicas`` engine replicas of ``pipeline`` in this process."""

    def __init__(self, pipeline: PipelineConfig, replicas: int = 2) -> None:
        self.directory = SessionDirectory()
        reports = _Reports(self.directory)
        self.replicas = {
            f"replica-{i}": ReplicaServer(pipeline, name=f"replica-{i}", reports=reports)
            for i in range(replicas)
        }
        self.down: set[str] = set()

    async def start(self) -> None:
        for server in self.replicas.values():
            await server.start()

    async def shutdown(self) -> None:
        for server in self.replicas.values():
            await server.shutdown()

    def take_down(self, name: str) -> None:
        """From now on ``name`` refuses every new tunnel (the directory is not told)."""
        self.down.add(name)

    # ---- ReplicaBackend ---------------------------------------------------------------

    def open_tunnel(
        self,
        replica: str,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None,
    ) -> ReplicaConnection:
        server = self.replicas.get(replica)
        if server is None or replica in self.down:
            return RefusedConnection(ReplicaUnavailable(f"replica {replica} is down"))
        # One channel per connection (named after it): nothing here to share one with.
        server.open(conn_id, conn_id, scope, first_frames, ticket)
        return _LocalConnection(server, conn_id)


class _LocalConnection(ReplicaConnection):
    def __init__(self, server: ReplicaServer, conn_id: str) -> None:
        self.server = server
        self.conn_id = conn_id

    async def batches(self) -> AsyncIterator[OutboundBatch]:
        channel = self.server.channel(self.conn_id)
        try:
            async for items in channel:
                for _, batch in items:
                    yield batch
                    if batch.final:
                        return
        finally:
            await channel.aclose()

    async def send(self, frames: list[str | bytes], acked: int = 0) -> None:
        self.server.deliver([InboundItem(self.conn_id, tuple(frames), acked)])

    def ack(self, size: int) -> None:
        self.server.deliver([InboundItem(self.conn_id, acked=size)])

    def disconnect(self, code: int) -> None:
        self.server.deliver([InboundItem(self.conn_id, disconnect=code)])


__all__ = ["DirectoryHere", "LocalCluster"]
