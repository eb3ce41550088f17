"""``RealtimeRoute``: the Realtime WebSocket route, transport only.

One connection: accept, handshake (open with ``session.update`` / a first command /
``?model=``, or ``session.resume``), then a reader loop that decodes frames into typed
commands for the session's handle. One session: a ``_SessionStream``, which outlives
connections, takes the handle's events as the engine delivers them (no outbox of its own
in between), renders them in the session's dialect and hands them to whichever
connection serves the session now (numbered and journaled as they are sent), or to the
journal alone while the session is detached. The session renders through the envelope of
the connection that opened or last resumed it: its dialect, and whether our Tier 3 event
types go out at all (``RealtimeEnvelope.render``). The route keeps no session state beyond
the attachment registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from ...engine.duplex.messages import DuplexSessionError
from ...engine.errors import EngineError
from ...protocol.duplex import DuplexCommandError
from ...protocol.duplex import commands as cmd
from ...protocol.duplex import events as ev
from ..duplex_omni import DuplexOmni, DuplexSessionHandle, EventConsumer
from ..openai.metrics import ServerMetrics
from .connection import RealtimeConnection
from .journal import DuplexTransportError, JournalGap
from .realtime_input import RealtimeEnvelope, encode_frame
from .session_attachment import DuplexSessionAttachmentRegistry

log = logging.getLogger(__name__)

REALTIME_SUBPROTOCOL = "realtime"


@dataclass(slots=True)
class _Session:
    handle: DuplexSessionHandle
    envelope: RealtimeEnvelope
    resumable: bool
    credentials: tuple[int, str] | None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    # Why the session ended, for the close frame every client gets (stock ones too).
    terminal_reason: str = "session_closed"
    # Errors for fields of the opening session.update that were not applied: they follow
    # session.created, like the errors of any later update follow its session.updated.
    opening_errors: list[dict[str, Any]] = field(default_factory=list)


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
        # A socket's unsent events are bounded like a handle's outbox (decision 13).
        self.max_outbound_events = runtime.max_outbox_events_per_session
        self.max_outbound_bytes = runtime.max_outbox_bytes_per_session
        self.registry = DuplexSessionAttachmentRegistry(
            replay_ttl_s=runtime.resume_replay_ttl_s,
            replay_max_bytes_per_session=runtime.resume_replay_max_bytes_per_session,
        )
        self._sessions: dict[str, _Session] = {}
        self._shutting_down = False
        self._tasks: set[asyncio.Task[None]] = set()

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
            max_events=self.max_outbound_events,
            max_bytes=self.max_outbound_bytes,
            on_overflow=lambda c: asyncio.get_running_loop().create_task(self._overflowed(c)),
        )
        conn.start()
        session_id: str | None = None
        try:
            session_id = await self._handshake(websocket, envelope, conn)
            if session_id is not None:
                await self._read(websocket, envelope, conn, session_id)
        except WebSocketDisconnect:
            pass
        except Exception as exc:
            log.exception("realtime connection failed")
            conn.send_local(envelope.error_frame("realtime_input_failed", str(exc)))
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

    async def _handshake(
        self, websocket: WebSocket, envelope: RealtimeEnvelope, conn: RealtimeConnection
    ) -> str | None:
        payload = envelope.initial_open()
        pending: Any = None
        rejected: tuple[Any, ...] = ()
        opened_by: str | None = None  # the event_id of the session.update that opened it
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config_timeout_s
        while payload is None:
            remaining = deadline - loop.time()
            frame = await self._receive(websocket, max(0.0, remaining)) if remaining > 0 else None
            if frame is None:
                conn.send_local(
                    envelope.error_frame("config_timeout", "Timeout waiting for session.update")
                )
                conn.close_after_pending(1000, "config_timeout")
                await conn.drain()
                return None
            try:
                first = envelope.first_message(frame)
            except DuplexCommandError as exc:
                conn.send_local(envelope.error_frame_for(exc))
                continue
            if first.kind == "resume":
                return await self._resume(envelope, conn, first.command)
            payload = first.session_payload or {}
            if first.kind == "open_default":
                pending = first.command
            else:
                rejected = getattr(first.command, "rejected", ())
                opened_by = first.command.event_id
        if self._shutting_down:
            conn.send_local(
                envelope.error_frame("server_shutting_down", "the server is shutting down")
            )
            conn.close_after_pending(1001, "shutdown")
            return None
        try:
            handle = await self.omni.open_session(payload)
        except DuplexSessionError as exc:
            self.metrics.rejected.labels(exc.code).inc()
            conn.send_local(envelope.error_frame(exc.code, str(exc)))
            conn.close_after_pending(1000, exc.code)
            await conn.drain()
            return None
        session_id = handle.session_id
        self.metrics.admitted.inc()
        self.metrics.active.inc()
        resumable = bool(handle.capabilities.get("supports_session_resume"))
        token, generation = self.registry.register(
            session_id, resumable=resumable, socket=conn, lease_generation=handle.lease_generation
        )
        sequencer = self._sequencer(session_id)
        envelope.bind_session(session_id, sequencer)
        self._bind(conn, session_id, sequencer)
        if handle.open_result is not None:
            envelope.adopt_session(handle.open_result.public_session)
        state = _Session(
            handle=handle,
            envelope=envelope,
            resumable=resumable,
            credentials=(generation, token) if token else None,
            opening_errors=[
                envelope.error_event(r.code, r.message, event_id=opened_by, param=r.param)
                for r in rejected
            ],
        )
        self._sessions[session_id] = state
        handle.deliver_to(_SessionStream(self, session_id, state))
        if pending is not None:
            self._submit(envelope, conn, handle, pending)
        return session_id

    def _bind(self, conn: RealtimeConnection, session_id: str, sequencer: Any) -> None:
        metrics = self.metrics
        conn.bind(
            sequencer,
            on_sent=lambda rendered: metrics.event_sent(session_id, rendered),
            on_dropped=metrics.outbox_drops.inc,
        )

    def _journal_bytes(self) -> float:
        return float(sum(self.registry.journal(sid).retained_bytes for sid in list(self.registry)))

    def _sequencer(self, session_id: str):
        registry = self.registry

        def sequence(rendered: dict[str, Any]) -> bytes:
            return registry.sequence(session_id, rendered)

        return sequence

    async def _read(
        self,
        websocket: WebSocket,
        envelope: RealtimeEnvelope,
        conn: RealtimeConnection,
        session_id: str,
    ) -> None:
        state = self._sessions.get(session_id)
        while state is not None and not state.ended.is_set():
            frame = await self._receive(websocket, None)
            if not self.registry.is_current(session_id, conn):
                return  # another connection took the session over
            try:
                command = envelope.decode(frame)
            except DuplexCommandError as exc:
                self._error(envelope, conn, exc)
                continue
            self.metrics.command_received(session_id, command.type)
            if isinstance(command, cmd.AckEvents):
                try:
                    self.registry.ack(session_id, command.server_event_seq)
                except DuplexTransportError as exc:
                    self._error(envelope, conn, exc, event_id=command.event_id)
                continue
            self._submit(envelope, conn, state.handle, command)

    def _submit(
        self,
        envelope: RealtimeEnvelope,
        conn: RealtimeConnection,
        handle: DuplexSessionHandle,
        command: Any,
    ) -> None:
        try:
            handle.submit(command)
        except DuplexSessionError as exc:
            self._error(envelope, conn, exc, event_id=getattr(command, "event_id", None))

    def _error(
        self,
        envelope: RealtimeEnvelope,
        conn: RealtimeConnection,
        exc: Exception,
        *,
        event_id: str | None = None,
    ) -> None:
        """An error answering this connection's frame, in the session's numbered stream."""
        rendered = envelope.error_event(
            getattr(exc, "code", None) or "internal_error",
            getattr(exc, "message", None) or str(exc),
            event_id=getattr(exc, "event_id", None) or event_id,
            param=getattr(exc, "param", None),
        )
        conn.send_event(rendered)

    # ---- resume and takeover ------------------------------------------------------------

    async def _resume(
        self, envelope: RealtimeEnvelope, conn: RealtimeConnection, command: cmd.ResumeSession
    ) -> str | None:
        session_id = command.session_id
        state = self._sessions.get(session_id)
        if state is None or state.ended.is_set():
            conn.send_local(
                envelope.error_frame(
                    "session_resume_expired",
                    f"Unknown or expired duplex session: {session_id}",
                    event_id=command.event_id,
                )
            )
            conn.close_after_pending(1000, "session_resume_expired")
            return None
        envelope.dialect = state.envelope.dialect
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
            resync = ev.SessionResyncRequired(session_id=session_id, reason="journal_gap")
            conn.send_local(encode_frame(resync.to_realtime(envelope.dialect) or {}))
            conn.close_after_pending(1000, "journal_gap")
            return None
        except (DuplexTransportError, DuplexSessionError) as exc:
            code = exc.code if isinstance(exc, DuplexTransportError) else "runtime_resume_failed"
            conn.send_local(envelope.error_frame(code, str(exc), event_id=command.event_id))
            conn.close_after_pending(1000, code)
            return None
        handle = state.handle
        public = handle.open_result.public_session if handle.open_result else {}
        resumed = ev.SessionResumed(
            session_id=session_id,
            session=public,
            attachment_generation=grant.generation,
            resume_token=grant.new_token,
        )
        registry = self.registry
        conn.send_local(
            encode_frame(resumed.to_realtime(envelope.dialect) or {}),
            # The rotated token becomes the only valid one once the client has it.
            after_sent=lambda: registry.confirm_resume(session_id, grant.generation),
        )
        for data in grant.replay:
            conn.send_local(data)
        sequencer = self._sequencer(session_id)
        envelope.bind_session(session_id, sequencer)
        envelope.adopt_session(public)
        state.envelope = envelope
        self._bind(conn, session_id, sequencer)
        self.metrics.resumes.inc()
        if isinstance(grant.previous_socket, RealtimeConnection):
            replaced = ev.SessionReplaced(
                session_id=session_id, attachment_generation=grant.previous_generation
            )
            old = grant.previous_socket
            with contextlib.suppress(Exception):
                await old.websocket.send_text(
                    encode_frame(replaced.to_realtime(envelope.dialect) or {}).decode()
                )
            await old.abandon(1000, "session_replaced")
        return session_id

    # ---- the end of a session -----------------------------------------------------------

    def _session_ended(self, session_id: str, state: _Session) -> None:
        """The session's terminal event was handed on (or the engine died): close its
        socket once that is sent, then forget it."""
        if state.ended.is_set():
            return
        state.ended.set()
        self.metrics.session_ended(session_id)
        self._sessions.pop(session_id, None)
        task = asyncio.get_running_loop().create_task(self._finish(session_id, state))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, session_id: str, state: _Session) -> None:
        conn = self.registry.socket_of(session_id)
        if isinstance(conn, RealtimeConnection):
            # The terminal event is numbered as it is sent: keep the journal until then.
            conn.close_after_pending(1000, state.terminal_reason[:120])
            await conn.drain()
        self.registry.forget(session_id)

    # ---- disconnects ------------------------------------------------------------------

    async def _overflowed(self, conn: RealtimeConnection) -> None:
        """The client stopped reading: treat it as a disconnect (DESIGN decision 13)."""
        for session_id in list(self._sessions):
            if self.registry.is_current(session_id, conn):
                await self._disconnected(conn, session_id)
                return
        await conn.abandon(1008, "client_not_reading")

    async def _disconnected(self, conn: RealtimeConnection, session_id: str | None) -> None:
        state = self._sessions.get(session_id) if session_id else None
        if (
            state is not None
            and not state.ended.is_set()
            and self.registry.detach(session_id, conn)
        ):
            # The lease this socket held, read before any await: a resume from another
            # connection may take a newer one while this one is being closed.
            lease = self.registry.lease_generation(session_id)
            await conn.abandon(1001, "detached")
            with contextlib.suppress(EngineError, DuplexSessionError):
                if state.resumable:
                    await self.omni.detach_session(session_id, lease)
                else:
                    await self.omni.close_session(session_id, "disconnect")
            return
        if state is not None and state.ended.is_set():
            await conn.drain()
            return
        if not conn.closed:
            conn.close_after_pending(1000, "")
            await conn.drain(1.0)

    async def shutdown(self) -> None:
        """Every open session gets ``session.closed`` (reason ``shutdown``), then its socket
        closes."""
        self._shutting_down = True
        states = list(self._sessions.items())
        conns = [self.registry.socket_of(session_id) for session_id, _ in states]
        for session_id, _ in states:
            with contextlib.suppress(EngineError, DuplexSessionError):
                await self.omni.close_session(session_id, "shutdown")
        for (_, state), conn in zip(states, conns, strict=True):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(state.ended.wait(), 5.0)
            if isinstance(conn, RealtimeConnection):
                await conn.drain(2.0)


def _offered(websocket: WebSocket) -> list[str]:
    raw = websocket.headers.get("sec-websocket-protocol", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


class _SessionStream(EventConsumer):
    """One session's events on their way out, pushed by the engine as they arrive.

    Each is rendered through the envelope of the connection that opened or last resumed
    the session and handed to the socket that serves it now, whose queue is the one
    bounded buffer between the engine and the client (it numbers events as they are
    sent and drops the unsent audio of a cancelled response); while the session is
    detached, it is numbered into the journal at once, for a resume to replay.
    """

    def __init__(self, route: RealtimeRoute, session_id: str, state: _Session):
        self.route = route
        self.session_id = session_id
        self.state = state

    def on_event(self, event: Any) -> None:
        state = self.state
        if isinstance(event, ev.SessionClosed):
            state.terminal_reason = str(getattr(event, "reason", "") or state.terminal_reason)
        rendered = state.envelope.render(event)
        if rendered is not None:
            if isinstance(event, ev.SessionCreated) and state.credentials:
                rendered["attachment_generation"], rendered["resume_token"] = state.credentials
            after = state.opening_errors if isinstance(event, ev.SessionCreated) else []
            for out in (rendered, *after):
                self._hand_on(out)
            after.clear()
        if isinstance(event, ev.SessionClosed):
            self.route._session_ended(self.session_id, state)

    def on_error(self, error: BaseException) -> None:
        log.warning("session %s: engine ended: %s", self.session_id, error)
        self.route._session_ended(self.session_id, self.state)

    def _hand_on(self, rendered: dict[str, Any]) -> None:
        registry = self.route.registry
        conn = registry.socket_of(self.session_id)
        if isinstance(conn, RealtimeConnection) and not conn.closed:
            conn.send_event(rendered)
        else:
            registry.sequence(self.session_id, rendered)
