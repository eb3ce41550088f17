"""``DuplexClient``: the duplex client API over a Realtime WebSocket, with automatic resume.

::

    async with await DuplexClient.connect("ws://127.0.0.1:8000/v1/realtime",
                                          session=loopback_session()) as client:
        responses = client.responses()
        await client.stream_pcm(pcm, sample_rate_hz=16_000, realtime=True)
        await client.commit()
        answer = await responses.next(timeout=10)
        async for chunk in answer.audio():
            ...

What the transport adds to :class:`~omniduplex.clients.base.DuplexClientBase`:

* ``connect`` opens the session with ``session.update`` and returns after
  ``session.created`` (a refusal such as ``resource_exhausted`` raises
  :class:`DuplexProtocolError`);
* every event of the session's stream carries ``server_event_seq`` (1, 2, ...); the client
  tracks the last one it dispatched (``last_seq``, ``seq_of(event)``), drops a replayed
  duplicate, and treats a hole as fatal (:class:`DuplexResyncRequiredError`): no seq is
  ever delivered twice or skipped;
* on an unexpected socket drop it reconnects (``ReconnectPolicy``) to
  ``/v1/realtime?resume=1`` with ``session.resume`` and the last seq it processed, stores
  the rotated ``resume_token``, dispatches one :class:`ConnectionResumed` and the server's
  ``session.resumed``, then the replayed events and the live stream. Commands sent while
  it reconnects wait for the new socket; a command the dead socket may have swallowed is
  not re-sent (commands are not journaled);
* ``session.event_ack`` every ``ack_every`` events, so the server can trim its journal;
* ``session.heartbeat`` every ``heartbeat_s`` seconds when set (keeps an idle session's
  lease alive; a socket silent for three heartbeats is treated as dropped);
* ``DuplexClient.resume(url, session_id, resume_token, last_seq)`` re-attaches to a session
  from another client or process (persist ``session_id``, ``resume_token`` and
  ``last_seq``; the token rotates on every resume).

``aclose()`` releases the socket without closing the session: a resumable session then
waits out the server's disconnect grace for a resume. ``close()`` (and leaving
``async with``) ends the session. A takeover by another connection ends this client with
``closed_reason == "session_replaced"``.

This module depends only on the standard library, ``websockets``, ``pybase64`` (through
the codec) and ``omniduplex.protocol`` (a test checks that importing it loads no engine,
entrypoint or model module).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import urllib.parse
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal, Self

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.protocol import State

from ..protocol.duplex import RealtimeCommand
from .base import DuplexClientBase
from .events import (
    ERROR,
    SESSION_CREATED,
    SESSION_RESUMED,
    TERMINAL_TYPES,
    DuplexConnectionError,
    DuplexProtocolError,
    parse_server_event,
)
from .reconnect import ReconnectPolicy

log = logging.getLogger(__name__)

__all__ = [
    "FATAL_RESUME_CODES",
    "ConnectionResumed",
    "DuplexClient",
    "DuplexResumeError",
    "DuplexResyncRequiredError",
    "ReconnectPolicy",
    "realtime_url",
]

SEQ_KEY: Final = "server_event_seq"
SESSION_REPLACED: Final = "session.replaced"
SESSION_RESYNC_REQUIRED: Final = "session.resync_required"
#: Resume refusals that no retry can fix.
FATAL_RESUME_CODES: Final[frozenset[str]] = frozenset(
    {
        "invalid_session_resume",
        "session_resume_expired",
        "unsupported_session_resume",
        "invalid_resume_token",
        "session_resume_conflict",
        "unauthorized",
        "session_required",
    }
)
DEFAULT_PATH: Final = "/v1/realtime"
MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
# Event ids whose seq ``seq_of`` can still answer.
_KEPT_SEQS = 8192
# A socket silent for max(3 heartbeats, this) is taken for dead.
_MIN_DEAD_SOCKET_S = 5.0
Dialect = Literal["ga", "beta"]


# ---- errors and client-side events ------------------------------------------------------


class DuplexResumeError(DuplexConnectionError, DuplexProtocolError):
    """The server refused a ``session.resume`` (``code``: ``invalid_resume_token``,
    ``session_resume_expired``, ...). Both a connection error (the session is out of
    reach) and a protocol error (the server's answer, with its ``code``)."""


class DuplexResyncRequiredError(DuplexResumeError):
    """The stream cannot continue exactly: the server answered ``session.resync_required``
    (``reason`` ``journal_gap``: events after the client's last seq were trimmed), or the
    client saw a hole in ``server_event_seq`` (``reason`` ``seq_gap``). Start a new
    session."""

    def __init__(self, message: str, *, reason: str, event: Any = None) -> None:
        super().__init__(message, code=reason, event=event)
        self.reason = reason


@dataclass(slots=True)
class ConnectionResumed:
    """Client-side event: the socket dropped and the session was resumed.

    Dispatched once per successful automatic resume, right before the server's
    ``session.resumed`` and the replay of every event after ``last_seq``.
    """

    type: ClassVar[str] = "connection.resumed"

    session_id: str | None
    attempt: int
    last_seq: int
    attachment_generation: int | None
    cause: str = ""
    event_id: str | None = None
    epoch: int | None = None

    def to_realtime(self, dialect: str = "ga") -> dict[str, Any]:
        return {
            "type": self.type,
            "session_id": self.session_id,
            "attempt": self.attempt,
            "last_seq": self.last_seq,
            "attachment_generation": self.attachment_generation,
            "cause": self.cause,
        }


class _RetryableResume(Exception):
    """A resume attempt failed in a way a later attempt may not."""


# ---- URLs ---------------------------------------------------------------------------------


def realtime_url(
    url: str, *, resume: bool = False, dialect: Dialect = "ga", extensions: bool = True
) -> str:
    """The WebSocket URL to dial: ``http(s)`` becomes ``ws(s)``, an empty path becomes
    ``/v1/realtime``, ``resume=1`` is added for a resume (dropping ``autostart``),
    ``dialect=beta`` for beta, ``duplex=1`` (our Tier 3 events: listen/speak decisions,
    ``session.closed``, ...) unless ``extensions`` is false or the caller set ``duplex``.
    The caller's other query parameters are kept. (The model goes into
    ``session.update``, not the query: ``?model=`` alone would autostart a default
    session.)"""
    parts = urllib.parse.urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "": "ws"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss") or not parts.netloc:
        raise ValueError(f"not a ws://, wss://, http:// or https:// URL: {url!r}")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_PATH
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    if resume:
        query["resume"] = "1"
        query.pop("autostart", None)
    if dialect == "beta":
        query.setdefault("dialect", "beta")
    if extensions:
        query.setdefault("duplex", "1")
    return urllib.parse.urlunsplit(
        (scheme, parts.netloc, path, urllib.parse.urlencode(query), parts.fragment)
    )


# ---- the client ---------------------------------------------------------------------------


class DuplexClient(DuplexClientBase):
    """A duplex session over a Realtime WebSocket (see the module docstring).

    Build one with :meth:`connect` (a new session) or :meth:`resume` (an existing one).
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        dialect: Dialect = "ga",
        reconnect: ReconnectPolicy | None = ReconnectPolicy(),
        heartbeat_s: float | None = None,
        handshake_timeout_s: float = 30.0,
        ack_every: int | None = 64,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if dialect not in ("ga", "beta"):
            raise ValueError("dialect must be 'ga' or 'beta'")
        if heartbeat_s is not None and heartbeat_s <= 0:
            raise ValueError("heartbeat_s must be positive")
        if ack_every is not None and ack_every < 1:
            raise ValueError("ack_every must be positive")
        self.url = url
        self.api_key = api_key
        self.dialect: Dialect = dialect
        self.reconnect = reconnect
        self.heartbeat_s = heartbeat_s
        self.handshake_timeout_s = handshake_timeout_s
        self.ack_every = ack_every
        #: Successful automatic resumes, and replayed duplicates dropped.
        self.resumes = 0
        self.duplicates_dropped = 0
        self.heartbeats_sent = 0
        self._ws: ClientConnection | None = None
        self._resume_token: str | None = None
        self._attachment_generation: int | None = None
        self._last_seq = 0
        self._acked_seq = 0
        self._seqs: OrderedDict[str, int] = OrderedDict()
        self._pending: deque[Any] = deque()
        self._reconnecting = False
        self._closing = False
        self._released = False
        self._socket_changed = asyncio.Event()
        self._last_rx = time.monotonic()
        self._heartbeat: asyncio.Task[None] | None = None
        self._replaced_event: Any = None

    # ---- construction -------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        session: Mapping[str, Any] | None = None,
        model: str | None = None,
        api_key: str | None = None,
        dialect: Dialect = "ga",
        reconnect: ReconnectPolicy | None = ReconnectPolicy(),
        heartbeat_s: float | None = None,
        handshake_timeout_s: float = 30.0,
        **kwargs: Any,
    ) -> Self:
        """Open a new session: ``session.update`` with ``session`` (plus ``model``), then
        wait for ``session.created``.

        Raises :class:`DuplexProtocolError` when the server refuses the session (e.g.
        ``resource_exhausted``), :class:`DuplexConnectionError` when the socket cannot
        be opened or dies first, ``TimeoutError`` after ``handshake_timeout_s``.
        """
        client = cls(
            url,
            api_key=api_key,
            dialect=dialect,
            reconnect=reconnect,
            heartbeat_s=heartbeat_s,
            handshake_timeout_s=handshake_timeout_s,
            **kwargs,
        )
        payload = dict(session or {})
        if model is not None:
            payload["model"] = model
        try:
            client._install(await client._dial(resume=False))
            client.start()
            # The server may have refused us and closed already: its error event (read
            # before the close) says why, and wait_for raises it.
            with contextlib.suppress(DuplexConnectionError):
                await client.send({"type": "session.update", "session": payload})
            await client.wait_for(SESSION_CREATED, handshake_timeout_s, since=0)
        except BaseException:
            await client.aclose()
            raise
        client._start_heartbeat()
        return client

    @classmethod
    async def resume(
        cls,
        url: str,
        session_id: str,
        resume_token: str,
        last_seq: int = 0,
        **kwargs: Any,
    ) -> Self:
        """Re-attach to an open session (from this process or another one): the events
        after ``last_seq`` are replayed, then the live stream follows; the first event
        dispatched is the server's ``session.resumed``. Any socket still serving the
        session is told ``session.replaced`` and closed.

        Raises :class:`DuplexResumeError` (``code`` ``invalid_resume_token``,
        ``session_resume_expired`` ...), :class:`DuplexResyncRequiredError` when the
        server no longer holds every event after ``last_seq``, and
        :class:`DuplexConnectionError` when the server cannot be reached. Accepts
        ``connect``'s keyword arguments (``api_key``, ``reconnect``, ``heartbeat_s`` ...).
        """
        if last_seq < 0:
            raise ValueError("last_seq must be non-negative")
        client = cls(url, **kwargs)
        client._session_id = session_id
        client._resume_token = resume_token
        client._last_seq = client._acked_seq = last_seq
        try:
            ws, resumed = await client._resume_handshake()
        except _RetryableResume as exc:
            await client.aclose()
            raise DuplexConnectionError(f"resume of {session_id} failed: {exc}") from exc
        except BaseException:
            await client.aclose()
            raise
        client._install(ws)
        client._pending.append(resumed)
        client.start()
        client._start_heartbeat()
        return client

    # ---- state ----------------------------------------------------------------------------

    @property
    def resume_token(self) -> str | None:
        """The current resume credential (rotated on every resume); ``None`` when the
        session cannot be resumed."""
        return self._resume_token

    @property
    def last_seq(self) -> int:
        """The ``server_event_seq`` of the last event dispatched (0 before any)."""
        return self._last_seq

    @property
    def attachment_generation(self) -> int | None:
        return self._attachment_generation

    @property
    def connected(self) -> bool:
        """A socket is serving the session right now (not reconnecting, not released)."""
        ws = self._ws
        return ws is not None and _usable(ws) and not self._reconnecting and not self._ended()

    def drop_connection(self) -> None:
        """Cut the socket abruptly, as a network failure would (for demos and tests): the
        client resumes on a new socket if its policy allows. Commands still in the dead
        socket's buffers are lost, as they would be on a real failure."""
        if self._ws is not None:
            _abort(self._ws)

    def seq_of(self, event: Any) -> int | None:
        """The ``server_event_seq`` an event was delivered with (recent events only;
        ``None`` for events outside the numbered stream, such as ``session.resumed``)."""
        event_id = getattr(event, "event_id", None)
        return self._seqs.get(event_id) if isinstance(event_id, str) else None

    # ---- transport seams --------------------------------------------------------------------

    async def _send(self, command: Mapping[str, Any] | RealtimeCommand) -> None:
        payload = (
            command.to_realtime(self.dialect)
            if isinstance(command, RealtimeCommand)
            else dict(command)
        )
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        while True:
            ws = await self._current_socket()
            try:
                await ws.send(text)
                return
            except ConnectionClosed:
                # Nothing left this socket: wait for the reader's resume, then retry.
                self._check_open()
                if not self._can_resume():
                    raise DuplexConnectionError("send failed: the connection is closed") from None
                await self._socket_replaced(ws)

    async def _events(self) -> AsyncIterator[Any]:
        while True:
            while self._pending:
                yield self._pending.popleft()
            ws = self._ws
            if ws is None:
                raise DuplexConnectionError("no connection")
            try:
                frame = await ws.recv()
            except ConnectionClosed as exc:
                if self._closing:
                    return
                if self._replaced_event is not None:
                    return
                self._pending.extend(await self._recover(exc))
                continue
            self._last_rx = time.monotonic()
            if not isinstance(frame, str):
                continue  # binary frames are not part of the Realtime API
            try:
                obj = json.loads(frame)
            except ValueError:
                log.warning("ignoring a non-JSON frame")
                continue
            if not isinstance(obj, dict):
                continue
            event = self._accept(obj)
            if event is None:
                continue
            yield event
            kind = obj.get("type")
            if kind == SESSION_REPLACED:
                self._end_replaced(event)
                return
            if kind in TERMINAL_TYPES:
                return
            await self._maybe_ack(ws)

    async def aclose(self) -> None:
        """Release the socket (idempotent). The session stays open on the server (a
        resumable one until its disconnect grace runs out) unless it was closed first."""
        if self._released:
            return
        self._released = True
        self._closing = True
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await heartbeat
        await self._stop_reader(0.0)
        ws, self._ws = self._ws, None
        self._signal()
        if ws is not None:
            await _close_socket(ws)

    # ---- receiving ------------------------------------------------------------------------

    def _accept(self, obj: dict[str, Any]) -> Any:
        """The typed event for one wire object, or ``None`` for a replayed duplicate."""
        seq = obj.get(SEQ_KEY)
        has_seq = isinstance(seq, int) and not isinstance(seq, bool)
        if has_seq:
            if seq <= self._last_seq:
                self.duplicates_dropped += 1
                return None
            if seq != self._last_seq + 1:
                error = DuplexResyncRequiredError(
                    f"server_event_seq jumped from {self._last_seq} to {seq}: events were lost",
                    reason="seq_gap",
                )
                raise error
        event = parse_server_event(obj)
        kind = obj.get("type")
        if has_seq:
            self._last_seq = seq
            event_id = obj.get("event_id")
            if isinstance(event_id, str):
                self._seqs[event_id] = seq
                if len(self._seqs) > _KEPT_SEQS:
                    self._seqs.popitem(last=False)
        if kind in (SESSION_CREATED, SESSION_RESUMED):
            self._adopt_credentials(event)
        elif kind == SESSION_RESYNC_REQUIRED:
            self._resume_token = None  # what follows is not replayable: never resume
        elif kind == SESSION_REPLACED:
            self._replaced_event = event
        return event

    def _adopt_credentials(self, event: Any) -> None:
        token = getattr(event, "resume_token", None)
        if isinstance(token, str) and token:
            self._resume_token = token
        generation = getattr(event, "attachment_generation", None)
        if isinstance(generation, int):
            self._attachment_generation = generation
        session = getattr(event, "session", None)
        if isinstance(session, Mapping) and isinstance(session.get("id"), str):
            self._session_id = session["id"]

    async def _maybe_ack(self, ws: ClientConnection) -> None:
        if self.ack_every is None or self._last_seq - self._acked_seq < self.ack_every:
            return
        await self._ack(ws)

    async def _ack(self, ws: ClientConnection) -> None:
        if not _usable(ws):
            return  # acked on the resumed socket instead
        seq = self._last_seq
        frame = json.dumps({"type": "session.event_ack", SEQ_KEY: seq}, separators=(",", ":"))
        try:
            await ws.send(frame)
        except ConnectionClosed:
            return  # the reader's next recv sees the drop and resumes
        self._acked_seq = seq

    def _end_replaced(self, event: Any) -> None:
        """Another connection took the session over: this client is done with it."""
        if self._ended():
            return
        self.closed = True
        self.closed_event = event
        self.closed_reason = SESSION_REPLACED.replace(".", "_")
        self._resume_token = None
        self._finalize(self.closed_reason)

    # ---- resume ----------------------------------------------------------------------------

    def _can_resume(self) -> bool:
        return (
            self.reconnect is not None
            and self._resume_token is not None
            and self._session_id is not None
            and not self._closing
            and not self._ended()
        )

    async def _recover(self, cause: BaseException) -> list[Any]:
        """The socket dropped: resume per the policy; the events to dispatch first."""
        if not self._can_resume():
            if self._resume_token is None and self._session_id is not None:
                raise DuplexConnectionError(f"connection lost ({cause}); the session cannot resume")
            raise DuplexConnectionError(f"connection lost: {cause}")
        assert self.reconnect is not None
        old = self._ws
        self._reconnecting = True
        last_error: BaseException = cause
        try:
            if old is not None:
                await _close_socket(old)
            for attempt in range(self.reconnect.max_attempts):
                delay = self.reconnect.delay(attempt)
                if delay > 0:
                    await asyncio.sleep(delay)
                if self._closing or self._ended():
                    raise DuplexConnectionError("client closed while reconnecting")
                resumed_after = self._last_seq
                try:
                    ws, resumed = await self._resume_handshake()
                except _RetryableResume as exc:
                    last_error = exc
                    log.info("resume attempt %d failed: %s", attempt + 1, exc)
                    continue
                self.resumes += 1
                self._install(ws)
                notice = ConnectionResumed(
                    session_id=self._session_id,
                    attempt=attempt + 1,
                    last_seq=resumed_after,
                    attachment_generation=self._attachment_generation,
                    cause=repr(cause),
                )
                return [notice, resumed]
            raise DuplexConnectionError(
                f"connection lost and {self.reconnect.max_attempts} resume attempts failed: "
                f"{last_error}"
            )
        finally:
            self._reconnecting = False
            self._signal()

    async def _resume_handshake(self) -> tuple[ClientConnection, Any]:
        """One ``session.resume`` on a new socket: ``(socket, session.resumed event)``.

        Raises ``_RetryableResume`` for what another attempt may fix, and
        :class:`DuplexResumeError` / :class:`DuplexResyncRequiredError` otherwise.
        """
        ws = await self._dial(resume=True)
        try:
            await ws.send(
                json.dumps(
                    {
                        "type": "session.resume",
                        "event_id": "evt_" + uuid.uuid4().hex,
                        "session_id": self._session_id,
                        "resume_token": self._resume_token,
                        "last_received_server_event_seq": self._last_seq,
                    }
                )
            )
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.handshake_timeout_s
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise _RetryableResume("no session.resumed before the handshake timeout")
                frame = await asyncio.wait_for(ws.recv(), remaining)
                if not isinstance(frame, str):
                    continue
                obj = json.loads(frame)
                if not isinstance(obj, dict):
                    continue
                kind = obj.get("type")
                if kind == SESSION_RESUMED:
                    event = parse_server_event(obj)
                    self._adopt_credentials(event)
                    self._last_rx = time.monotonic()
                    return ws, event
                if kind == SESSION_RESYNC_REQUIRED:
                    event = parse_server_event(obj)
                    self._resume_token = None
                    reason = str(obj.get("reason") or "journal_gap")
                    raise DuplexResyncRequiredError(
                        f"session {self._session_id} cannot replay the events after seq "
                        f"{self._last_seq} ({reason}); start a new session",
                        reason=reason,
                        event=event,
                    )
                if kind == ERROR:
                    error = DuplexProtocolError.from_event(obj)
                    if error.code in FATAL_RESUME_CODES:
                        raise DuplexResumeError(
                            error.message,
                            code=error.code,
                            param=error.param,
                            event_id=error.event_id,
                            error_type=error.error_type,
                            event=parse_server_event(obj),
                        )
                    raise _RetryableResume(f"{error.code}: {error.message}")
                log.debug("ignoring %s before session.resumed", kind)
        except (ConnectionClosed, TimeoutError, ValueError) as exc:
            await _close_socket(ws)
            raise _RetryableResume(f"resume handshake failed: {exc!r}") from exc
        except BaseException:
            await _close_socket(ws)
            raise

    # ---- sockets ---------------------------------------------------------------------------

    async def _dial(self, *, resume: bool) -> ClientConnection:
        url = realtime_url(self.url, resume=resume, dialect=self.dialect)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        try:
            return await ws_connect(
                url,
                additional_headers=headers,
                max_size=MAX_FRAME_BYTES,
                open_timeout=self.handshake_timeout_s,
                compression=None,
            )
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            if resume and not isinstance(exc, InvalidURI):
                raise _RetryableResume(f"connect to {url} failed: {exc!r}") from exc
            raise DuplexConnectionError(f"connect to {url} failed: {exc!r}") from exc

    def _install(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._acked_seq = min(self._acked_seq, self._last_seq)
        self._last_rx = time.monotonic()
        self._signal()

    def _signal(self) -> None:
        """Wake everything waiting for a socket change (the event is never left set)."""
        changed, self._socket_changed = self._socket_changed, asyncio.Event()
        changed.set()

    async def _current_socket(self) -> ClientConnection:
        """The socket to send on; waits while the reader resumes."""
        while True:
            self._check_open()
            ws = self._ws
            if ws is not None and not self._reconnecting and _usable(ws):
                return ws
            if self._released:
                raise DuplexConnectionError("send failed: the client was closed")
            await self._socket_changed.wait()

    async def _socket_replaced(self, old: ClientConnection) -> None:
        """Wait until the reader swapped ``old`` out (or the client ended)."""
        while self._ws is old and not self._ended() and not self._released:
            await self._socket_changed.wait()

    def _finalize(self, reason: str | None, error: BaseException | None = None) -> None:
        super()._finalize(reason, error)
        self._signal()  # wake senders waiting for a socket

    # ---- heartbeat -------------------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        if self.heartbeat_s is not None and self._heartbeat is None:
            self._heartbeat = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(self.heartbeat_s), name=f"duplex-heartbeat-{id(self):x}"
            )

    async def _heartbeat_loop(self, interval: float) -> None:
        while not self._ended() and not self._released:
            await asyncio.sleep(interval)
            ws = self._ws
            if ws is None or self._reconnecting or not _usable(ws):
                continue
            silent_s = time.monotonic() - self._last_rx
            if silent_s > max(3 * interval, _MIN_DEAD_SOCKET_S):
                # Nothing arrived for three heartbeats (not even their acks): a half-open
                # socket. Abort it; the reader resumes on a new one.
                log.warning("no traffic for %.1f s: dropping the socket", silent_s)
                _abort(ws)
                continue
            if self._last_seq > self._acked_seq:
                await self._ack(ws)
            frame = json.dumps(
                {"type": "session.heartbeat", "event_id": "evt_" + uuid.uuid4().hex},
                separators=(",", ":"),
            )
            with contextlib.suppress(ConnectionClosed):
                await ws.send(frame)
                self.heartbeats_sent += 1


def _usable(ws: ClientConnection) -> bool:
    """Open, and not already torn down underneath (an aborted transport drops writes
    silently until the connection notices it is gone)."""
    transport = getattr(ws, "transport", None)
    return ws.state is State.OPEN and not (transport is not None and transport.is_closing())


def _abort(ws: ClientConnection) -> None:
    transport = getattr(ws, "transport", None)
    if transport is not None:
        transport.abort()


async def _close_socket(ws: ClientConnection, timeout_s: float = 2.0) -> None:
    try:
        await asyncio.wait_for(ws.close(), timeout_s)
    except (TimeoutError, ConnectionClosed, OSError):
        _abort(ws)
    except asyncio.CancelledError:
        _abort(ws)
        raise
