"""One engine replica: a ``DuplexOmni`` and the Realtime route that serves its sessions.

``ReplicaServer`` is plain asyncio (Ray runs it as an actor, ``ray_backend``). Each front
end connection reaches it as a ``TunnelSocket``; the replica's ``RealtimeRoute`` serves
that socket exactly as it would a local one, so open, resume (token, lease
compare-and-swap, replay journal), commands, bounds and close are the one-process code.
The replica tells the session directory what it holds: ``opened`` (settling the front
end's placement ticket), ``ended``, and on (re)start ``register`` with a fresh
incarnation.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...config.pipeline import PipelineConfig
from ...protocol.duplex import events as ev
from ..duplex.serving import RealtimeRoute
from ..duplex_omni import DuplexOmni, DuplexSessionHandle
from .tunnel import (
    DEFAULT_HEARTBEAT_S,
    DEFAULT_WINDOW_BYTES,
    OutboundBatch,
    TunnelScope,
    TunnelSocket,
)

log = logging.getLogger(__name__)


class DirectoryReports(ABC):
    """What a replica tells the session directory (one-way, in order)."""

    @abstractmethod
    def register(
        self, name: str, max_sessions: int, incarnation: str, sessions: list[str], version: int
    ) -> None:
        """The replica serves, with these sessions (as of report ``version``)."""

    @abstractmethod
    def opened(self, name: str, session_id: str, ticket: str | None, version: int) -> None:
        """A session opened here (on the placement ``ticket``, if any)."""

    @abstractmethod
    def settle(self, name: str, ticket: str) -> None:
        """A placement ended without opening a session."""

    @abstractmethod
    def ended(self, name: str, session_id: str, version: int) -> None:
        """A session held here ended."""


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    name: str
    incarnation: str
    max_sessions: int
    sessions: tuple[str, ...] = ()
    # Those of them in their disconnect grace (no socket): resumable through any front end.
    detached: tuple[str, ...] = ()
    version: int = 0
    model: str = ""
    dead_reason: str | None = None


@dataclass(slots=True)
class _Connecting:
    """The connection whose handshake runs in this task (a context variable carries it
    from the tunnel into ``open_session``)."""

    tunnel: TunnelSocket
    ticket: str | None
    settled: bool = False


_CONNECTING: contextvars.ContextVar[_Connecting | None] = contextvars.ContextVar(
    "omniduplex_cluster_connecting", default=None
)


class ReplicaOmni(DuplexOmni):
    """``DuplexOmni`` that reports the sessions it opens and ends to its replica."""

    def __init__(self, pipeline: PipelineConfig, *, replica: ReplicaServer, **kwargs: Any):
        self._replica = replica
        super().__init__(pipeline, **kwargs)

    async def open_session(self, session: Mapping[str, Any] | None = None) -> DuplexSessionHandle:
        handle = await super().open_session(session)
        connecting = _CONNECTING.get()
        ticket = None
        if connecting is not None:
            connecting.tunnel.session_id = handle.session_id
            ticket, connecting.settled = connecting.ticket, True
        replica = self._replica
        replica.reports.opened(replica.name, handle.session_id, ticket, replica.next_version())
        return handle

    async def resume_session(
        self, session_id: str, expected_lease_generation: int
    ) -> DuplexSessionHandle:
        handle = await super().resume_session(session_id, expected_lease_generation)
        connecting = _CONNECTING.get()
        if connecting is not None:
            connecting.tunnel.session_id = session_id
        return handle

    def _route_engine_message(self, message: object) -> bool:
        handled = super()._route_engine_message(message)
        # A session's terminal event (the pump's message carries the session's id).
        if isinstance(getattr(message, "event", None), ev.SessionClosed):
            replica = self._replica
            session_id: str = message.session_id  # type: ignore[attr-defined]
            replica.reports.ended(replica.name, session_id, replica.next_version())
        return handled


@dataclass(slots=True)
class _Tunnel:
    socket: TunnelSocket
    task: asyncio.Task[None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class ReplicaServer:
    """An engine replica serving front-end connections (see the module docstring)."""

    def __init__(
        self,
        pipeline: PipelineConfig,
        *,
        name: str,
        reports: DirectoryReports,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
    ) -> None:
        self.name = name
        self.reports = reports
        self.incarnation = uuid.uuid4().hex
        self.heartbeat_s = heartbeat_s
        self.window_bytes = window_bytes
        self.model_name = pipeline.served_model_name or pipeline.name
        self.omni = ReplicaOmni(pipeline, replica=self)
        self.route: RealtimeRoute | None = None
        self.version = 0  # of the last open or end reported
        self._starting: asyncio.Task[None] | None = None
        self._tunnels: dict[str, _Tunnel] = {}

    # ---- lifecycle --------------------------------------------------------------------

    async def start(self) -> ReplicaInfo:
        """Start the engine (once) and register with the directory; the replica's state."""
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self._start())
        await asyncio.shield(self._starting)
        return self.info()

    async def _start(self) -> None:
        await self.omni.start()
        self.route = RealtimeRoute(self.omni)
        info = self.info()
        self.reports.register(
            self.name, self.max_sessions, self.incarnation, list(info.sessions), info.version
        )
        log.info("replica %s (%s) serving", self.name, self.incarnation)

    def next_version(self) -> int:
        self.version += 1
        return self.version

    @property
    def max_sessions(self) -> int:
        return self.omni.runtime_config.max_sessions

    def info(self) -> ReplicaInfo:
        return ReplicaInfo(
            name=self.name,
            incarnation=self.incarnation,
            max_sessions=self.max_sessions,
            sessions=tuple(self.omni._handles),
            detached=self._detached(),
            version=self.version,
            model=self.model_name,
            dead_reason=self.omni.dead_reason,
        )

    def _detached(self) -> tuple[str, ...]:
        if self.route is None:
            return ()
        registry = self.route.registry
        return tuple(sid for sid in registry if registry.socket_of(sid) is None)

    async def shutdown(self) -> None:
        if self.route is not None:
            await self.route.shutdown()
        await self.omni.shutdown()

    # ---- connections ------------------------------------------------------------------

    async def tunnel(
        self,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None = None,
    ) -> AsyncIterator[OutboundBatch]:
        """Serve one front-end socket: its frames for the client, batch by batch."""
        socket = TunnelSocket(scope, incarnation=self.incarnation, window_bytes=self.window_bytes)
        socket.feed(first_frames)
        tunnel = _Tunnel(socket)
        # Registered before any await: the front end's next calls may already be queued.
        self._tunnels[conn_id] = tunnel
        tunnel.task = asyncio.get_running_loop().create_task(
            self._serve(conn_id, socket, scope, ticket)
        )
        try:
            async for batch in socket.batches(self.heartbeat_s):
                yield batch
        finally:
            # The front end stopped taking the stream (it died, or its client left).
            socket.disconnect()

    async def _serve(
        self, conn_id: str, socket: TunnelSocket, scope: TunnelScope, ticket: str | None
    ) -> None:
        connecting = _Connecting(socket, ticket)
        _CONNECTING.set(connecting)
        try:
            await self.start()
            assert self.route is not None
            await self.route.handle(socket, duplex_route=scope.duplex_route)  # type: ignore[arg-type]
        except Exception:
            log.exception("replica %s: connection %s failed", self.name, conn_id)
        finally:
            if ticket is not None and not connecting.settled:
                self.reports.settle(self.name, ticket)
            socket.finished()
            self._tunnels.pop(conn_id, None)

    def receive(self, conn_id: str, frames: list[str | bytes], acked: int = 0) -> None:
        tunnel = self._tunnels.get(conn_id)
        if tunnel is not None:
            if acked:
                tunnel.socket.ack(acked)
            tunnel.socket.feed(frames)

    def disconnect(self, conn_id: str, code: int) -> None:
        tunnel = self._tunnels.get(conn_id)
        if tunnel is not None:
            tunnel.socket.disconnect(code)

    def ack(self, conn_id: str, size: int) -> None:
        tunnel = self._tunnels.get(conn_id)
        if tunnel is not None:
            tunnel.socket.ack(size)


__all__ = ["DirectoryReports", "ReplicaInfo", "ReplicaOmni", "ReplicaServer"]
