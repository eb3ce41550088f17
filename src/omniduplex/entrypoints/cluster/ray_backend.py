"""The cluster on Ray: Ray is the control plane, each replica's own listener the data plane.

* ``SessionDirectoryActor`` (named ``session-directory``, detached): the
  ``SessionDirectory``, plus a watch that probes every replica every ``probe_s``; a probe
  that finds a replica dead takes its slots out of admission, one that finds it restarted
  (a new incarnation) brings them back. A probe also starts the engine of a replica Ray
  has just restarted.
* ``EngineReplicaActor`` (named ``replica-<i>``, detached, ``max_restarts``): a
  ``ReplicaServer`` and its ``LinkListener``, a TCP port of its own on its node. Ray
  calls start it, probe it and tell where it listens (with the token a front end must
  present); no frame of a client crosses Ray.
* ``RayCluster`` (in each front end): joins the cluster (``ray.init``), creates what does
  not exist yet (``get_if_exists``: every front end may start first), waits until every
  replica serves, and is the ``ReplicaBackend`` of the front end's ``ClusterRoute``: it
  asks the directory (Ray) where a socket goes, and carries the socket's frames over its
  one link to that replica (``link.py``), which all its sockets there share.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from ...config.pipeline import PipelineConfig
from .config import DIRECTORY_NAME, ClusterConfig
from .directory import ClusterView, Placement, SessionDirectory
from .frontend import ReplicaBackend, ReplicaConnection, ReplicaUnavailable
from .link import LinkListener, ReplicaLink, open_link
from .replica import DirectoryReports, ReplicaInfo, ReplicaServer
from .tunnel import TunnelScope

log = logging.getLogger(__name__)

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
        self.listener = LinkListener(self.server)

    async def start(self) -> ReplicaInfo:
        return await self.server.start()

    async def link(self) -> tuple[str, int, bytes]:
        """Where a front end links to this replica (its node's address), and the token
        the link must open with."""
        host, port = await self.listener.start(ray.util.get_node_ip_address())
        return host, port, self.listener.token

    async def shutdown(self) -> None:
        await self.listener.close()
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


@dataclass(slots=True)
class RayCluster(ReplicaBackend):
    """A front end's handle on the replicas (see the module docstring)."""

    config: ClusterConfig
    directory: Any
    replicas: dict[str, Any]
    started_ray: bool = False
    model_name: str = ""
    front_end_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    _links: dict[str, ReplicaLink] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

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
        link = self._links.get(replica)
        if link is None or link.routes.failure is not None:
            link = self._links[replica] = ReplicaLink(replica)
            task = asyncio.get_running_loop().create_task(self._carry(link))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return link.open_tunnel(conn_id, scope, first_frames, ticket)

    async def _carry(self, link: ReplicaLink) -> None:
        """Link to the replica where it listens (asked of Ray), and carry the link."""
        try:
            host, port, token = await self._replica(link.name).link.remote()
            reader, writer = await open_link((host, port), token, self.front_end_id)
        except (RayError, OSError) as exc:
            link.fail(ReplicaUnavailable(f"replica {link.name}: {exc}"))
            return
        await link.serve(reader, writer)

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
