"""A client socket that lives on a front end, as the replica's Realtime route sees it.

The replica runs the same ``RealtimeRoute`` as a single process (the sans-I/O protocol,
the attachment registry with its resume tokens, the replay journal, the lease fencing),
so a session's whole serving state stays with its engine and a resume through any front
end finds it there. What crosses machines is the socket itself: ``TunnelSocket`` stands
in for the starlette ``WebSocket`` the route expects. The front end feeds it the client's
frames (``feed``) and the disconnect (``disconnect``); it hands the route's frames to the
front end as ``OutboundBatch``\\ es (``take``: whatever is waiting, in order, in one
batch; the replica's link to that front end carries many sockets' batches at once).

Flow control keeps the one-process guarantees. At most ``window_bytes`` of frames may be
on their way to the client and not yet written by the front end (``ack`` returns credit);
beyond that ``send_text`` waits, so what the client has not taken stays in the route's
own bounded outbound queue, where a cancel still drops the unsent audio of its response
and a client that stopped reading still overflows and is let go (DESIGN decision 13). An
``abort`` (the route's answer to that overflow) overtakes everything that waits.

A front end that died is found out by its link (``link.py``), which closes: each of its
sockets is then ``disconnect``\\ ed and the route treats it as dropped, so the session goes
into its disconnect grace, resumable elsewhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import Headers, QueryParams
from starlette.websockets import WebSocketDisconnect

from ..websocket_protocol import ABORT_EXTENSION

#: Frames on their way to a client (sent by the replica, not yet written by its front end):
#: as much as one process lets wait in a socket's write buffer (``WRITE_BUFFER_HIGH``), so
#: a cancel overtakes as much unsent audio as it would there.
DEFAULT_WINDOW_BYTES = 64 * 1024
#: A front end returns credit once this much was written (or sooner, with the client's
#: frames): a quarter of the window, so the replica never waits on it while the client
#: reads, and a reply's audio costs one credit message per few deltas, not one each.
ACK_EVERY_BYTES = DEFAULT_WINDOW_BYTES // 4
#: The close code a route sees when the front end (or its client) vanished without one.
ABNORMAL_CLOSURE = 1006


@dataclass(frozen=True, slots=True)
class TunnelScope:
    """What the route reads of the client's handshake."""

    path: str
    query_string: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def duplex_route(self) -> bool:
        return self.path.rstrip("/").endswith("/duplex")


@dataclass(frozen=True, slots=True)
class OutboundBatch:
    """Frames for the client, in order; then the close (``close_code``) or an abort.

    ``session_id`` / ``incarnation``: the session the connection serves once known, and
    the replica's incarnation (so a front end reports the death of this one only)."""

    frames: tuple[str, ...] = ()
    close_code: int | None = None
    close_reason: str = ""
    abort: bool = False
    # The tunnel is over with nothing more to send (the client left, or the route ended
    # without a close frame).
    ended: bool = False
    session_id: str | None = None
    incarnation: str = ""

    @property
    def final(self) -> bool:
        return self.abort or self.ended or self.close_code is not None

    @property
    def size(self) -> int:
        return sum(len(f) for f in self.frames)


@dataclass(slots=True)
class _Out:
    frames: list[str] = field(default_factory=list)
    size: int = 0


class TunnelSocket:
    """The replica's side of one front-end socket (see the module docstring)."""

    def __init__(
        self,
        scope: TunnelScope,
        *,
        incarnation: str = "",
        window_bytes: int = DEFAULT_WINDOW_BYTES,
    ) -> None:
        self.query_params = QueryParams(scope.query_string)
        self.headers = Headers(
            raw=[(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in scope.headers]
        )
        self.scope: dict[str, Any] = {
            "type": "websocket",
            "path": scope.path,
            "extensions": {ABORT_EXTENSION: {"abort": self.abort}},
        }
        self.incarnation = incarnation
        self.window_bytes = window_bytes
        self.session_id: str | None = None
        self._inbound: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._out = _Out()
        self._in_flight = 0  # bytes handed to the front end, not yet acknowledged
        self._close: tuple[int, str] | None = None
        self._aborted = False
        self._gone = False  # the client (or its front end) went away
        self._finished = False  # the route is done with this socket
        self._taken_final = False  # the last batch went out
        self._room = asyncio.Event()
        #: Told whenever something new waits for the front end (the replica's channel to
        #: it takes it then).
        self.on_change: Callable[[], None] | None = None

    # ---- the route's side (starlette's WebSocket, the parts it uses) -----------------

    async def accept(self, subprotocol: str | None = None, headers: Any = None) -> None:
        """The front end accepted the client's socket before it chose this replica."""

    async def receive(self) -> dict[str, Any]:
        return await self._inbound.get()

    async def send_text(self, data: str) -> None:
        while not self._gone and self._out.size + self._in_flight >= self.window_bytes:
            self._room.clear()
            await self._room.wait()
        if self._gone or self._close is not None:
            raise WebSocketDisconnect(ABNORMAL_CLOSURE)
        self._out.frames.append(data)
        self._out.size += len(data)
        self._notify()

    async def send_bytes(self, data: bytes) -> None:
        await self.send_text(data.decode())

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        if self._close is None and not self._gone:
            self._close = (code, reason or "")
            self._notify()

    def abort(self) -> None:
        """Drop the client's socket now (nothing more is written): the route's answer to
        a client that stopped reading. The route then sees the disconnect."""
        if self._gone:
            return
        self._aborted = True
        self.disconnect(ABNORMAL_CLOSURE)

    def finished(self) -> None:
        """The route returned: the stream ends after what waits."""
        self._finished = True
        self._notify()

    # ---- the front end's side --------------------------------------------------------

    def feed(self, frames: list[str | bytes]) -> None:
        if self._gone:
            return
        for frame in frames:
            key = "text" if isinstance(frame, str) else "bytes"
            self._inbound.put_nowait({"type": "websocket.receive", key: frame})

    def disconnect(self, code: int = ABNORMAL_CLOSURE) -> None:
        if self._gone:
            return
        self._gone = True
        self._inbound.put_nowait({"type": "websocket.disconnect", "code": code})
        self._room.set()
        self._notify()

    def ack(self, size: int) -> None:
        self._in_flight = max(0, self._in_flight - size)
        self._room.set()

    def _notify(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def take(self) -> OutboundBatch | None:
        """What waits for the client now, as one batch, or ``None``. The last batch is
        ``final``: the close after the last frames, an abort (which overtakes what waits:
        the client is not reading), or ``ended``; after it, ``None`` for good."""
        if self._taken_final:
            return None
        if self._aborted:
            self._taken_final = True
            return OutboundBatch(abort=True, session_id=self.session_id)
        if self._gone:
            self._taken_final = True
            return OutboundBatch(ended=True, session_id=self.session_id)
        if not self._out.frames and self._close is None:
            if not self._finished:
                return None
            self._taken_final = True
            return OutboundBatch(ended=True, session_id=self.session_id)
        out, self._out = self._out, _Out()
        self._in_flight += out.size
        code, reason = self._close if self._close is not None else (None, "")
        self._taken_final = self._close is not None
        return OutboundBatch(
            tuple(out.frames),
            close_code=code,
            close_reason=reason,
            session_id=self.session_id,
            incarnation=self.incarnation,
        )

    @property
    def over(self) -> bool:
        """The final batch was taken."""
        return self._taken_final


__all__ = ["ABNORMAL_CLOSURE", "ACK_EVERY_BYTES", "OutboundBatch", "TunnelScope", "TunnelSocket"]
