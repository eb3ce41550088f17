"""The cluster on Ray: replicas and the session directory as named actors.

* ``SessionDirectoryActor`` (named ``session-directory``, detached): the
  ``SessionDirectory``, plus a watch that probes every replica every ``probe_s``; a probe
  that finds a replica dead takes its slots out of admission, one that finds it restarted
  (a new incarnation) brings them back. A probe also starts the engine of a replica Ray
  has just restarted.
* ``EngineReplicaActor`` (named ``replica-<i>``, detached, ``max_restarts``): a
  ``ReplicaServer``. A connection's frames for its client come back as a Ray streaming
  generator of ``OutboundBatch``\\ es; the client's frames go in as calls, in order.
* ``RayCluster`` (in each front end): joins the cluster (``ray.init``), creates what does
  not exist yet (``get_if_exists``: every front end may start first), waits until every
  replica serves, and is the ``ReplicaBackend`` of the front end's ``ClusterRoute``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from ...config.pipeline import PipelineConfig
from .config import DIRECTORY_NAME, ClusterConfig
from .directory import ClusterView, Placement, SessionDirectory
from .frontend import ReplicaBackend, ReplicaUnavailable
from .replica import DirectoryReports, ReplicaInfo, ReplicaServer
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
        return self._watching().view()


class _ActorReports(DirectoryReports):
    def __init__(self, directory: Any) -> None:
        self.directory = directory

    def register(
        self, name: str, max_sessions: int, incarnation: str, sessions: list[str], version: int
    ) -> None:
        self.directory.register.remote(name, max_sessions, incarnation, sessions, version)

    def opened(self, name: str, session_id: str, ticket: str | None, version: int) -> None:
        self.directory.opened.remote(name, session_id, ticket, version)

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

    @ray.method(num_returns="streaming")  # type: ignore[misc]
    async def tunnel(
        self,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None,
    ) -> AsyncIterator[OutboundBatch]:
        async for batch in self.server.tunnel(conn_id, scope, first_frames, ticket):
            yield batch

    async def receive(self, conn_id: str, frames: list[str | bytes], acked: int = 0) -> None:
        self.server.receive(conn_id, frames, acked)

    async def disconnect(self, conn_id: str, code: int) -> None:
        self.server.disconnect(conn_id, code)

    async def ack(self, conn_id: str, size: int) -> None:
        self.server.ack(conn_id, size)

    async def shutdown(self) -> None:
        await self.server.shutdown()


# ---- the front end's view -----------------------------------------------------------------


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast (not hang) when the head's GCS port does not answer."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterUnavailableError(f"--ray {address!r}: expected HOST:PORT, or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ClusterUnavailableError(
            f"the Ray head at {address} is unreachable ({exc}); start it with "
            "`ray start --head` or pass --ray auto for a local cluster"
        ) from None


async def _batches(refs: Any) -> AsyncIterator[OutboundBatch]:
    try:
        async for ref in refs:
            yield await ref
    except RayError as exc:
        raise ReplicaUnavailable(str(exc)) from exc


async def _unavailable(exc: Exception) -> AsyncIterator[OutboundBatch]:
    raise ReplicaUnavailable(str(exc))
    yield  # an async generator that raises on its first step


@dataclass(slots=True)
class RayCluster(ReplicaBackend):
    """A front end's handle on the replicas (see the module docstring)."""

    config: ClusterConfig
    directory: Any
    replicas: dict[str, Any]
    started_ray: bool = False
    model_name: str = ""

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
        return await self.directory.place.remote()

    async def locate(self, session_id: str) -> str | None:
        return await self.directory.locate.remote(session_id)

    def tunnel(
        self,
        replica: str,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None,
    ) -> AsyncIterator[OutboundBatch]:
        # Submitted now, before any of the connection's later calls: Ray runs one caller's
        # calls to an actor in the order they were made.
        try:
            method = self._replica(replica).tunnel.options(
                _generator_backpressure_num_objects=TUNNEL_BACKPRESSURE_BATCHES
            )
            refs = method.remote(conn_id, scope, first_frames, ticket)
        except (RayError, ValueError) as exc:
            return _unavailable(exc)
        return _batches(refs)

    async def send(
        self, replica: str, conn_id: str, frames: list[str | bytes], acked: int = 0
    ) -> None:
        try:
            await self._replica(replica).receive.remote(conn_id, frames, acked)
        except RayError as exc:
            raise ReplicaUnavailable(str(exc)) from exc

    def disconnect(self, replica: str, conn_id: str, code: int) -> None:
        with contextlib.suppress(RayError):
            self._replica(replica).disconnect.remote(conn_id, code)

    def ack(self, replica: str, conn_id: str, size: int) -> None:
        with contextlib.suppress(RayError):
            self._replica(replica).ack.remote(conn_id, size)

    async def failed(self, replica: str, incarnation: str) -> None:
        with contextlib.suppress(RayError):
            await self.directory.failed.remote(replica, incarnation)

    async def view(self) -> ClusterView:
        return await self.directory.view.remote()

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
