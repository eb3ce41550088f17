"""``DuplexClientBase``: the client API shared by every transport, and ``ResponseHandle``.

A transport subclass supplies three seams: ``_send`` (one command, as a wire dict or an
already typed command), ``_events`` (the session's typed events, in order, ending after
``session.closed`` / ``session.expired``) and ``aclose`` (release the transport). Every
other method is built on them here, so the in-process client and the network client
behave the same.

A background reader task (started by ``start()`` / ``async with``) reads ``_events()``
and dispatches each event, in order and synchronously, to:

* the :class:`ResponseHandle` of its response (created on ``response.created``);
* every ``events()`` subscription (bounded queues: a subscriber that falls behind gets a
  :class:`DuplexEventOverflowError` at the gap, never a silent loss);
* ``responses()`` subscriptions, ``wait_for`` waiters and synchronous listeners
  (``add_listener``: what :class:`~omniduplex.clients.collector.EventCollector` uses).

Local event numbers (``mark()``) let a caller wait for an event that may already have
arrived: ``m = client.mark(); await client.commit(); await client.wait_for(..., since=m)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import Any, Self

import numpy as np

from ..protocol.duplex import RealtimeCommand, b64encode_str, encode_audio
from .events import (
    AUDIO_DELTA,
    ERROR,
    OUTPUT_ITEM_ADDED,
    RESPONSE_CREATED,
    RESPONSE_DONE,
    RESPONSE_LISTEN,
    RESPONSE_SPEAK,
    SESSION_CREATED,
    SESSION_RESUMED,
    TERMINAL_TYPES,
    TEXT_DELTA,
    TRANSCRIPT_DELTA,
    DuplexClientError,
    DuplexConnectionError,
    DuplexEventOverflowError,
    DuplexProtocolError,
    DuplexSessionClosedError,
    decode_output_audio,
    event_matcher,
    response_id_of,
)

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_OUTPUT_RATE_HZ",
    "DuplexClientBase",
    "EventSubscription",
    "ResponseHandle",
    "ResponseSubscription",
]

DEFAULT_OUTPUT_RATE_HZ = 24_000
PCM16_BYTES_PER_SAMPLE = 2
# Events kept for ``wait_for(..., since=mark)`` / ``responses(since=mark)``.
_RECENT_EVENTS = 4096
# Finished response handles the client keeps for ``response(id)`` lookups.
_KEPT_DONE_RESPONSES = 64
_SENTINEL_END = object()

Listener = Callable[[str, Any, float], None]


def pcm16_ms(nbytes: int, rate_hz: int) -> float:
    """Duration of ``nbytes`` of mono PCM16 at ``rate_hz``, in milliseconds."""
    return nbytes * 1000.0 / (rate_hz * PCM16_BYTES_PER_SAMPLE)


def as_pcm16_bytes(audio: Any, sample_rate_hz: int) -> bytes:
    """PCM16 LE bytes from bytes (taken as PCM16), int16 samples, or float samples."""
    if isinstance(audio, bytes | bytearray | memoryview):
        data = bytes(audio)
        if len(data) % PCM16_BYTES_PER_SAMPLE:
            raise ValueError("PCM16 audio must be a whole number of 2-byte samples")
        return data
    arr = np.asarray(audio)
    if arr.dtype == np.int16:
        return arr.astype("<i2", copy=False).reshape(-1).tobytes()
    return encode_audio(arr, "pcm16", sample_rate_hz)


# ---- one response ----------------------------------------------------------------------


class ResponseHandle:
    """One response, from ``response.created`` to its ``response.done``.

    ``audio()`` yields the decoded PCM16 chunks (bytes, mono, ``sample_rate_hz``) as they
    arrive; every call starts from the first chunk, so any number of readers see all of
    it. ``audio_bytes`` / ``pcm()`` are everything received so far. ``played_ms`` is the
    client's playback position: what the client acknowledged (``ack_playback``), else
    the duration of the audio received.
    """

    def __init__(
        self,
        response_id: str,
        *,
        created_event: Any = None,
        created_seq: int = 0,
        output_rate_hz: int = DEFAULT_OUTPUT_RATE_HZ,
    ) -> None:
        self.response_id = response_id
        self.created_event = created_event
        self.created_seq = created_seq
        self.item_id: str | None = None
        self.decision: str | None = None
        self.sample_rate_hz = output_rate_hz
        self.status: str | None = None
        self.status_details: Any = None
        self.done_event: Any = None
        self.done = False
        self.events: list[Any] = []
        self._chunks: list[bytes] = []
        self._audio_nbytes = 0
        self._received_ms = 0.0
        self._transcript: list[str] = []
        self._text: list[str] = []
        self._acked_ms: float | None = None
        self._changed = asyncio.Event()
        self._finished = asyncio.Event()
        if created_event is not None:
            self._feed(created_event)

    # ---- reading ---------------------------------------------------------------------

    @property
    def transcript(self) -> str:
        """The concatenated ``response.output_audio_transcript.delta`` texts."""
        return "".join(self._transcript)

    @property
    def text(self) -> str:
        """The concatenated ``response.output_text.delta`` texts."""
        return "".join(self._text)

    @property
    def audio_bytes(self) -> bytes:
        return b"".join(self._chunks)

    @property
    def chunks(self) -> list[bytes]:
        return list(self._chunks)

    def pcm(self) -> np.ndarray:
        """All audio received so far as int16 samples."""
        return np.frombuffer(self.audio_bytes, dtype="<i2").copy()

    @property
    def received_ms(self) -> float:
        """Milliseconds of audio received."""
        return self._received_ms

    @property
    def played_ms(self) -> float:
        """The playback position: the last acknowledged value, else what was received."""
        return self._received_ms if self._acked_ms is None else self._acked_ms

    @property
    def cancelled(self) -> bool:
        return self.status == "cancelled"

    async def audio(self) -> AsyncIterator[bytes]:
        """Yield each PCM16 chunk as it arrives (from the first), until the response ends."""
        index = 0
        while True:
            while index < len(self._chunks):
                chunk = self._chunks[index]
                index += 1
                yield chunk
            if self.done:
                return
            self._changed.clear()
            await self._changed.wait()

    async def wait(self, timeout: float | None = None) -> str | None:
        """Wait until the response is done; return its final status.

        Raises ``TimeoutError`` after ``timeout`` seconds. ``None`` when the session ended
        before the response did.
        """
        if not self.done:
            await asyncio.wait_for(self._finished.wait(), timeout)
        return self.status

    def __repr__(self) -> str:
        return (
            f"ResponseHandle({self.response_id!r}, decision={self.decision!r}, "
            f"status={self.status!r}, received_ms={self._received_ms:.0f})"
        )

    # ---- fed by the client's reader ----------------------------------------------------

    def _feed(self, event: Any) -> None:
        if self.done:
            return
        self.events.append(event)
        kind = event.type
        item_id = getattr(event, "item_id", None)
        if self.item_id is None and isinstance(item_id, str):
            self.item_id = item_id
        if kind == AUDIO_DELTA:
            pcm, rate = decode_output_audio(event, self.sample_rate_hz)
            self.sample_rate_hz = rate
            if self.decision is None:
                self.decision = "speak"
            if pcm:
                self._chunks.append(pcm)
                self._audio_nbytes += len(pcm)
                self._received_ms += pcm16_ms(len(pcm), rate)
        elif kind == TRANSCRIPT_DELTA:
            self._transcript.append(event.delta)
        elif kind == TEXT_DELTA:
            self._text.append(event.delta)
            if self.decision is None:
                self.decision = "speak"
        elif kind == RESPONSE_SPEAK:
            self.decision = "speak"
        elif kind == RESPONSE_LISTEN:
            if self.decision is None:
                self.decision = "listen"
        elif kind == OUTPUT_ITEM_ADDED:
            item = getattr(event, "item", None)
            if self.item_id is None and isinstance(item, Mapping):
                self.item_id = item.get("id")
        elif kind == RESPONSE_DONE:
            response = event.response if isinstance(event.response, Mapping) else {}
            self.done_event = event
            self.status = response.get("status")
            self.status_details = response.get("status_details")
            if self.decision is None and self.status == "completed":
                self.decision = "speak"
            self._finish()
        self._changed.set()

    def _ack(self, played_ms: float, *, truncate: bool) -> None:
        if truncate or self._acked_ms is None:
            self._acked_ms = float(played_ms)
        else:
            self._acked_ms = max(self._acked_ms, float(played_ms))

    def _finish(self, reason: str | None = None) -> None:
        if self.done:
            return
        if reason is not None and self.status_details is None:
            self.status_details = {"type": "session_ended", "reason": reason}
        self.done = True
        self._finished.set()
        self._changed.set()


# ---- subscriptions ---------------------------------------------------------------------


class EventSubscription:
    """One ``events()`` subscriber: every event dispatched after it was created, in order.

    An async iterator (and async context manager that unsubscribes on exit). It ends after
    the session's terminal event; if the transport failed it raises the failure; if its
    bounded queue overflowed it raises :class:`DuplexEventOverflowError` at the gap.
    """

    def __init__(self, client: DuplexClientBase, max_queued: int) -> None:
        self._client = client
        self._queue: deque[Any] = deque()
        self._max = max_queued
        self._wakeup = asyncio.Event()
        self._overflow: DuplexEventOverflowError | None = None
        self._dropped = 0
        self._finished = False
        self._ended = False
        self._error: BaseException | None = None

    def _put(self, event: Any) -> None:
        if self._overflow is not None:
            self._dropped += 1
            self._overflow.dropped = self._dropped
            return
        if len(self._queue) >= self._max:
            self._dropped = 1
            self._overflow = DuplexEventOverflowError(
                f"events() subscriber fell {self._max} events behind; events were lost",
                dropped=1,
            )
            self._wakeup.set()
            return
        self._queue.append(event)
        self._wakeup.set()

    def _end(self, error: BaseException | None = None) -> None:
        if self._error is None:
            self._error = error
        self._finished = True
        self._wakeup.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        while True:
            if self._ended:
                raise StopAsyncIteration
            if self._queue:
                return self._queue.popleft()
            # Everything before the gap was delivered: now the gap, then the end.
            if self._overflow is not None:
                self._ended = True
                self.close()
                raise self._overflow
            if self._finished:
                self._ended = True
                self.close()
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()

    def close(self) -> None:
        """Unsubscribe (idempotent)."""
        self._client._subscribers.discard(self)

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class ResponseSubscription:
    """One ``responses()`` subscriber: a :class:`ResponseHandle` per ``response.created``."""

    def __init__(self, client: DuplexClientBase) -> None:
        self._client = client
        self._queue: deque[Any] = deque()
        self._wakeup = asyncio.Event()
        self._ended = False
        self._error: BaseException | None = None

    def _put(self, handle: ResponseHandle) -> None:
        self._queue.append(handle)
        self._wakeup.set()

    def _end(self, error: BaseException | None = None) -> None:
        if self._error is None:
            self._error = error
        self._queue.append(_SENTINEL_END)
        self._wakeup.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ResponseHandle:
        while True:
            if self._ended:
                raise StopAsyncIteration
            if self._queue:
                item = self._queue.popleft()
                if item is _SENTINEL_END:
                    self._ended = True
                    self.close()
                    if self._error is not None:
                        raise self._error
                    raise StopAsyncIteration
                return item  # type: ignore[no-any-return]
            self._wakeup.clear()
            await self._wakeup.wait()

    async def next(self, timeout: float | None = None) -> ResponseHandle:
        """The next response; ``TimeoutError`` after ``timeout`` seconds,
        ``DuplexSessionClosedError`` if the session ends first."""
        try:
            return await asyncio.wait_for(self.__anext__(), timeout)
        except StopAsyncIteration:
            raise DuplexSessionClosedError(self._client.closed_reason or "closed") from None

    def close(self) -> None:
        self._client._response_subscribers.discard(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class _Waiter:
    __slots__ = ("future", "matches", "raise_on_error")

    def __init__(self, matches: Callable[[Any], bool], raise_on_error: bool) -> None:
        self.matches = matches
        self.raise_on_error = raise_on_error
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()


# ---- the client ------------------------------------------------------------------------


class DuplexClientBase(ABC):
    """The duplex client API over an abstract transport (see the module docstring)."""

    def __init__(
        self,
        *,
        max_queued_events: int = 10_000,
        output_rate_hz: int = DEFAULT_OUTPUT_RATE_HZ,
    ) -> None:
        if max_queued_events < 1:
            raise ValueError("max_queued_events must be positive")
        self.max_queued_events = max_queued_events
        self.output_rate_hz = output_rate_hz
        self._session_id: str | None = None
        self.session_info: dict[str, Any] | None = None
        self.closed = False
        self.closed_reason: str | None = None
        self.closed_event: Any = None
        self.last_error: DuplexProtocolError | None = None
        self.input_ms_sent = 0.0
        self._seq = 0
        self._recent: deque[tuple[int, Any]] = deque(maxlen=_RECENT_EVENTS)
        self._responses: OrderedDict[str, ResponseHandle] = OrderedDict()
        self._subscribers: set[EventSubscription] = set()
        self._response_subscribers: set[ResponseSubscription] = set()
        self._waiters: list[_Waiter] = []
        self._listeners: list[Listener] = []
        self._reader: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    # ---- transport seams ---------------------------------------------------------------

    @abstractmethod
    async def _send(self, command: Mapping[str, Any] | RealtimeCommand) -> None:
        """Deliver one client command (a wire dict or a typed command)."""

    @abstractmethod
    def _events(self) -> AsyncIterator[Any]:
        """The session's typed events in order; ends after the terminal event."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release the transport (idempotent); the reader is stopped with it."""

    # ---- lifecycle ---------------------------------------------------------------------

    @property
    def session_id(self) -> str | None:
        return self._session_id

    @property
    def running(self) -> bool:
        return self._reader is not None and not self._reader.done()

    def start(self) -> None:
        """Start the background reader (idempotent; needs a running event loop)."""
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(
                self._read_loop(), name=f"duplex-client-reader-{id(self):x}"
            )

    async def close(self, timeout: float | None = 10.0) -> None:
        """End the session gracefully: ask the server to close it, wait for
        ``session.closed``, then release the transport. Idempotent."""
        if not self.closed and self._failure is None:
            self.start()  # session.closed must be read for the wait below to end
            with contextlib.suppress(DuplexClientError):
                await self._send({"type": "session.close"})
            with contextlib.suppress(TimeoutError, DuplexClientError):
                await self.wait_closed(timeout)
        await self.aclose()

    async def wait_closed(self, timeout: float | None = None) -> str | None:
        """Wait until the session ended for this client; return the reason (a terminal
        event's, or how else it ended: taken over, released)."""
        if not self.closed:
            # Whether the end came before this call or during it, it is an answer.
            with contextlib.suppress(DuplexSessionClosedError):
                await self.wait_for(tuple(TERMINAL_TYPES), timeout, raise_on_error=False)
        return self.closed_reason

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.close()
        finally:
            await self.aclose()

    async def _stop_reader(self, timeout: float = 0.0) -> None:
        """Give the reader ``timeout`` seconds to finish on its own (it ends after the
        terminal event), then cancel it; then end every subscription."""
        reader = self._reader
        if reader is not None and not reader.done():
            if reader is asyncio.current_task():
                return
            if timeout > 0 and not self._ended():
                await asyncio.wait({reader}, timeout=timeout)
            else:
                await asyncio.sleep(0)
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader
        if not self._ended():
            # Released without the session's terminal event: nothing more will arrive.
            self.closed = True
            self.closed_reason = "client_released"
        self._finalize(self.closed_reason)

    # ---- commands ----------------------------------------------------------------------

    async def send(self, event: Mapping[str, Any]) -> str:
        """Send any client event (a wire dict); returns its ``event_id`` (one is stamped
        when missing). Server refusals arrive as ``error`` events echoing that id."""
        if not isinstance(event, Mapping) or not isinstance(event.get("type"), str):
            raise TypeError("a client event is a mapping with a string 'type'")
        self._check_open()
        payload = dict(event)
        event_id = payload.get("event_id")
        if not isinstance(event_id, str) or not event_id:
            event_id = "evt_" + uuid.uuid4().hex
            payload["event_id"] = event_id
        self._notify("send", payload)
        await self._send(payload)
        return event_id

    async def append_audio(self, pcm16: bytes, *, sample_rate_hz: int) -> str:
        """One ``input_audio_buffer.append`` of PCM16 LE mono bytes."""
        self.input_ms_sent += pcm16_ms(len(pcm16), sample_rate_hz)
        return await self.send(
            {
                "type": "input_audio_buffer.append",
                "audio": b64encode_str(pcm16),
                "format": "pcm16",
                "sample_rate_hz": sample_rate_hz,
            }
        )

    async def stream_pcm(
        self,
        audio: Any,
        *,
        sample_rate_hz: int,
        chunk_ms: int = 20,
        realtime: bool = False,
    ) -> float:
        """Send ``audio`` as ``chunk_ms`` appends; return the milliseconds sent.

        ``audio``: PCM16 LE bytes, or a numpy array (int16, or float in [-1, 1]).
        ``realtime``: pace the sends at audio time (chunk k leaves at k * chunk_ms after
        the first), as a microphone would; otherwise send as fast as the transport takes.
        """
        if chunk_ms <= 0:
            raise ValueError("chunk_ms must be positive")
        data = as_pcm16_bytes(audio, sample_rate_hz)
        step = max(1, round(sample_rate_hz * chunk_ms / 1000)) * PCM16_BYTES_PER_SAMPLE
        started = time.perf_counter()
        sent_ms = 0.0
        for offset in range(0, len(data), step):
            chunk = data[offset : offset + step]
            if realtime:
                delay = started + sent_ms / 1000.0 - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            await self.append_audio(chunk, sample_rate_hz=sample_rate_hz)
            sent_ms += pcm16_ms(len(chunk), sample_rate_hz)
            if not realtime:
                await asyncio.sleep(0)  # let the reader run between chunks
        return sent_ms

    async def commit(self, create_response: bool | None = None) -> str:
        """``input_audio_buffer.commit``; ``create_response`` None: the session decides."""
        event: dict[str, Any] = {"type": "input_audio_buffer.commit"}
        if create_response is not None:
            event["create_response"] = create_response
        return await self.send(event)

    async def clear_input(self) -> str:
        return await self.send({"type": "input_audio_buffer.clear"})

    async def create_response(self, **options: Any) -> str:
        """``response.create``; ``options`` become its ``response`` object."""
        event: dict[str, Any] = {"type": "response.create"}
        if options:
            event["response"] = options
        return await self.send(event)

    async def cancel_response(self, response_id: str | None = None) -> str:
        event: dict[str, Any] = {"type": "response.cancel"}
        if response_id is not None:
            event["response_id"] = response_id
        return await self.send(event)

    async def barge_in(self) -> str:
        """The user interrupts: cancel the active response and the pending input."""
        return await self.send({"type": "barge_in"})

    async def ack_playback(
        self,
        response_id: str | None,
        played_ms: float,
        truncate: bool = False,
        *,
        committed_ms: float | None = None,
    ) -> str:
        """``playback.ack``: the client played ``played_ms`` of ``response_id``'s audio.

        ``truncate=True`` cuts the assistant turn in history at that point. The handle's
        ``played_ms`` follows the acknowledgement.
        """
        event: dict[str, Any] = {"type": "playback.ack", "played_ms": round(played_ms)}
        if committed_ms is not None:
            event["committed_ms"] = round(committed_ms)
        if truncate:
            event["truncate"] = True
        handle = self._responses.get(response_id) if response_id else None
        if response_id is not None:
            event["response_id"] = response_id
            if handle is not None and handle.item_id:
                event["item_id"] = handle.item_id
        event_id = await self.send(event)
        if handle is not None:
            handle._ack(played_ms, truncate=truncate)
        return event_id

    async def update_session(self, **fields: Any) -> str:
        """``session.update`` with ``fields`` as its session object (a patch)."""
        return await self.send({"type": "session.update", "session": fields})

    # ---- reading -----------------------------------------------------------------------

    def mark(self) -> int:
        """The number of events dispatched so far (for ``since=``)."""
        return self._seq

    def events(self) -> EventSubscription:
        """Subscribe now: every event dispatched from here on (see ``EventSubscription``)."""
        sub = EventSubscription(self, self.max_queued_events)
        if self._ended():
            sub._end(self._failure)
        else:
            self._subscribers.add(sub)
        return sub

    def responses(self, *, since: int | None = None) -> ResponseSubscription:
        """Subscribe now: a ``ResponseHandle`` per ``response.created`` from here on (and
        the responses created after event number ``since``, when given)."""
        sub = ResponseSubscription(self)
        if since is not None:
            for handle in self._responses.values():
                if handle.created_seq > since:
                    sub._put(handle)
        if self._ended():
            sub._end(self._failure)
        else:
            self._response_subscribers.add(sub)
        return sub

    def response(self, response_id: str) -> ResponseHandle | None:
        """A known response's handle (recent finished ones are kept)."""
        return self._responses.get(response_id)

    @property
    def active_response(self) -> ResponseHandle | None:
        """The latest response that is not done yet."""
        for handle in reversed(self._responses.values()):
            if not handle.done:
                return handle
        return None

    async def wait_for(
        self,
        match: Any,
        timeout: float | None = None,
        *,
        since: int | None = None,
        raise_on_error: bool = True,
    ) -> Any:
        """The first event that ``match`` accepts (a type name, an event class, a
        predicate, or a tuple of those), after event number ``since`` if given, else
        from now on.

        Raises ``TimeoutError`` after ``timeout`` seconds; ``DuplexProtocolError`` when an
        ``error`` event arrives first (unless ``match`` accepts it or ``raise_on_error``
        is false); ``DuplexSessionClosedError`` when the session ends first.
        """
        matches = event_matcher(match)
        if since is not None:
            oldest = self._recent[0][0] if self._recent else self._seq + 1
            if since + 1 < oldest and since < self._seq:
                raise DuplexEventOverflowError(
                    f"event {since + 1} is no longer held (oldest kept: {oldest})"
                )
            for seq, event in self._recent:
                if seq <= since:
                    continue
                outcome = self._waiter_outcome(matches, raise_on_error, event)
                if outcome is not None:
                    return self._resolve_outcome(outcome)
        if self._ended():
            raise self._failure or DuplexSessionClosedError(self.closed_reason or "closed")
        waiter = _Waiter(matches, raise_on_error)
        self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(waiter.future, timeout)
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            if not waiter.future.done():
                waiter.future.cancel()

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(kind, obj, perf_counter_time)`` synchronously for every event
        dispatched (``kind="event"``) and every command sent (``kind="send"``, the wire
        dict). Returns a function that removes it."""
        self._listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    # ---- dispatch ----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            async for event in self._events():
                self._dispatch(event)
                if self.closed:
                    return
        except asyncio.CancelledError:
            raise  # stopped by aclose(): _stop_reader finalizes
        except DuplexClientError as exc:
            self._fail(exc)
        except Exception as exc:
            self._fail(DuplexConnectionError(f"event stream failed: {exc!r}"))
        else:
            if not self.closed:
                self._fail(DuplexConnectionError("event stream ended before the session closed"))

    def _dispatch(self, event: Any) -> None:
        """Route one event (synchronously, in arrival order)."""
        now = time.perf_counter()
        self._seq += 1
        seq = self._seq
        self._recent.append((seq, event))
        kind = getattr(event, "type", "")
        if kind in (SESSION_CREATED, SESSION_RESUMED):
            session = getattr(event, "session", None)
            if isinstance(session, Mapping):
                self.session_info = dict(session)
                sid = session.get("id")
                if isinstance(sid, str) and sid:
                    self._session_id = sid
        response_id = response_id_of(event)
        if kind == RESPONSE_CREATED and response_id is not None:
            handle = ResponseHandle(
                response_id,
                created_event=event,
                created_seq=seq,
                output_rate_hz=self.output_rate_hz,
            )
            self._responses[response_id] = handle
            self._prune_responses()
            for rsub in list(self._response_subscribers):
                rsub._put(handle)
        elif response_id is not None:
            known = self._responses.get(response_id)
            if known is not None:
                known._feed(event)
        if kind == ERROR:
            self.last_error = DuplexProtocolError.from_event(event)
        for listener in list(self._listeners):
            try:
                listener("event", event, now)
            except Exception:
                log.exception("duplex client listener failed")
        for sub in list(self._subscribers):
            sub._put(event)
        for waiter in list(self._waiters):
            if waiter.future.done():
                continue
            outcome = self._waiter_outcome(waiter.matches, waiter.raise_on_error, event)
            if outcome is None:
                continue
            ok, value = outcome
            if ok:
                waiter.future.set_result(value)
            else:
                waiter.future.set_exception(value)
        if kind in TERMINAL_TYPES:
            self.closed = True
            self.closed_event = event
            self.closed_reason = getattr(event, "reason", None) or kind
            self._finalize(self.closed_reason)

    def _waiter_outcome(
        self, matches: Callable[[Any], bool], raise_on_error: bool, event: Any
    ) -> tuple[bool, Any] | None:
        if matches(event):
            return True, event
        kind = getattr(event, "type", "")
        if kind == ERROR and raise_on_error:
            return False, DuplexProtocolError.from_event(event)
        if kind in TERMINAL_TYPES:
            reason = getattr(event, "reason", None) or kind
            return False, DuplexSessionClosedError(reason, event=event)
        return None

    @staticmethod
    def _resolve_outcome(outcome: tuple[bool, Any]) -> Any:
        ok, value = outcome
        if ok:
            return value
        raise value

    def _prune_responses(self) -> None:
        done = [rid for rid, h in self._responses.items() if h.done]
        for rid in done[: max(0, len(done) - _KEPT_DONE_RESPONSES)]:
            del self._responses[rid]

    def _notify(self, kind: str, obj: Any) -> None:
        now = time.perf_counter()
        for listener in list(self._listeners):
            try:
                listener(kind, obj, now)
            except Exception:
                log.exception("duplex client listener failed")

    def _check_open(self) -> None:
        if self._failure is not None:
            raise DuplexConnectionError(f"the client's transport failed: {self._failure}")
        if self.closed:
            raise DuplexSessionClosedError(self.closed_reason or "closed")

    def _ended(self) -> bool:
        return self.closed or self._failure is not None

    def _fail(self, error: BaseException) -> None:
        """The transport failed: every reader and waiter sees ``error``."""
        if self._ended():
            return
        self._failure = error
        self._finalize(f"failed: {error}", error)

    def _finalize(self, reason: str | None, error: BaseException | None = None) -> None:
        for handle in self._responses.values():
            handle._finish(reason or "closed")
        for sub in list(self._subscribers):
            sub._end(error)
        self._subscribers.clear()
        for rsub in list(self._response_subscribers):
            rsub._end(error)
        self._response_subscribers.clear()
        for waiter in list(self._waiters):
            if not waiter.future.done():
                waiter.future.set_exception(
                    error or DuplexSessionClosedError(reason or "closed", event=self.closed_event)
                )
        self._waiters.clear()
