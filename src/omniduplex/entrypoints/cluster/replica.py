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
from dataclasses import dataclass
from typing import Any

from ...config.pipeline import PipelineConfig
from ...protocol.duplex import events as ev
from ..duplex.serving import RealtimeRoute
from ..duplex_omni import DuplexOmni, DuplexSessionHandle
from .tunnel import DEFAULT_WINDOW_BYTES, OutboundBatch, TunnelScope, TunnelSocket

log = logging.getLogger(__name__)


class DirectoryReports(ABC):
    """What a replica tells the session directory (one-way, in order)."""

    @abstractmethod
    def register(
        self, name: str, max_sessions: int, incarnation: str, sessions: list[str], version: int
    ) -> None:
        """The replica serves, with these sessions (as of report ``version``)."""

    @abstractmethod
    async def opened(self, name: str, session_id: str, ticket: str | None, version: int) -> None:
        """A session opened here (on the placement ``ticket``, if any). Awaited before
        ``session.created`` goes out, so a resume through any front end finds it."""

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
        await replica.reports.opened(
            replica.name, handle.session_id, ticket, replica.next_version()
        )
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


class ReplicaServer:
    """An engine replica serving front-end connections (see the module docstring)."""

    def __init__(
        self,
        pipeline: PipelineConfig,
        *,
        name: str,
        reports: DirectoryReports,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
    ) -> None:
        self.name = name
        self.reports = reports
        self.incarnation = uuid.uuid4().hex
        self.window_bytes = window_bytes
        self.model_name = pipeline.served_model_name or pipeline.name
        self.omni = ReplicaOmni(pipeline, replica=self)
        self.route: RealtimeRoute | None = None
        self.version = 0  # of the last open or end reported
        self._starting: asyncio.Task[None] | None = None
        self._tunnels: dict[str, TunnelSocket] = {}
        self._channels: dict[str, _Channel] = {}
        self._serving: set[asyncio.Task[None]] = set()

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

    def open(
        self,
        front_end: str,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None = None,
    ) -> None:
        """Serve one of ``front_end``'s sockets; its frames for the client go out on that
        front end's channel."""
        socket = TunnelSocket(scope, incarnation=self.incarnation, window_bytes=self.window_bytes)
        socket.feed(first_frames)
        self._channel(front_end).add(conn_id, socket)
        # Registered before any await: the front end's next calls may already be queued.
        self._tunnels[conn_id] = socket
        task = asyncio.get_running_loop().create_task(self._serve(conn_id, socket, scope, ticket))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def channel(self, front_end: str) -> AsyncIterator[list[tuple[str, OutboundBatch]]]:
        """Every batch for ``front_end``'s sockets, as they come, many sockets' at once.
        Once the front end stops taking it (its link closed), its sockets are dropped:
        their sessions detach."""
        channel = self._channel(front_end)
        try:
            async for items in channel.stream():
                yield items
        finally:
            channel.close()
            if self._channels.get(front_end) is channel:
                del self._channels[front_end]

    def deliver(self, items: list[InboundItem]) -> None:
        """The front end's client frames, credits and disconnects, in order."""
        for item in items:
            socket = self._tunnels.get(item.conn_id)
            if socket is None:
                continue
            if item.acked:
                socket.ack(item.acked)
            if item.frames:
                socket.feed(list(item.frames))
            if item.disconnect is not None:
                socket.disconnect(item.disconnect)

    def _channel(self, front_end: str) -> _Channel:
        channel = self._channels.get(front_end)
        if channel is None:
            channel = self._channels[front_end] = _Channel()
        return channel

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


@dataclass(frozen=True, slots=True)
class InboundItem:
    """One socket's share of a front end's delivery: its client's frames, then the credit
    for what was written to it, then its disconnect (the close code), each optional."""

    conn_id: str
    frames: tuple[str | bytes, ...] = ()
    acked: int = 0
    disconnect: int | None = None


class _Channel:
    """The sockets of one front end on this replica, and their batches on the way out."""

    def __init__(self) -> None:
        self._sockets: dict[str, TunnelSocket] = {}
        self._ready: dict[str, None] = {}  # sockets with something to take, in order
        self._wake = asyncio.Event()
        self._closed = False

    def add(self, conn_id: str, socket: TunnelSocket) -> None:
        if self._closed:
            socket.disconnect()
            return
        self._sockets[conn_id] = socket

        def changed() -> None:
            self._ready[conn_id] = None
            self._wake.set()

        socket.on_change = changed
        changed()

    async def stream(self) -> AsyncIterator[list[tuple[str, OutboundBatch]]]:
        while True:
            self._wake.clear()
            items: list[tuple[str, OutboundBatch]] = []
            ready, self._ready = self._ready, {}
            for conn_id in ready:
                socket = self._sockets.get(conn_id)
                batch = socket.take() if socket is not None else None
                if batch is None:
                    continue
                items.append((conn_id, batch))
                if batch.final:
                    del self._sockets[conn_id]
            if items:
                yield items
            else:
                await self._wake.wait()

    def close(self) -> None:
        """The front end is gone: so are its clients' sockets."""
        self._closed = True
        sockets, self._sockets = self._sockets, {}
        for socket in sockets.values():
            socket.disconnect()


__all__ = ["DirectoryReports", "InboundItem", "ReplicaInfo", "ReplicaOmni", "ReplicaServer"]
