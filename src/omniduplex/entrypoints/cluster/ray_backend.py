"""The cluster on Ray: replicas and the session directory as named actors.

* ``SessionDirectoryActor`` (named ``session-directory``, detached): the
  ``SessionDirectory``, plus a watch that probes every replica every ``probe_s``; a probe
  that finds a replica dead takes its slots out of admission, one that finds it restarted
  (a new incarnation) brings them back. A probe also starts the engine of a replica Ray
  has just restarted.
* ``EngineReplicaActor`` (named ``replica-<i>``, detached, ``max_restarts``): a
  ``ReplicaServer``. Each front end has one channel to it: a Ray streaming generator
  that brings the batches of all that front end's sockets there, and one ``deliver``
  call at a time that takes their client frames, credits and disconnects, in order.
* ``RayCluster`` (in each front end): joins the cluster (``ray.init``), creates what does
  not exist yet (``get_if_exists``: every front end may start first), waits until every
  replica serves, and is the ``ReplicaBackend`` of the front end's ``ClusterRoute``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from ...config.pipeline import PipelineConfig
from .config import DIRECTORY_NAME, ClusterConfig
from .directory import ClusterView, Placement, SessionDirectory
from .frontend import ReplicaBackend, ReplicaConnection, ReplicaUnavailable
from .links import BatchQueue, BatchRoutes, QueuedConnection
from .replica import DirectoryReports, InboundItem, ReplicaInfo, ReplicaServer
from .tunnel import OutboundBatch, TunnelScope

log = logging.getLogger(__name__)

#: Concurrent calls one replica actor serves (each open connection holds one: its stream).
REPLICA_MAX_CONCURRENCY = 100_000
#: Batches a tunnel's stream may run ahead of its front end. Ray's backpressure is also
#: what ends the stream (and so detaches the session) once the front end is gone: an
#: idle tunnel's heartbeat finds out.
TUNNEL_BACKPRESSURE_BATCHES = 8
#: How long a probe may take before the watch moves on (a slow replica is not a dead one).
PROBE_TIMEOUT_S = 10.0


class ClusterUnavailableError(RuntimeError):
    """The Ray cluster cannot be reached, or its replicas did not come up."""


# ---- the directory actor ------------------------------------------------------------------


@ray.remote(num_cpus=0, max_restarts=-1)
class SessionDirectoryActor:
    """The directory, and the watch over the replicas named at its creation. Restarted
    by Ray after a crash, it starts empty and its first probe rebuilds it from the
    replicas (each reports the sessions it holds)."""

    def __init__(self, namespace: str, names: list[str], probe_s: float = 0.5) -> None:
        self.directory = SessionDirectory()
        self.incarnation = uuid.uuid4().hex
        self.namespace = namespace
        self.probe_s = probe_s
        self._names = list(names)
        self._handles: dict[str, Any] = {}
        self._watch: asyncio.Task[None] | None = None

    def _watching(self) -> SessionDirectory:
        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._probe_forever())
        return self.directory

    async def watch(self) -> None:
        """Probe every replica now, then every ``probe_s``."""
        self._watching()
        await asyncio.gather(*(self._probe(name) for name in self._names))

    async def _probe_forever(self) -> None:
        while True:
            await asyncio.gather(*(self._probe(name) for name in list(self._names)))
            await asyncio.sleep(self.probe_s)

    async def _probe(self, name: str) -> None:
        incarnation = self.directory.incarnation(name)
        try:
            handle = self._handles.get(name)
            if handle is None:
                handle = ray.get_actor(name, namespace=self.namespace)
                self._handles[name] = handle
            info: ReplicaInfo = await asyncio.wait_for(handle.start.remote(), PROBE_TIMEOUT_S)
        except (TimeoutError, GetTimeoutError):
            return
        except (RayError, ValueError):
            if incarnation is not None and self.directory.failed(name, incarnation):
                log.warning("replica %s (%s) is gone", name, incarnation)
            return
        self.directory.register(
            name,
            max_sessions=info.max_sessions,
            incarnation=info.incarnation,
            sessions=info.sessions,
            version=info.version,
        )

    async def register(
        self, name: str, max_sessions: int, incarnation: str, sessions: list[str], version: int
    ) -> None:
        self._watching().register(
            name,
            max_sessions=max_sessions,
            incarnation=incarnation,
            sessions=sessions,
            version=version,
        )

    async def place(self) -> Placement | None:
        return self._watching().place()

    async def opened(self, name: str, session_id: str, ticket: str | None, version: int) -> None:
        self._watching().opened(name, session_id, ticket, version)

    async def settle(self, name: str, ticket: str) -> None:
        self._watching().settle(name, ticket)

    async def ended(self, name: str, session_id: str, version: int) -> None:
        self._watching().ended(name, session_id, version)

    async def locate(self, session_id: str) -> str | None:
        return self._watching().locate(session_id)

    async def failed(self, name: str, incarnation: str | None) -> bool:
        return self._watching().failed(name, incarnation or None)

    async def view(self) -> ClusterView:
        return dataclasses.replace(self._watching().view(), directory=self.incarnation)


class _ActorReports(DirectoryReports):
    def __init__(self, directory: Any) -> None:
        self.directory = directory

    def register(
        self, name: str, max_sessions: int, incarnation: str, sessions: list[str], version: int
    ) -> None:
        self.directory.register.remote(name, max_sessions, incarnation, sessions, version)

    async def opened(self, name: str, session_id: str, ticket: str | None, version: int) -> None:
        try:
            await self.directory.opened.remote(name, session_id, ticket, version)
        except RayError:
            log.warning("the directory did not hear of session %s; its probe will", session_id)

    def settle(self, name: str, ticket: str) -> None:
        self.directory.settle.remote(name, ticket)

    def ended(self, name: str, session_id: str, version: int) -> None:
        self.directory.ended.remote(name, session_id, version)


# ---- the replica actor --------------------------------------------------------------------


@ray.remote
class EngineReplicaActor:
    def __init__(self, pipeline: PipelineConfig, name: str, namespace: str) -> None:
        logging.basicConfig(level=logging.INFO)
        directory = ray.get_actor(DIRECTORY_NAME, namespace=namespace)
        self.server = ReplicaServer(pipeline, name=name, reports=_ActorReports(directory))

    async def start(self) -> ReplicaInfo:
        return await self.server.start()

    async def open(
        self,
        front_end: str,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None,
    ) -> None:
        self.server.open(front_end, conn_id, scope, first_frames, ticket)

    @ray.method(num_returns="streaming")  # type: ignore[misc]
    async def channel(self, front_end: str) -> AsyncIterator[list[tuple[str, OutboundBatch]]]:
        async for items in self.server.channel(front_end):
            yield items

    async def deliver(self, items: list[InboundItem]) -> None:
        self.server.deliver(items)

    async def shutdown(self) -> None:
        await self.server.shutdown()


# ---- the front end's view -----------------------------------------------------------------


#: The HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS is
#: one) answers with a SETTINGS frame of its own.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS_FRAME = 0x04


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast (not hang in ``ray.init``) when nothing answers at the head's GCS address,
    or what answers there does not speak gRPC (a wrong port)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterUnavailableError(f"--ray {address!r}: expected HOST:PORT, or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(_HTTP2_HELLO)
            head = b""
            while len(head) < 9:
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        raise ClusterUnavailableError(
            f"the Ray head at {address} is unreachable ({exc}); start it with "
            "`ray start --head` or pass --ray auto for a local cluster"
        ) from None
    if len(head) < 9 or head[3] != _SETTINGS_FRAME:
        raise ClusterUnavailableError(
            f"what answers at {address} is not a Ray head (no gRPC there): give the "
            "address `ray start --head` printed (its GCS port, 6379 by default)"
        )


class _ReplicaChannel:
    """This front end's traffic with one replica: one stream of batches for all its
    sockets there, and one delivery of their client frames in flight at a time (what
    arrives meanwhile goes in the next), so Ray carries a message per burst, not one per
    frame and socket."""

    def __init__(self, handle: Any, front_end: str) -> None:
        self.handle = handle
        self.front_end = front_end
        self.routes = BatchRoutes()
        self._outgoing: list[InboundItem] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._sending = False
        self._tasks: set[asyncio.Task[None]] = set()
        method = handle.channel.options(
            _generator_backpressure_num_objects=TUNNEL_BACKPRESSURE_BATCHES
        )
        self._spawn(self._read(method.remote(front_end)))

    def open(
        self, conn_id: str, scope: TunnelScope, first_frames: list[str | bytes], ticket: str | None
    ) -> _ChannelConnection:
        queue = self.routes.open(conn_id)
        if self.routes.failure is None:
            # Submitted now, before any of the connection's deliveries: Ray runs one
            # caller's calls to an actor in the order they were made.
            self._spawn(
                self._opened(
                    conn_id,
                    self.handle.open.remote(self.front_end, conn_id, scope, first_frames, ticket),
                )
            )
        return _ChannelConnection(self, conn_id, queue)

    async def _opened(self, conn_id: str, ref: Any) -> None:
        try:
            await ref
        except RayError as exc:
            self.routes.fail_one(conn_id, ReplicaUnavailable(str(exc)))

    async def _read(self, refs: Any) -> None:
        try:
            async for ref in refs:
                self.routes.route(await ref)
            self._fail(ReplicaUnavailable("the replica ended the channel"))
        except RayError as exc:
            self._fail(ReplicaUnavailable(str(exc)))

    def _fail(self, failure: ReplicaUnavailable) -> None:
        self.routes.fail(failure)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(failure)

    def post(self, item: InboundItem, waiter: asyncio.Future[None] | None = None) -> None:
        if self.routes.failure is not None:
            if waiter is not None:
                waiter.set_exception(self.routes.failure)
            return
        self._outgoing.append(item)
        if waiter is not None:
            self._waiters.append(waiter)
        if not self._sending:
            self._sending = True
            self._spawn(self._deliver())

    async def _deliver(self) -> None:
        try:
            while self._outgoing and self.routes.failure is None:
                items, self._outgoing = self._outgoing, []
                waiters, self._waiters = self._waiters, []
                try:
                    await self.handle.deliver.remote(items)
                except RayError as exc:
                    self._waiters[:0] = waiters
                    self._fail(ReplicaUnavailable(str(exc)))
                    return
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
        finally:
            self._sending = False

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _ChannelConnection(QueuedConnection):
    def __init__(self, channel: _ReplicaChannel, conn_id: str, queue: BatchQueue) -> None:
        super().__init__(conn_id, queue)
        self.channel = channel

    async def send(self, frames: list[str | bytes], acked: int = 0) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.channel.post(InboundItem(self.conn_id, tuple(frames), acked), waiter)
        await waiter

    def ack(self, size: int) -> None:
        self.channel.post(InboundItem(self.conn_id, acked=size))

    def disconnect(self, code: int) -> None:
        self.channel.post(InboundItem(self.conn_id, disconnect=code))


@dataclass(slots=True)
class RayCluster(ReplicaBackend):
    """A front end's handle on the replicas (see the module docstring)."""

    config: ClusterConfig
    directory: Any
    replicas: dict[str, Any]
    started_ray: bool = False
    model_name: str = ""
    front_end_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    _channels: dict[str, _ReplicaChannel] = field(default_factory=dict)

    @classmethod
    def connect(
        cls,
        address: str | None,
        pipeline: PipelineConfig,
        *,
        probe_s: float = 0.5,
    ) -> RayCluster:
        """Join the cluster at ``address`` (``HOST:PORT``; ``auto`` or ``None``: start a
        local one, unless this process has joined one already), create the directory and
        the replicas that do not exist, and wait until every replica serves. Raises
        ``ClusterUnavailableError``."""
        config = ClusterConfig.from_mapping(pipeline.cluster)
        started = False
        if not ray.is_initialized():
            if address not in (None, "auto"):
                _check_reachable(address)
                ray.init(address=address, namespace=config.namespace, log_to_driver=False)
            else:
                ray.init(namespace=config.namespace, include_dashboard=False)
                started = True
        namespace = config.namespace
        directory = SessionDirectoryActor.options(  # type: ignore[attr-defined]
            name=DIRECTORY_NAME, namespace=namespace, lifetime="detached", get_if_exists=True
        ).remote(namespace, config.replica_names, probe_s)
        resources = dict(config.resources_per_replica)
        replicas = {
            name: EngineReplicaActor.options(  # type: ignore[attr-defined]
                name=name,
                namespace=namespace,
                lifetime="detached",
                get_if_exists=True,
                max_restarts=config.max_restarts,
                max_task_retries=0,
                max_concurrency=REPLICA_MAX_CONCURRENCY,
                **resources,
            ).remote(pipeline, name, namespace)
            for name in config.replica_names
        }
        try:
            ray.get([r.start.remote() for r in replicas.values()], timeout=config.startup_timeout_s)
            ray.get(directory.watch.remote(), timeout=config.startup_timeout_s)
        except (RayError, GetTimeoutError) as exc:
            raise ClusterUnavailableError(f"the engine replicas did not start: {exc}") from exc
        return cls(
            config,
            directory,
            replicas,
            started_ray=started,
            model_name=pipeline.served_model_name or pipeline.name,
        )

    def stop(self, *, replicas: bool = False) -> None:
        """Leave the cluster; with ``replicas``, end the replicas and the directory too."""
        if replicas:
            for handle in (*self.replicas.values(), self.directory):
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
        if self.started_ray:
            ray.shutdown()

    # ---- ReplicaBackend ---------------------------------------------------------------

    async def place(self) -> Placement | None:
        try:
            return await self.directory.place.remote()
        except RayError as exc:
            raise ReplicaUnavailable(str(exc)) from exc

    async def locate(self, session_id: str) -> str | None:
        try:
            return await self.directory.locate.remote(session_id)
        except RayError as exc:
            raise ReplicaUnavailable(str(exc)) from exc

    def open_tunnel(
        self,
        replica: str,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None,
    ) -> ReplicaConnection:
        channel = self._channels.get(replica)
        if channel is None or channel.routes.failure is not None:
            channel = _ReplicaChannel(self._replica(replica), self.front_end_id)
            self._channels[replica] = channel
        return channel.open(conn_id, scope, first_frames, ticket)

    async def failed(self, replica: str, incarnation: str) -> None:
        with contextlib.suppress(RayError):
            await self.directory.failed.remote(replica, incarnation)

    async def view(self) -> ClusterView:
        try:
            return await self.directory.view.remote()
        except RayError as exc:
            raise ReplicaUnavailable(str(exc)) from exc

    def _replica(self, name: str) -> Any:
        handle = self.replicas.get(name)
        if handle is None:
            handle = ray.get_actor(name, namespace=self.config.namespace)
            self.replicas[name] = handle
        return handle


__all__ = [
    "ClusterUnavailableError",
    "EngineReplicaActor",
    "RayCluster",
    "SessionDirectoryActor",
]
