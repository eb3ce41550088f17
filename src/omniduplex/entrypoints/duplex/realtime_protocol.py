"""One Realtime socket without I/O: frames in, requests and frames out (sans-I/O).

``RealtimeProtocol`` is the whole of one connection's rules, in the manner of
``websockets``' protocol core. It composes:

* the ``RealtimeEnvelope`` (inbound): dialect, the handshake state machine, decoding a
  frame into a typed command, rendering an engine event for this connection;
* the ``RealtimeOutbound`` (outbound): the one bounded queue of what the socket still owes
  its client, cancel overtaking unsent audio, the close;
* the session's ``ReplayJournal``, once bound: every event of the session's stream is
  numbered (``server_event_seq``) and kept as it leaves, so a resume replays it exactly;
  ``session.event_ack`` trims it.

The caller feeds it what the socket delivered (``receive``) and what the engine emitted
(``deliver``) and gets back what needs the engine (an ``OpenRequest``, a
``ResumeRequest`` or a ``ClientCommand``) and, from ``next_frame``, what to write. Every
answer the protocol can give by itself (a refused frame, an ack, a timeout) it queues as
a frame and returns nothing. The asyncio route only pumps: socket -> ``receive`` ->
engine, engine -> ``deliver``, ``next_frame`` -> socket.

The journal outlives the socket (it is the session's, kept by the attachment registry);
a protocol that is ``closed`` still numbers what it is given straight into it, so a
detached session's events wait there, in order, for the connection that resumes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...protocol.duplex import DuplexCommandError, RealtimeCommand
from ...protocol.duplex import events as ev
from .journal import DuplexTransportError, ReplayJournal
from .outbound import CloseFrame, Frame, RealtimeOutbound
from .realtime_input import HandshakeState, RealtimeEnvelope, encode_frame

#: Told after anything was queued: whether the queue is now over its bound.
QueuedHook = Callable[[bool], None]
#: Told of each session event as it leaves: the session's id and the rendered event.
SentHook = Callable[[str, dict[str, Any]], None]
# Sees every engine event of the session before it is rendered (metrics of events a
# connection that did not opt into the extensions never receives).
EventHook = Callable[[ev.RealtimeEvent], None]


@dataclass(frozen=True, slots=True)
class OpenRequest:
    """Open a session with ``payload``, then submit ``then`` (a first command that was
    not ``session.update``). ``opened_by`` is the opening ``session.update``'s event_id;
    ``rejected`` its fields the codec refused (sent as errors after ``session.created``)."""

    payload: dict[str, Any]
    then: RealtimeCommand | None = None
    opened_by: str | None = None
    rejected: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class ResumeRequest:
    command: Any  # the decoded ``ResumeSession``


@dataclass(frozen=True, slots=True)
class ClientCommand:
    """A command of an open connection, for the session's engine handle."""

    command: RealtimeCommand


Request = OpenRequest | ResumeRequest | ClientCommand


