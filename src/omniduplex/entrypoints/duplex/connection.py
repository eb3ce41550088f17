"""One WebSocket connection's outbound path, bounded, with cancel overtaking.

Session events wait here unsequenced; the writer numbers each one (``server_event_seq``,
through the session's journal) right before it goes on the socket, so a cancelled
response's audio that never left can be dropped without leaving a hole in the numbering
(DESIGN decisions 2 and 13). A client that stops reading until ``max_bytes`` /
``max_events`` is reached is treated as disconnected; what was still waiting is numbered
into the journal so a resume replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from starlette.websockets import WebSocket

log = logging.getLogger(__name__)

_MEDIA_DELTAS = frozenset(
    {
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
        "response.audio.delta",
        "response.audio_transcript.delta",
    }
)

Sequencer = Callable[[dict[str, Any]], bytes]
_Item = tuple[dict[str, Any] | None, bytes | None, Callable[[], None] | None]


def _size(rendered: dict[str, Any]) -> int:
    delta = rendered.get("delta")
    return 256 + (len(delta) if isinstance(delta, str) else 0)


class RealtimeConnection:
    """The outbound side of one socket: local frames and a session's ordered events."""

    def __init__(
        self,
        websocket: WebSocket,
        *,
        max_events: int = 2048,
        max_bytes: int = 8 * 1024 * 1024,
        on_overflow: Callable[[RealtimeConnection], None] | None = None,
    ) -> None:
        self.websocket = websocket
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._on_overflow = on_overflow
        # (rendered session event | None, encoded local frame | None, callback after sent)
        self._queue: deque[_Item] = deque()
        self._bytes = 0
        self._wakeup = asyncio.Event()
        self._sequencer: Sequencer | None = None
        self._on_sent: Callable[[dict[str, Any]], None] | None = None
        self._on_dropped: Callable[[int], None] | None = None
        self._close_after: tuple[int, str] | None = None
        self._writer: asyncio.Task[None] | None = None
        self.closed = False
        self.overflowed = False

    def start(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write())

    def bind(
        self,
        sequencer: Sequencer,
        *,
        on_sent: Callable[[dict[str, Any]], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        """Session events from now on are numbered by ``sequencer`` as they are sent;
        ``on_sent`` sees each one, ``on_dropped`` counts media a cancel overtook."""
        self._sequencer = sequencer
        self._on_sent = on_sent
        self._on_dropped = on_dropped

    # ---- enqueue --------------------------------------------------------------------

    def send_local(self, data: bytes, *, after_sent: Callable[[], None] | None = None) -> None:
        """A frame outside the session's stream (already encoded); ``after_sent`` runs once
        it is on the socket."""
        self._push(None, data, after_sent)

    def send_event(self, rendered: dict[str, Any]) -> None:
        """One event of the session's ordered stream (rendered, not yet numbered)."""
        if rendered.get("type") == "response.done":
            response = rendered.get("response") or {}
            if response.get("status") == "cancelled":
                self._drop_media_of(response.get("id"))
        self._push(rendered, None, None)

    def close_after_pending(self, code: int = 1000, reason: str = "") -> None:
        self._close_after = (code, reason)
        self._wakeup.set()

    def _push(
        self,
        rendered: dict[str, Any] | None,
        data: bytes | None,
        after_sent: Callable[[], None] | None,
    ) -> None:
        if self.closed:
            # Nothing waits in the queue once closed (it was numbered first), so numbering
            # this one now keeps the journal in stream order.
            if rendered is not None and self._sequencer is not None:
                self._sequencer(rendered)  # journal it for a later resume
            return
        size = _size(rendered) if rendered is not None else len(data or b"")
        self._queue.append((rendered, data, after_sent))
        self._bytes += size
        self._wakeup.set()
        if len(self._queue) > self.max_events or self._bytes > self.max_bytes:
            self.overflowed = True
            log.warning("client stopped reading: %d events queued", len(self._queue))
            if self._on_overflow is not None:
                self._on_overflow(self)

    def _drop_media_of(self, response_id: Any) -> None:
        if not response_id:
            return
        kept: deque[_Item] = deque()
        for item in self._queue:
            rendered = item[0]
            if (
                rendered is not None
                and rendered.get("type") in _MEDIA_DELTAS
                and rendered.get("response_id") == response_id
            ):
                self._bytes -= _size(rendered)
                continue
            kept.append(item)
        dropped = len(self._queue) - len(kept)
        self._queue = kept
        if dropped and self._on_dropped is not None:
            self._on_dropped(dropped)

    # ---- the writer -------------------------------------------------------------------

    async def _write(self) -> None:
        try:
            while True:
                while not self._queue:
                    if self._close_after is not None:
                        code, reason = self._close_after
                        with contextlib.suppress(Exception):
                            await self.websocket.close(code=code, reason=reason)
                        return
                    self._wakeup.clear()
                    await self._wakeup.wait()
                rendered, data, after_sent = self._queue.popleft()
                if rendered is not None:
                    self._bytes -= _size(rendered)
                    data = self._sequencer(rendered) if self._sequencer else None
                    if data is None:
                        continue
                    if self._on_sent is not None:
                        self._on_sent(rendered)
                else:
                    self._bytes -= len(data or b"")
                await self.websocket.send_text(data.decode())
                if after_sent is not None:
                    after_sent()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.debug("socket write failed", exc_info=True)
        finally:
            self._close_queue()

    def _close_queue(self) -> None:
        """Number what still waits into the journal, in order, then stop queueing."""
        pending, self._queue = self._queue, deque()
        self._bytes = 0
        if self._sequencer is not None:
            for rendered, _, _ in pending:
                if rendered is not None:
                    self._sequencer(rendered)
        self.closed = True

    async def abandon_writer(self) -> None:
        """Stop writing and number what still waits into the journal; the socket stays
        open (a takeover still tells it ``session.replaced``)."""
        if self._writer is not None and self._writer is not asyncio.current_task():
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
        self._close_queue()

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
