"""One WebSocket's writer: the asyncio pump of a ``RealtimeProtocol``.

All the rules (order, bounds, numbering as frames leave, cancel overtaking unsent audio,
the close) live in the sans-I/O ``RealtimeProtocol``; this class only moves what its
``next_frame`` hands out onto the socket, one frame at a time.

A client that stopped reading (the queue went over its bound, DESIGN decision 13) is let
go at once, before anything else is queued: what was still waiting is numbered into the
journal (a resume replays it), the socket is aborted (a close handshake would wait behind
a send buffer that never drains) and the owner is told, to detach or close the session.
A socket that cannot be aborted (an ASGI server without our ``ABORT_EXTENSION``) gets a
close frame with ``CLOSE_TIMEOUT_S`` to leave instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from starlette.websockets import WebSocket

from ..websocket_protocol import ABORT_EXTENSION
from .outbound import CloseFrame
from .realtime_input import RealtimeEnvelope
from .realtime_protocol import EventHook, RealtimeProtocol, SentHook

log = logging.getLogger(__name__)

#: How long a close frame may wait to be written before the socket is given up on.
CLOSE_TIMEOUT_S = 5.0


class RealtimeConnection:
    """One socket and the protocol object that decides what it carries."""

    def __init__(
        self,
        websocket: WebSocket,
        envelope: RealtimeEnvelope | None = None,
        *,
        max_events: int = 2048,
        max_bytes: int = 256 * 1024,
        on_overflow: Callable[[RealtimeConnection], None] | None = None,
        on_sent: SentHook | None = None,
        on_dropped: Callable[[int], None] | None = None,
        on_event: EventHook | None = None,
    ) -> None:
        self.websocket = websocket
        self.protocol = RealtimeProtocol(
            envelope or RealtimeEnvelope(),
            max_events=max_events,
            max_bytes=max_bytes,
            on_queued=self._queued,
            on_sent=on_sent,
            on_dropped=on_dropped,
            on_event=on_event,
        )
        self._on_overflow = on_overflow
        self._wakeup = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.overflowed = False
        self.aborted = False
        # What waited when the bound was hit (for the owner's log line).
        self.overflow_events = 0
        self.overflow_bytes = 0

    @property
    def closed(self) -> bool:
        return self.protocol.closed

    def start(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write())

    def _queued(self, over_bound: bool) -> None:
        self._wakeup.set()
        if over_bound and not self.overflowed:
            self.overflowed = True
            outbound = self.protocol.outbound
            self.overflow_events, self.overflow_bytes = (
                outbound.pending_events,
                outbound.pending_bytes,
            )
            # Now, not in a task: the engine may hand over a whole burst before a task
            # runs, and all of it would wait here. From here on events go to the journal.
            self.protocol.abandon()
            self.abort()
            if self._on_overflow is not None:
                self._on_overflow(self)

    def abort(self) -> None:
        """Drop the socket now, without a close handshake (nothing more is written)."""
        if self.aborted:
            return
        scope = getattr(self.websocket, "scope", None) or {}
        extension = scope.get("extensions", {}).get(ABORT_EXTENSION)
        if extension is not None:
            self.aborted = True
            extension["abort"]()

    # ---- the writer -------------------------------------------------------------------

    async def _write(self) -> None:
        protocol = self.protocol
        try:
            while True:
                frame = protocol.next_frame()
                if frame is None:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                if isinstance(frame, CloseFrame):
                    with contextlib.suppress(Exception):
                        await self.websocket.close(code=frame.code, reason=frame.reason)
                    return
                await self.websocket.send_text(frame.data.decode())
                if frame.after_sent is not None:
                    frame.after_sent()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.debug("socket write failed", exc_info=True)
        finally:
            protocol.abandon()

    async def abandon_writer(self) -> None:
        """Stop writing and number what still waits into the journal; the socket stays
        open (a takeover still tells it ``session.replaced``)."""
        if self._writer is not None and self._writer is not asyncio.current_task():
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
        self.protocol.abandon()

    async def abandon(
        self, code: int = 1000, reason: str = "", *, last_frame: bytes | None = None
    ) -> None:
        """``abandon_writer``, then ``last_frame`` if given, then close the socket (unless
        it was aborted). What cannot leave within ``CLOSE_TIMEOUT_S`` aborts it."""
        await self.abandon_writer()
        if self.aborted:
            return
        try:
            await asyncio.wait_for(self._close(code, reason, last_frame), CLOSE_TIMEOUT_S)
        except TimeoutError:
            self.abort()
        except Exception:
            log.debug("socket close failed", exc_info=True)

    async def _close(self, code: int, reason: str, last_frame: bytes | None) -> None:
        if last_frame is not None:
            await self.websocket.send_text(last_frame.decode())
        await self.websocket.close(code=code, reason=reason)

    async def drain(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Wait until the writer has sent what is queued and closed (after a terminal).
        A client that has not taken it all within ``timeout_s`` is not reading: the
        socket is aborted."""
        if self._writer is None or self._writer.done():
            return
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(self._writer), timeout_s)
        if not self._writer.done():
            self.abort()
