"""One WebSocket's writer: the asyncio pump of a ``RealtimeProtocol``.

All the rules (order, bounds, numbering as frames leave, cancel overtaking unsent audio,
the close) live in the sans-I/O ``RealtimeProtocol``; this class only moves what its
``next_frame`` hands out onto the socket, one frame at a time, and reports a client that
stopped reading (the queue went over its bound: the owner treats it as disconnected;
what was still waiting is numbered into the journal so a resume replays it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from starlette.websockets import WebSocket

from .outbound import CloseFrame
from .realtime_input import RealtimeEnvelope
from .realtime_protocol import RealtimeProtocol, SentHook

log = logging.getLogger(__name__)


class RealtimeConnection:
    """One socket and the protocol object that decides what it carries."""

    def __init__(
        self,
        websocket: WebSocket,
        envelope: RealtimeEnvelope | None = None,
        *,
        max_events: int = 2048,
        max_bytes: int = 8 * 1024 * 1024,
        on_overflow: Callable[[RealtimeConnection], None] | None = None,
        on_sent: SentHook | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.websocket = websocket
        self.protocol = RealtimeProtocol(
            envelope or RealtimeEnvelope(),
            max_events=max_events,
            max_bytes=max_bytes,
            on_queued=self._queued,
            on_sent=on_sent,
            on_dropped=on_dropped,
        )
        self._on_overflow = on_overflow
        self._wakeup = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.overflowed = False

    @property
    def closed(self) -> bool:
        return self.protocol.closed

    def start(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write())

    def _queued(self, over_bound: bool) -> None:
        self._wakeup.set()
        if over_bound and not self.overflowed:
            self.overflowed = True
            log.warning("client stopped reading: its queue is over the bound")
            if self._on_overflow is not None:
                self._on_overflow(self)

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
