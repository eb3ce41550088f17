"""One WebSocket connection's outbound side: the asyncio pump of a ``RealtimeOutbound``.

All the rules (order, bounds, numbering as frames leave, cancel overtaking unsent audio,
the close) live in the sans-I/O ``RealtimeOutbound``; this class only moves what it hands
out onto the socket, one frame at a time, and reports a client that stopped reading
(the queue went over its bound: the owner treats it as disconnected; what was still
waiting is numbered into the journal so a resume replays it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from starlette.websockets import WebSocket

from .outbound import CloseFrame, RealtimeOutbound, Sequencer

log = logging.getLogger(__name__)


class RealtimeConnection:
    """The outbound side of one socket: its own frames and a session's ordered events."""

    def __init__(
        self,
        websocket: WebSocket,
        *,
        max_events: int = 2048,
        max_bytes: int = 8 * 1024 * 1024,
        on_overflow: Callable[[RealtimeConnection], None] | None = None,
    ) -> None:
        self.websocket = websocket
        self.outbound = RealtimeOutbound(max_events=max_events, max_bytes=max_bytes)
        self._on_overflow = on_overflow
        self._wakeup = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.overflowed = False

    @property
    def closed(self) -> bool:
        return self.outbound.closed

    def start(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write())

    def bind(
        self,
        sequencer: Sequencer,
        *,
        on_sent: Callable[[dict[str, Any]], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        """See ``RealtimeOutbound.bind``."""
        self.outbound.bind(sequencer, on_sent=on_sent, on_dropped=on_dropped)

    # ---- enqueue --------------------------------------------------------------------

    def send_local(self, data: bytes, *, after_sent: Callable[[], None] | None = None) -> None:
        """A frame outside the session's stream (already encoded); ``after_sent`` runs once
        it is on the socket."""
        self._queued(self.outbound.send_local(data, after_sent))

    def send_event(self, rendered: dict[str, Any]) -> None:
        """One event of the session's ordered stream (rendered, not yet numbered)."""
        self._queued(self.outbound.send_event(rendered))

    def close_after_pending(self, code: int = 1000, reason: str = "") -> None:
        self.outbound.close_after_pending(code, reason)
        self._wakeup.set()

    def _queued(self, over_bound: bool) -> None:
        self._wakeup.set()
        if over_bound and not self.overflowed:
            self.overflowed = True
            log.warning("client stopped reading: its queue is over the bound")
            if self._on_overflow is not None:
                self._on_overflow(self)

    # ---- the writer -------------------------------------------------------------------

    async def _write(self) -> None:
        outbound = self.outbound
        try:
            while True:
                frame = outbound.next_frame()
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
            outbound.abandon()

    async def abandon_writer(self) -> None:
        """Stop writing and number what still waits into the journal; the socket stays
        open (a takeover still tells it ``session.replaced``)."""
        if self._writer is not None and self._writer is not asyncio.current_task():
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
        self.outbound.abandon()

    async def abandon(self, code: int = 1000, reason: str = "") -> None:
        """``abandon_writer``, then close the socket."""
        await self.abandon_writer()
        with contextlib.suppress(Exception):
            await self.websocket.close(code=code, reason=reason)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Wait until the writer has sent what is queued and closed (after a terminal)."""
        if self._writer is None:
            return
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(self._writer), timeout_s)
