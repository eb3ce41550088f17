"""A stateless front end: client sockets in, each tunnelled to the replica of its session.

``ClusterRoute`` serves ``/v1/realtime`` and ``/v1/duplex`` on a front end. It accepts the
socket, reads only what it needs to choose a replica (the handshake's query and, unless
the session opens at once, the first frame: a ``session.resume`` names its session), asks
the cluster (``ReplicaBackend``) where that session lives or which replica has room, and
from then on moves frames: the client's to the replica, the replica's batches to the
client. Every rule of the Realtime API runs on the replica; the front end keeps nothing
about a session beyond the socket, so a client whose front end died resumes through any
other one.

When the replica dies under a connection, the client gets ``session.closed`` with reason
``replica_failed`` (numbered after the last event it got; a connection without the
duplex extensions gets only the close frame, 1011 with that reason), and the directory is
told, so new sessions go to the replicas that live.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.websockets import WebSocket

from ...protocol.duplex import DuplexCommandError
from ...protocol.duplex import events as ev
from ..duplex.journal import SEQ_KEY
from ..duplex.realtime_input import RealtimeEnvelope, encode_frame
from ..websocket_protocol import ABORT_EXTENSION
from .directory import ClusterView, Placement
from .tunnel import ABNORMAL_CLOSURE, ACK_EVERY_BYTES, OutboundBatch, TunnelScope

log = logging.getLogger(__name__)

REALTIME_SUBPROTOCOL = "realtime"
#: The reason a session ends with when its replica died.
REPLICA_FAILED = "replica_failed"
#: Client frames waiting for the replica (the reader stops reading beyond this).
MAX_PENDING_FRAMES = 256
#: Replicas a new session tries when the one it was placed on turns out dead.
MAX_PLACEMENTS = 3


class ReplicaUnavailable(Exception):
    """The replica a connection was tunnelled to died (or cannot be reached)."""


class ReplicaConnection(ABC):
    """One client socket's tunnel to its replica, as the front end drives it."""

    @abstractmethod
    def batches(self) -> AsyncIterator[OutboundBatch]:
        """The replica's batches for the client, until the final one. Raises
        ``ReplicaUnavailable``."""

    @abstractmethod
    async def send(self, frames: list[str | bytes], acked: int = 0) -> None:
        """The client's frames, in order, and the credit of ``acked`` characters written
        to it since the last; returns once the replica has them. Raises
        ``ReplicaUnavailable``."""

    @abstractmethod
    def ack(self, size: int) -> None:
        """``size`` characters of the tunnel's frames were written to the client."""

    @abstractmethod
    def disconnect(self, code: int) -> None:
        """The client's socket went away (after every frame it sent)."""


class ReplicaBackend(ABC):
    """The cluster as a front end sees it: placement, location, and tunnels."""

    @abstractmethod
    async def place(self) -> Placement | None:
        """The replica for a new session (``None``: no replica is alive). Raises
        ``ReplicaUnavailable`` when the directory cannot answer."""

    @abstractmethod
    async def locate(self, session_id: str) -> str | None:
        """The replica that holds ``session_id``, or ``None``. Raises
        ``ReplicaUnavailable`` when the directory cannot answer."""

    @abstractmethod
    def open_tunnel(
        self,
        replica: str,
        conn_id: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None,
    ) -> ReplicaConnection:
        """Open a tunnel (the replica is asked at once, before any later call)."""

    @abstractmethod
    async def failed(self, replica: str, incarnation: str) -> None:
        """The replica (that incarnation of it) died."""

    @abstractmethod
    async def view(self) -> ClusterView:
        """The replicas and their load."""


