"""``RealtimeRoute``: the Realtime WebSocket route, transport only.

Each socket gets a ``RealtimeConnection``, the pump of its sans-I/O ``RealtimeProtocol``.
The route moves frames from the socket into the protocol, carries what the protocol asks
of the engine (open, resume, a command) to ``DuplexOmni`` and tells the protocol how that
went; the protocol decides every frame that goes back. One session: a ``_SessionStream``,
which outlives connections, takes the handle's events as the engine delivers them and
gives them to the protocol of the connection that opened or last resumed the session
(rendered in its dialect, numbered into the session's journal as they are sent, or at
once while that connection is gone). The route keeps no session state beyond the
attachment registry (which socket serves which session, credentials, journals).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from ...engine.errors import EngineDeadError, EngineError, EngineNotRunningError
from ...protocol.duplex import DuplexCommandError
from ...protocol.duplex import events as ev
from ..duplex_omni import DuplexOmni, DuplexSessionError, DuplexSessionHandle, EventConsumer
from ..heap import HeapTrimmer
from ..openai.metrics import ServerMetrics
from .connection import RealtimeConnection
from .journal import DuplexTransportError, JournalGap
from .realtime_input import RealtimeEnvelope
from .realtime_protocol import ClientCommand, OpenRequest, RealtimeProtocol, ResumeRequest
from .session_attachment import DuplexSessionAttachmentRegistry, SessionAttachment

log = logging.getLogger(__name__)

REALTIME_SUBPROTOCOL = "realtime"
# The code of every refusal and session end caused by an engine that can serve no more.
ENGINE_UNAVAILABLE = "engine_unavailable"
# The engine's resume refusals, as the wire says them.
_RESUME_REFUSALS = {
    "session_resume_conflict": "session_resume_conflict",
    "unknown_session": "session_resume_expired",
    "session_closed": "session_resume_expired",
}


class RealtimeRoute:
    """Serves ``/v1/realtime`` and ``/v1/duplex`` for one ``DuplexOmni``."""

    def __init__(
        self,
        omni: DuplexOmni,
        *,
        config_timeout_s: float = 10.0,
        metrics: ServerMetrics | None = None,
    ) -> None:
        runtime = omni.runtime_config
        self.omni = omni
        self.metrics = metrics or ServerMetrics()
        self.metrics.journal_bytes.set_function(self._journal_bytes)
        self.config_timeout_s = config_timeout_s
        # A socket's unsent events are bounded like a handle's outbox (decision 13), in
        # bytes by a few seconds of audio: beyond that its client is not reading.
        self.max_outbound_events = runtime.max_outbox_events_per_session
        self.max_outbound_bytes = runtime.max_unsent_output_bytes_per_session
        self.registry = DuplexSessionAttachmentRegistry(
            replay_ttl_s=runtime.resume_replay_ttl_s,
            replay_max_bytes_per_session=runtime.resume_replay_max_bytes_per_session,
        )
        self._shutting_down = False
        self._tasks: set[asyncio.Task[None]] = set()
        # Once a session's buffers are freed, the C heap gives their pages back.
        self.heap = HeapTrimmer()

    # ---- one connection ---------------------------------------------------------------

    async def handle(self, websocket: WebSocket, *, duplex_route: bool = False) -> None:
        """Serve one WebSocket; ``duplex_route``: it came in on ``/v1/duplex``."""
        try:
            envelope = RealtimeEnvelope.from_request(
                websocket.query_params,
                websocket.headers.items(),
                _offered(websocket),
                duplex_route=duplex_route,
            )
        except DuplexCommandError as exc:
            await websocket.accept()
            await websocket.send_text(RealtimeEnvelope().error_frame_for(exc).decode())
            await websocket.close(code=1008)
            return
        subprotocol = REALTIME_SUBPROTOCOL if REALTIME_SUBPROTOCOL in _offered(websocket) else None
        await websocket.accept(subprotocol=subprotocol)
        conn = RealtimeConnection(
            websocket,
            envelope,
            max_events=self.max_outbound_events,
            max_bytes=self.max_outbound_bytes,
            on_overflow=self._overflowed,
            on_sent=self.metrics.event_sent,
            on_dropped=self.metrics.outbox_drops.inc,
            on_event=self.metrics.engine_event,
        )
        conn.start()
        session_id: str | None = None
        try:
            session_id = await self._handshake(websocket, conn)
            if session_id is not None:
                await self._read(websocket, conn, session_id)
        except WebSocketDisconnect:
            pass
        except Exception as exc:
            log.exception("realtime connection failed")
            conn.protocol.error("realtime_input_failed", str(exc))
        finally:
            await self._disconnected(conn, session_id)

    async def _receive(self, websocket: WebSocket, timeout_s: float | None) -> str | bytes | None:
        """The next frame (text or bytes); ``None`` on timeout; raises on disconnect."""
        try:
            message = await asyncio.wait_for(websocket.receive(), timeout_s)
        except TimeoutError:
            return None
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        text = message.get("text")
        return text if text is not None else message.get("bytes", b"")

    async def _handshake(self, websocket: WebSocket, conn: RealtimeConnection) -> str | None:
        protocol = conn.protocol
        request = protocol.initial_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config_timeout_s
        while request is None:
            remaining = deadline - loop.time()
            frame = await self._receive(websocket, max(0.0, remaining)) if remaining > 0 else None
            if frame is None:
                protocol.refuse("config_timeout", "Timeout waiting for session.update")
                await conn.drain()
                return None
            request = protocol.receive(frame)
        if isinstance(request, ResumeRequest):
            return await self._resume(conn, request.command)
        assert isinstance(request, OpenRequest)
        return await self._open(conn, request)

    async def _open(self, conn: RealtimeConnection, request: OpenRequest) -> str | None:
        protocol = conn.protocol
        if self._shutting_down:
            protocol.refuse(
                "server_shutting_down",
                "the server is shutting down",
                close_code=1001,
                close_reason="shutdown",
            )
            return None
        try:
            handle = await self.omni.open_session(request.payload)
        except DuplexSessionError as exc:
            self.metrics.rejected.labels(exc.code).inc()
            protocol.refuse(exc.code, str(exc), param=exc.param)
            await conn.drain()
            return None
        except (EngineDeadError, EngineNotRunningError) as exc:
            # The server's fault, not the client's; /health says the same (503).
            self.metrics.rejected.labels(ENGINE_UNAVAILABLE).inc()
            protocol.refuse(ENGINE_UNAVAILABLE, _unavailable(exc), close_code=1011)
            await conn.drain()
            return None
        session_id = handle.session_id
        self.metrics.admitted.inc()
        self.metrics.active.inc()
        resumable = bool(handle.capabilities.get("supports_session_resume"))
        token, generation = self.registry.register(
            session_id,
            resumable=resumable,
            socket=conn,
            lease_generation=handle.lease_generation,
            handle=handle,
            protocol=protocol,
        )
        protocol.opened(
            session_id,
            self.registry.journal(session_id),
            public_session=handle.open_result.public_session if handle.open_result else None,
            credentials=(generation, token) if token else None,
            rejected=request.rejected,
            opened_by=request.opened_by,
        )
        handle.deliver_to(_SessionStream(self, self.registry.get(session_id)))
        if request.then is not None:
            self._submit(protocol, handle, request.then)
        return session_id

    def _open_session(self, session_id: str | None) -> SessionAttachment | None:
        """The record of a session that has not ended (an ended one waits only for its
        last frames to go out)."""
        state = self.registry.get(session_id) if session_id else None
        return None if state is None or state.ended.is_set() else state

    def _journal_bytes(self) -> float:
        return float(sum(self.registry.journal(sid).retained_bytes for sid in list(self.registry)))

    async def _read(self, websocket: WebSocket, conn: RealtimeConnection, session_id: str) -> None:
        state = self.registry.get(session_id)
        protocol = conn.protocol
        while state is not None and not state.ended.is_set():
            frame = await self._receive(websocket, None)
            if not self.registry.is_current(session_id, conn):
                return  # another connection took the session over
            request = protocol.receive(frame)
            if isinstance(request, ClientCommand):
                self.metrics.command_received(session_id, request.command.type)
                self._submit(protocol, state.handle, request.command)

    def _submit(
        self, protocol: RealtimeProtocol, handle: DuplexSessionHandle, command: Any
    ) -> None:
        try:
            handle.submit(command)
        except DuplexSessionError as exc:
            protocol.error_for(exc, event_id=getattr(command, "event_id", None))
        except (EngineDeadError, EngineNotRunningError) as exc:
            # The engine went away under a session that has not ended yet.
            protocol.error(ENGINE_UNAVAILABLE, _unavailable(exc))

    # ---- resume and takeover ------------------------------------------------------------

    async def _resume(self, conn: RealtimeConnection, command: Any) -> str | None:
        protocol = conn.protocol
        session_id = command.session_id
        state = self._open_session(session_id)
        if state is None:
            protocol.refuse(
                "session_resume_expired",
                f"Unknown or expired duplex session: {session_id}",
                event_id=command.event_id,
            )
            return None
        protocol.envelope.dialect = state.protocol.envelope.dialect
        previous = self.registry.socket_of(session_id)
        try:
            # Nothing changes for the attached socket until the resume is proven good.
            grant = self.registry.authenticate_resume(
                session_id, command.resume_token, command.last_received_server_event_seq
            )
            await self.omni.resume_session(session_id, state.handle.lease_generation)
            if isinstance(previous, RealtimeConnection):
                # What the old socket had not sent yet is numbered now, so the replay has it.
                await previous.abandon_writer()
            grant = self.registry.activate(
                grant, conn, lease_generation=state.handle.lease_generation
            )
        except JournalGap:
            protocol.resync_required(session_id, "journal_gap")
            return None
        except DuplexTransportError as exc:
            protocol.refuse(exc.code, str(exc), event_id=command.event_id)
            return None
        except DuplexSessionError as exc:
            # The engine's refusals a client can act on keep their meaning on the wire.
            code = _RESUME_REFUSALS.get(exc.code, "runtime_resume_failed")
            protocol.refuse(code, str(exc), event_id=command.event_id)
            return None
        # From ``activate`` to here nothing awaits: no live event can overtake the replay.
        handle = state.handle
        registry = self.registry
        protocol.resumed(
            session_id,
            registry.journal(session_id),
            public_session=handle.open_result.public_session if handle.open_result else {},
            generation=grant.generation,
            resume_token=grant.new_token,
            replay=grant.replay,
            # The rotated token becomes the only valid one once the client has it.
            after_resumed_sent=lambda: registry.confirm_resume(session_id, grant.generation),
        )
        state.protocol = protocol
        self.metrics.resumes.inc()
        old = grant.previous_socket
        if isinstance(old, RealtimeConnection):
            replaced = protocol.replaced_frame(session_id, grant.previous_generation)
            await old.abandon(1000, "session_replaced", last_frame=replaced)
        return session_id

    # ---- the end of a session -----------------------------------------------------------

    def _session_ended(self, state: SessionAttachment) -> None:
        """The session's terminal event was handed on (or the engine died): close its
        socket once that is sent, then forget it."""
        if state.ended.is_set():
            return
        state.ended.set()
        self.metrics.session_ended(state.session_id)
        task = asyncio.get_running_loop().create_task(self._finish(state))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, state: SessionAttachment) -> None:
        session_id = state.session_id
        conn = self.registry.socket_of(session_id)
        if isinstance(conn, RealtimeConnection):
            # The terminal event is numbered as it is sent: keep the journal until then.
            conn.protocol.close_after_pending(1000, state.terminal_reason[:120])
            await conn.drain()
        self.registry.forget(session_id)
        self.heap.soon()

    # ---- disconnects ------------------------------------------------------------------

    def _overflowed(self, conn: RealtimeConnection) -> None:
        """The client stopped reading (DESIGN decision 13): its socket was aborted as its
        queue passed the bound; now its session is detached (resumable) or closed, as
        for a dropped socket. One log line per episode."""
        session_id = conn.protocol.session_id
        state = self._open_session(session_id)
        current = state is not None and self.registry.is_current(session_id, conn)
        log.warning(
            "session %s: client stopped reading (%d events, %d bytes unsent, bounds %d / %d); "
            "socket %s, session %s",
            session_id or "(none)",
            conn.overflow_events,
            conn.overflow_bytes,
            self.max_outbound_events,
            self.max_outbound_bytes,
            "aborted" if conn.aborted else "closing",
            ("detached" if state.resumable else "closed") if current else "not attached to it",
        )
        task = asyncio.get_running_loop().create_task(self._disconnected(conn, session_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _disconnected(self, conn: RealtimeConnection, session_id: str | None) -> None:
        state = self._open_session(session_id)
        if state is not None and self.registry.detach(session_id, conn):
            # The lease this socket held, read before any await: a resume from another
            # connection may take a newer one while this one is being closed.
            lease = self.registry.lease_generation(session_id)
            await conn.abandon(1001, "detached")
            with contextlib.suppress(EngineError, DuplexSessionError):
                if state.resumable:
                    await self.omni.detach_session(session_id, lease)
                else:
                    await self.omni.close_session(session_id, "disconnect")
            # The socket's queue and buffers are gone now, whatever the session does next.
            self.heap.soon()
            return
        if not conn.closed:
            conn.protocol.close_after_pending(1000, "")
            await conn.drain(1.0)

    async def shutdown(self) -> None:
        """Every open session gets ``session.closed`` (reason ``shutdown``), then its socket
        closes; sessions that had ended already finish sending their last events."""
        self._shutting_down = True
        if self._tasks:
            # Sessions a dead engine ended just before: their close must not be cut short.
            await asyncio.wait(list(self._tasks), timeout=5.0)
        states = [
            (session_id, state)
            for session_id in list(self.registry)
            if (state := self._open_session(session_id)) is not None
        ]
        conns = [self.registry.socket_of(session_id) for session_id, _ in states]
        for session_id, _ in states:
            with contextlib.suppress(EngineError, DuplexSessionError):
                await self.omni.close_session(session_id, "shutdown")
        for (_, state), conn in zip(states, conns, strict=True):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(state.ended.wait(), 5.0)
            if isinstance(conn, RealtimeConnection):
                await conn.drain(2.0)
        self.heap.close()


def _unavailable(exc: EngineDeadError | EngineNotRunningError) -> str:
    reason = exc.reason if isinstance(exc, EngineDeadError) else str(exc)
    return f"the model engine is unavailable: {reason}"


def _offered(websocket: WebSocket) -> list[str]:
    raw = websocket.headers.get("sec-websocket-protocol", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


class _SessionStream(EventConsumer):
    """One session's events on their way out, pushed by the engine as they arrive, to the
    protocol of the connection that opened or last resumed the session. Its queue is the
    one bounded buffer between the engine and the client (numbering as events leave,
    dropping the unsent audio of a cancelled response); once that connection is gone it
    numbers them straight into the journal, for a resume to replay."""

    def __init__(self, route: RealtimeRoute, state: SessionAttachment):
        self.route = route
        self.session_id = state.session_id
        self.state = state

    def on_event(self, event: Any) -> None:
        state = self.state
        state.protocol.deliver(event)
        if isinstance(event, ev.SessionClosed):
            state.terminal_reason = str(getattr(event, "reason", "") or state.terminal_reason)
            self.route._session_ended(state)

    def on_error(self, error: BaseException) -> None:
        log.warning("session %s: engine ended: %s", self.session_id, error)
        if isinstance(error, EngineDeadError):
            # No session.closed is coming: the close frame is where a client learns why.
            self.state.terminal_reason = ENGINE_UNAVAILABLE
        self.route._session_ended(self.state)

    def backlogged(self) -> bool:
        # Over half its bound waits for the socket: the pump lets the writer run before
        # it hands over more, so a burst (a model faster than real time, no pacing) never
        # reaches the bound of a client that reads.
        return self.state.protocol.backlogged
