"""The WebSocket protocol every omniduplex server runs: uvicorn's sans-I/O ``websockets``
implementation, except for a client's text frame that is not UTF-8.

uvicorn logs such a frame as an exception (a client could flood the log with
tracebacks), and when the client's own close frame arrived in the same read it raises
from ``data_received`` instead of closing, so asyncio logs a second traceback and the
socket is reset. Here the frame costs one warning line and closes its socket with 1007
(invalid payload), whatever else the read held.
"""

from __future__ import annotations

import logging

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

log = logging.getLogger("uvicorn.error")

INVALID_PAYLOAD = 1007


class RealtimeWebSocketProtocol(WebSocketsSansIOProtocol):
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
        self.transport.close()