def _offered(websocket: WebSocket) -> list[str]:
    raw = websocket.headers.get("sec-websocket-protocol", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


def _last_seq(frame: str, previous: int) -> int:
    """The ``server_event_seq`` of a frame (the journal writes it last), or ``previous``."""
    at = frame.rfind(f'"{SEQ_KEY}":')
    if at < 0:
        return previous
    digits = frame[at + len(SEQ_KEY) + 3 :].split("}", 1)[0].split(",", 1)[0]
    return int(digits) if digits.strip().isdigit() else previous


@dataclass(slots=True)
class FrontEndMetrics:
    """What ``/metrics`` says of one front end's tunnels (its sessions' own counters are
    on their replicas)."""

    tunnels: Gauge
    placed: Counter
    resumed: Counter
    refused: Counter
    replica_failures: Counter

    @classmethod
    def on(cls, registry: CollectorRegistry) -> FrontEndMetrics:
        return cls(
            tunnels=Gauge(
                "omniduplex_frontend_tunnels",
                "Sockets tunnelled to a replica now",
                registry=registry,
            ),
            placed=Counter(
                "omniduplex_frontend_placed",
                "Sockets placed on a replica (new sessions)",
                registry=registry,
            ),
            resumed=Counter(
                "omniduplex_frontend_resumes_routed",
                "Resumes routed to their session's replica",
                registry=registry,
            ),
            refused=Counter(
                "omniduplex_frontend_refused",
                "Sockets the front end refused",
                ["code"],
                registry=registry,
            ),
            replica_failures=Counter(
                "omniduplex_frontend_replica_failures",
                "Tunnels whose replica died under them",
                registry=registry,
            ),
        )


class ClusterRoute:
    """The Realtime routes of one front end (see the module docstring)."""

    def __init__(
        self,
        backend: ReplicaBackend,
        *,
        config_timeout_s: float = 10.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.backend = backend
        self.config_timeout_s = config_timeout_s
        self.metrics = FrontEndMetrics.on(registry or CollectorRegistry())
        self._connections: set[asyncio.Task[Any]] = set()
        self._shutting_down = False

    async def handle(self, websocket: WebSocket, *, duplex_route: bool = False) -> None:
        offered = _offered(websocket)
        try:
            envelope = RealtimeEnvelope.from_request(
                websocket.query_params,
                websocket.headers.items(),
                offered,
                duplex_route=duplex_route,
            )
        except DuplexCommandError as exc:
            await websocket.accept()
            await websocket.send_text(RealtimeEnvelope().error_frame_for(exc).decode())
            await websocket.close(code=1008)
            return
        await websocket.accept(
            subprotocol=REALTIME_SUBPROTOCOL if REALTIME_SUBPROTOCOL in offered else None
        )
        scope = TunnelScope(
            path=websocket.url.path,
            query_string=websocket.url.query,
            headers=tuple((k, v) for k, v in websocket.headers.items()),
        )
        first_frames: list[str | bytes] = []
        resume_of: str | None = None
        if envelope.initial_open() is None:
            frame = await self._first_frame(websocket)
            if frame is None:
                await self._refuse(
                    websocket, envelope, "config_timeout", "Timeout waiting for session.update"
                )
                return
            first_frames.append(frame)
            with contextlib.suppress(DuplexCommandError, Exception):
                first = envelope.first_message(frame)
                if first.kind == "resume":
                    resume_of = str(first.command.session_id)
        if self._shutting_down:
            await self._refuse(
                websocket, envelope, "server_shutting_down", "the server is shutting down", 1001
            )
            return
        try:
            await self._route(websocket, envelope, scope, first_frames, resume_of)
        except ReplicaUnavailable as exc:
            # The directory itself cannot answer (it is being restarted).
            log.warning("the session directory is unavailable: %s", exc)
            await self._refuse(
                websocket,
                envelope,
                "engine_unavailable",
                "the model engine is unavailable: the session directory does not answer",
                1011,
            )

    async def _route(
        self,
        websocket: WebSocket,
        envelope: RealtimeEnvelope,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        resume_of: str | None,
    ) -> None:
        if resume_of is not None:
            replica = await self.backend.locate(resume_of)
            if replica is None:
                await self._refuse(
                    websocket,
                    envelope,
                    "session_resume_expired",
                    f"Unknown or expired duplex session: {resume_of}",
                )
                return
            self.metrics.resumed.inc()
            await self._pump(websocket, envelope, replica, scope, first_frames, None, resume_of)
            return
        for _ in range(MAX_PLACEMENTS):
            placement = await self.backend.place()
            if placement is None:
                break
            self.metrics.placed.inc()
            link = await self._pump(
                websocket, envelope, placement.replica, scope, first_frames, placement.ticket, None
            )
            if not link.never_reached:
                return
            # The replica was gone before it took the connection: another one may take it.
            first_frames = [*first_frames, *link.undelivered]
        await self._refuse(
            websocket,
            envelope,
            "engine_unavailable",
            "the model engine is unavailable: no replica is serving",
            1011,
        )

    async def _first_frame(self, websocket: WebSocket) -> str | bytes | None:
        try:
            message = await asyncio.wait_for(websocket.receive(), self.config_timeout_s)
        except TimeoutError:
            return None
        if message["type"] == "websocket.disconnect":
            return None
        text = message.get("text")
        return text if text is not None else message.get("bytes", b"")

    async def _refuse(
        self,
        websocket: WebSocket,
        envelope: RealtimeEnvelope,
        code: str,
        message: str,
        close_code: int = 1000,
    ) -> None:
        self.metrics.refused.labels(code).inc()
        with contextlib.suppress(Exception):
            await websocket.send_text(envelope.error_frame(code, message).decode())
            await websocket.close(code=close_code, reason=code)

    # ---- one tunnelled connection ----------------------------------------------------

    async def _pump(
        self,
        websocket: WebSocket,
        envelope: RealtimeEnvelope,
        replica: str,
        scope: TunnelScope,
        first_frames: list[str | bytes],
        ticket: str | None,
        session_id: str | None,
    ) -> _Link:
        """Tunnel the socket to ``replica`` until either side ends; the link, which says
        whether the replica was reached at all."""
        conn_id = uuid.uuid4().hex
        connection = self.backend.open_tunnel(replica, conn_id, scope, first_frames, ticket)
        link = _Link(connection, websocket, replica, session_id)
        stream = connection.batches()
        reader = asyncio.create_task(link.read())
        forwarder = asyncio.create_task(link.forward())
        writer = asyncio.create_task(link.write(stream))
        tasks = {reader, forwarder, writer}
        self._connections.add(writer)
        self.metrics.tunnels.inc()
        try:
            # The forwarder ends once the client left (after handing on every frame it
            # sent, then the disconnect) or the replica failed; the writer once the
            # replica closed the socket or failed.
            await asyncio.wait({forwarder, writer}, return_when=asyncio.FIRST_COMPLETED)
            if not writer.done():
                with contextlib.suppress(asyncio.TimeoutError, Exception):
                    await asyncio.wait_for(asyncio.shield(writer), 5.0)
            if link.replica_failed:
                self.metrics.replica_failures.inc()
                await self.backend.failed(replica, link.incarnation)
                if not (link.never_reached and ticket is not None):
                    await link.report_replica_death(envelope)
        finally:
            self.metrics.tunnels.dec()
            self._connections.discard(writer)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        return link

    async def shutdown(self) -> None:
        """Stop accepting; the connections' sessions detach on their replicas as their
        sockets close (a front end going away is a disconnect, not a session end)."""
        self._shutting_down = True


class _Link:
    """One client socket tunnelled to one replica."""

    def __init__(
        self,
        connection: ReplicaConnection,
        websocket: WebSocket,
        replica: str,
        session_id: str | None,
    ) -> None:
        self.connection = connection
        self.websocket = websocket
        self.replica = replica
        self.session_id = session_id
        self.incarnation = ""
        self.last_seq = 0
        self.replica_failed = False
        self.batches = 0
        self.unacked = 0  # characters written to the client, not yet credited back
        self.client_close_code = ABNORMAL_CLOSURE
        # The client's frames; ``None`` after the last: it disconnected.
        self.inbound: asyncio.Queue[str | bytes | None] = asyncio.Queue(MAX_PENDING_FRAMES)
        self.unsent: list[str | bytes] = []  # a batch the replica could not take

    @property
    def never_reached(self) -> bool:
        """The replica failed before it sent anything (it never served the socket)."""
        return self.replica_failed and self.batches == 0

    @property
    def undelivered(self) -> list[str | bytes]:
        """The client's frames the replica never took, in order."""
        frames = list(self.unsent)
        while not self.inbound.empty():
            frame = self.inbound.get_nowait()
            if frame is not None:
                frames.append(frame)
        return frames

    async def read(self) -> None:
        """The client's frames into the queue, until it disconnects."""
        while True:
            try:
                message = await self.websocket.receive()
            except Exception:
                message = {"type": "websocket.disconnect", "code": ABNORMAL_CLOSURE}
            if message["type"] == "websocket.disconnect":
                self.client_close_code = int(message.get("code") or ABNORMAL_CLOSURE)
                await self.inbound.put(None)
                return
            text = message.get("text")
            await self.inbound.put(text if text is not None else message.get("bytes", b""))

    async def forward(self) -> None:
        """The queued frames to the replica, one call at a time, as many as wait; once
        the client left, every frame it sent before, then the disconnect (the replica
        detaches or closes its session)."""
        try:
            gone = False
            while not gone:
                frames: list[str | bytes] = []
                frame = await self.inbound.get()
                while frame is not None:
                    frames.append(frame)
                    if self.inbound.empty():
                        break
                    frame = self.inbound.get_nowait()
                gone = frame is None
                if frames:
                    acked, self.unacked = self.unacked, 0  # the credit rides along
                    try:
                        await self.connection.send(frames, acked)
                    except ReplicaUnavailable:
                        self.unsent = frames
                        raise
            self.connection.disconnect(self.client_close_code)
        except ReplicaUnavailable:
            self.replica_failed = True

    async def write(self, stream: AsyncIterator[OutboundBatch]) -> None:
        """The replica's batches onto the socket, until the close (or an abort, or the
        end of the stream). The stream is taken as it comes, whatever the socket does, so
        an abort overtakes a write that waits on a client that is not reading; what is
        taken and not yet written is bounded by the tunnel's window."""
        batches: asyncio.Queue[OutboundBatch | None] = asyncio.Queue()
        consumer = asyncio.create_task(self._consume(stream, batches))
        websocket = self.websocket
        try:
            while (batch := await batches.get()) is not None:
                for frame in batch.frames:
                    await websocket.send_text(frame)
                    self.last_seq = _last_seq(frame, self.last_seq)
                self.unacked += batch.size
                # Never a stall: the replica waits only once a whole window is unacked.
                if self.unacked >= ACK_EVERY_BYTES:
                    acked, self.unacked = self.unacked, 0
                    self.connection.ack(acked)
                if batch.close_code is not None:
                    with contextlib.suppress(Exception):
                        await websocket.close(code=batch.close_code, reason=batch.close_reason)
                    return
        finally:
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)

    async def _consume(
        self, stream: AsyncIterator[OutboundBatch], batches: asyncio.Queue[OutboundBatch | None]
    ) -> None:
        try:
            async for batch in stream:
                self.batches += 1
                self.incarnation = batch.incarnation or self.incarnation
                self.session_id = batch.session_id or self.session_id
                if batch.abort:
                    _abort(self.websocket)
                    return
                if batch.frames or batch.final:
                    batches.put_nowait(batch)
        except ReplicaUnavailable:
            self.replica_failed = True
        finally:
            batches.put_nowait(None)

    async def report_replica_death(self, envelope: RealtimeEnvelope) -> None:
        """``session.closed`` (reason ``replica_failed``) where the client may see it,
        numbered after the last event it got; then the close frame says the same."""
        log.warning("replica %s died under session %s", self.replica, self.session_id or "(none)")
        with contextlib.suppress(Exception):
            if self.session_id is not None:
                closed = ev.SessionClosed(session_id=self.session_id, reason=REPLICA_FAILED)
                rendered = envelope.render(closed)
                if rendered is not None:
                    rendered[SEQ_KEY] = self.last_seq + 1
                    await self.websocket.send_text(encode_frame(rendered).decode())
            await self.websocket.close(code=1011, reason=REPLICA_FAILED)


def _abort(websocket: WebSocket) -> None:
    """Drop the client's socket without a close handshake (it is not reading)."""
    extension = (getattr(websocket, "scope", None) or {}).get("extensions", {})
    abort = extension.get(ABORT_EXTENSION)
    if abort is not None:
        abort["abort"]()


__all__ = [
    "REPLICA_FAILED",
    "ClusterRoute",
    "ReplicaBackend",
    "ReplicaConnection",
    "ReplicaUnavailable",
]