class RealtimeProtocol:
    """One Realtime socket's state and rules (see the module docstring)."""

    def __init__(
        self,
        envelope: RealtimeEnvelope,
        *,
        max_events: int = 2048,
        max_bytes: int = 256 * 1024,
        on_queued: QueuedHook | None = None,
        on_sent: SentHook | None = None,
        on_dropped: Callable[[int], None] | None = None,
        on_event: EventHook | None = None,
    ) -> None:
        self.envelope = envelope
        self._on_event = on_event
        self.outbound = RealtimeOutbound(max_events=max_events, max_bytes=max_bytes)
        self.journal: ReplayJournal | None = None
        self.session_id: str | None = None
        self._on_queued = on_queued
        self._on_sent = on_sent
        self._on_dropped = on_dropped
        # Extension fields for session.created, and the opening update's refused fields,
        # which follow it (like a later update's errors follow its session.updated).
        self._credentials: tuple[int, str] | None = None
        self._opening_errors: list[dict[str, Any]] = []

    @property
    def handshake(self) -> HandshakeState:
        return self.envelope.state

    @property
    def closed(self) -> bool:
        return self.outbound.closed

    # ---- frames in ----------------------------------------------------------------

    def initial_open(self) -> OpenRequest | None:
        """Decision 17: the session to open before anything is read (``?model=``)."""
        payload = self.envelope.initial_open()
        return None if payload is None else OpenRequest(payload)

    def receive(self, frame: str | bytes) -> Request | None:
        """One frame from the client: what it needs from the engine, or ``None`` when
        the protocol answered it alone (a refusal, an ack)."""
        envelope = self.envelope
        if not envelope.opened:
            try:
                first = envelope.first_message(frame)
            except DuplexCommandError as exc:
                self.error_for(exc)
                return None
            if first.kind == "resume":
                return ResumeRequest(first.command)
            payload = first.session_payload or {}
            if first.kind == "open_default":
                return OpenRequest(payload, then=first.command)
            command = first.command
            return OpenRequest(
                payload,
                opened_by=command.event_id,
                rejected=tuple(getattr(command, "rejected", ())),
            )
        try:
            command = envelope.decode(frame)
        except DuplexCommandError as exc:
            self.error_for(exc)
            return None
        if command.type == "session.event_ack":
            self._ack(command)
            return None
        return ClientCommand(command)

    def _ack(self, command: Any) -> None:
        if self.journal is None:
            return
        try:
            self.journal.ack(command.server_event_seq)
        except DuplexTransportError as exc:
            self.error_for(exc, event_id=command.event_id)

    # ---- the session ----------------------------------------------------------------

    def opened(
        self,
        session_id: str,
        journal: ReplayJournal,
        *,
        public_session: Mapping[str, Any] | None,
        credentials: tuple[int, str] | None = None,
        rejected: Iterable[Any] = (),
        opened_by: str | None = None,
    ) -> None:
        """The session this connection asked for is open: bind its journal."""
        self._bind(session_id, journal, public_session)
        self._credentials = credentials
        self._opening_errors = [
            self.envelope.error_event(r.code, r.message, event_id=opened_by, param=r.param)
            for r in rejected
        ]

    def resumed(
        self,
        session_id: str,
        journal: ReplayJournal,
        *,
        public_session: Mapping[str, Any] | None,
        generation: int,
        resume_token: str,
        replay: Iterable[bytes],
        after_resumed_sent: Callable[[], None] | None = None,
    ) -> None:
        """A resume was granted: ``session.resumed``, then the replay, then live events.
        ``after_resumed_sent`` runs once ``session.resumed`` is on the socket."""
        resumed = ev.SessionResumed(
            session_id=session_id,
            session=dict(public_session or {}),
            attachment_generation=generation,
            resume_token=resume_token,
        )
        self.send_frame(self._local(resumed), after_sent=after_resumed_sent)
        # The replay, and what follows it while it waits, is the journal's to bound.
        self.outbound.max_replay_bytes = journal.max_bytes
        for data in replay:
            self._queued(self.outbound.send_replay(data))
        self._bind(session_id, journal, public_session)

    def _bind(
        self, session_id: str, journal: ReplayJournal, public_session: Mapping[str, Any] | None
    ) -> None:
        self.envelope.bind_session(session_id)
        self.envelope.adopt_session(public_session)
        self.session_id = session_id
        self.journal = journal
        on_sent = self._on_sent
        self.outbound.bind(
            self._number,
            on_sent=None if on_sent is None else functools.partial(on_sent, session_id),
            on_dropped=self._on_dropped,
        )

    def _number(self, rendered: dict[str, Any]) -> bytes:
        assert self.journal is not None  # the outbound numbers only once bound
        # A replayed session.created must not hand out its token: a resume rotated it.
        return self.journal.append(rendered, unkept=("resume_token",))[1]

    # ---- engine events in -----------------------------------------------------------

    def deliver(self, event: ev.RealtimeEvent) -> None:
        """One engine event of the session, rendered for this connection and queued (or,
        once closed, numbered into the journal); one it must not see goes nowhere."""
        if self._on_event is not None:
            self._on_event(event)
        rendered = self.envelope.render(event)
        if rendered is None:
            return
        if isinstance(event, ev.SessionCreated):
            if self._credentials:
                rendered["attachment_generation"], rendered["resume_token"] = self._credentials
            follow, self._opening_errors = self._opening_errors, []
            self.send_event(rendered)
            for error in follow:
                self.send_event(error)
            return
        self.send_event(rendered)

    def send_event(self, rendered: dict[str, Any]) -> None:
        """One rendered event of the session's stream, numbered as it leaves."""
        self._queued(self.outbound.send_event(rendered))

    # ---- answers of its own ---------------------------------------------------------

    def error(
        self,
        code: str,
        message: str,
        *,
        event_id: str | None = None,
        param: str | None = None,
    ) -> None:
        """An ``error``: in the session's numbered stream once one is bound, else a
        transport-local frame without a seq."""
        rendered = self.envelope.error_event(code, message, event_id=event_id, param=param)
        if self.journal is not None:
            self.send_event(rendered)
        else:
            self.send_frame(encode_frame(rendered))

    def error_for(self, exc: Exception, *, event_id: str | None = None) -> None:
        """``error`` for a typed refusal (``code``, ``message``, ``event_id``, ``param``)."""
        self.error(
            getattr(exc, "code", None) or "internal_error",
            getattr(exc, "message", None) or str(exc) or "internal_error",
            event_id=getattr(exc, "event_id", None) or event_id,
            param=getattr(exc, "param", None),
        )

    def refuse(
        self,
        code: str,
        message: str,
        *,
        close_code: int = 1000,
        close_reason: str | None = None,
        **error: Any,
    ) -> None:
        """An error, then the close (its reason the code, unless given): the connection
        cannot go on."""
        self.error(code, message, **error)
        self.close_after_pending(close_code, code if close_reason is None else close_reason)

    def resync_required(self, session_id: str, reason: str) -> None:
        """The replay cannot be exact: say so and close (the client reopens)."""
        self.send_frame(self._local(ev.SessionResyncRequired(session_id=session_id, reason=reason)))
        self.close_after_pending(1000, reason)

    def replaced_frame(self, session_id: str, previous_generation: int) -> bytes:
        """``session.replaced`` for the socket a resume took the session from."""
        replaced = ev.SessionReplaced(
            session_id=session_id, attachment_generation=previous_generation
        )
        return self._local(replaced)

    def _local(self, event: ev.RealtimeEvent) -> bytes:
        return encode_frame(event.to_realtime(self.envelope.dialect) or {})

    # ---- frames out -----------------------------------------------------------------

    def send_frame(self, data: bytes, *, after_sent: Callable[[], None] | None = None) -> None:
        """A frame of the socket's own, outside the session's numbered stream."""
        self._queued(self.outbound.send_local(data, after_sent))

    def next_frame(self) -> Frame | CloseFrame | None:
        return self.outbound.next_frame()

    def close_after_pending(self, code: int = 1000, reason: str = "") -> None:
        self.outbound.close_after_pending(code, reason)
        self._queued(False)

    def abandon(self) -> None:
        """The socket is gone (or the session moved on): number what waits into the
        journal; from now on events go straight there."""
        self.outbound.abandon()

    @property
    def backlogged(self) -> bool:
        """Over half the outbound bound waits for the socket (see ``RealtimeOutbound``)."""
        return self.outbound.backlogged

    def _queued(self, over_bound: bool) -> None:
        if self._on_queued is not None:
            self._on_queued(over_bound)


__all__ = [
    "ClientCommand",
    "OpenRequest",
    "RealtimeProtocol",
    "Request",
    "ResumeRequest",
    "SentHook",
]
