"""The WebSocket protocol every omniduplex server runs: uvicorn's sans-I/O ``websockets``
implementation, except for a client's text frame that is not UTF-8, a bounded write
buffer, and a way for the app to drop a connection at once.

uvicorn logs such a frame as an exception (a client could flood the log with
tracebacks), and when the client's own close frame arrived in the same read it raises
from ``data_received`` instead of closing, so asyncio logs a second traceback and the
socket is reset. Here the frame costs one warning line and closes its socket with 1007
(invalid payload), whatever else the read held.

A client that stops reading (DESIGN decision 13): uvicorn writes a frame only while the
transport is below its high-water mark, so what such a client costs in this layer is at
most ``WRITE_BUFFER_HIGH`` plus one frame (set here rather than left to asyncio's
default). Nothing here ever gives up on it, though, and a close handshake waits behind
that buffer forever; so every connection's ASGI scope carries
``extensions[ABORT_EXTENSION]["abort"]``, which drops the TCP connection now (no close
frame, nothing more written). The Realtime route calls it when its own bound says the
client stopped reading.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request
from websockets.protocol import State

log = logging.getLogger("uvicorn.error")

INVALID_PAYLOAD = 1007
#: The ASGI scope extension that carries ``{"abort": callable}`` (see the module docstring).
ABORT_EXTENSION = "omniduplex.abort"
#: The transport's write buffer: above the high mark uvicorn waits before the next frame.
WRITE_BUFFER_HIGH = 64 * 1024
WRITE_BUFFER_LOW = 16 * 1024


class RealtimeWebSocketProtocol(WebSocketsSansIOProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        # The scope exists only for an upgrade uvicorn accepted; the app task that reads
        # it was created above but has not run yet, so the extension is there in time.
        scope: dict[str, Any] | None = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][ABORT_EXTENSION] = {"abort": self.abort}

    def abort(self) -> None:
        """Drop the connection now. ``connection_lost`` follows: the app's pending
        receive gets ``websocket.disconnect`` and a send waiting on the buffer fails."""
        self.transport.abort()

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent:
            try:
                b"".join(self.frames).decode()
            except UnicodeDecodeError:
                self.frames = []
                self._close_for_invalid_text()
                return
        super().send_receive_event_to_app()

    def _close_for_invalid_text(self) -> None:
        log.warning("a client sent a text frame that is not UTF-8; its socket was closed with 1007")
        if self.conn.state is State.OPEN:
            self.conn.send_close(INVALID_PAYLOAD)
        # Frames read after this one are discarded (``close_sent``); the app is told now.
        self.queue.put_nowait({"type": "websocket.disconnect", "code": INVALID_PAYLOAD})
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        # The closing handshake as uvicorn does it for an app's close: read on until the
        # client's close frame (``handle_close`` then drops the connection), or the close
        # timeout. Dropping it at once made a client still sending meet a reset that could
        # discard our close frame before it was read.
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        self.close_timer = self.loop.call_later(self.close_timeout, self.transport.close)
