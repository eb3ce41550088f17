"""What one Realtime socket still has to send, in order, without I/O (sans-I/O).

``RealtimeOutbound`` takes two kinds of frames: the socket's own (already encoded: errors
before a session exists, ``session.resumed``, a replay) and the events of the session it
serves (rendered, not yet numbered). ``next_frame`` hands them out one at a time in the
order they came; a session event is numbered (``server_event_seq``, through the session's
journal) only then, so a cancelled response's audio that never left can be dropped
without leaving a hole in the numbering (DESIGN decisions 2 and 13). The asyncio side
(``RealtimeConnection``) only moves what ``next_frame`` returns onto the socket.

States, with the only transitions allowed::

    OPEN --close_after_pending--> CLOSING --(queue empty: the close frame)--> CLOSED
    OPEN | CLOSING --abandon (the socket died, or the session moved to another)--> CLOSED

Once ``CLOSED``, what still waited, and every later session event, is numbered into the
journal at once, so a resume replays it and the stream keeps its order.

Bounds (DESIGN decision 13): what waits is charged against ``max_events`` /
``max_bytes``, except a resume's replay, whose bytes are the journal's. While a replay is
still going out, a new session event is numbered at once and waits as the journal's bytes
too (it cannot be dropped by a cancel any more), so a client catching up on a long replay
is not let go for the live events that pile up behind it; what waits of the journal's
bytes is bounded by ``max_replay_bytes`` instead (the journal's own bound: a client
further behind than the journal keeps cannot be caught up anyway).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ...protocol.duplex import cancelled_response_id, media_response_id
from ..event_queue import BoundedEventQueue

Sequencer = Callable[[dict[str, Any]], bytes]


class OutboundState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_ALLOWED: Final = {
    OutboundState.OPEN: frozenset({OutboundState.CLOSING, OutboundState.CLOSED}),
    OutboundState.CLOSING: frozenset({OutboundState.CLOSED}),
    OutboundState.CLOSED: frozenset(),
}


class OutboundStateError(RuntimeError):
    """A transition the outbound state machine does not have."""


@dataclass(frozen=True, slots=True)
class Frame:
    """Text to send, and what to run once it is on the socket."""

    data: bytes
    after_sent: Callable[[], None] | None = None


@dataclass(frozen=True, slots=True)
class CloseFrame:
    code: int
    reason: str


# (rendered session event | None, encoded frame of the socket's own | None, after sent,
#  whether it is charged against max_events / max_bytes: the journal's bytes are not)
_Item = tuple[dict[str, Any] | None, bytes | None, Callable[[], None] | None, bool]


def _size(rendered: dict[str, Any]) -> int:
    delta = rendered.get("delta")
    return 256 + (len(delta) if isinstance(delta, str) else 0)


def _item_size(item: _Item) -> int:
    rendered, data, _, _ = item
    return _size(rendered) if rendered is not None else len(data or b"")


def _item_charged(item: _Item) -> bool:
    return item[3]


def _item_media(item: _Item) -> str | None:
    rendered = item[0]
    return None if rendered is None else media_response_id(rendered)


class RealtimeOutbound:
    """The frames one socket still owes its client (see the module docstring).

    ``max_events`` / ``max_bytes`` bound what may wait: ``send_*`` returns True when the
    queue went over them (the client stopped reading; the owner treats it as gone). A
    replay (``send_replay``), and what follows it while it waits, is bounded by
    ``max_replay_bytes`` instead (see the module docstring).
    """

    def __init__(
        self,
        *,
        max_events: int = 2048,
        max_bytes: int = 256 * 1024,
        max_replay_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self._queue: BoundedEventQueue[_Item] = BoundedEventQueue(
            max_events=max_events,
            max_bytes=max_bytes,
            size_of=_item_size,
            media_of=_item_media,
            charged=_item_charged,
        )
        self.max_replay_bytes = max_replay_bytes
        # The journal's bytes waiting here (a replay and what followed it).
        self._replay_bytes = 0
        self.state = OutboundState.OPEN
        self._close: CloseFrame | None = None
        self._sequencer: Sequencer | None = None
        self._on_sent: Callable[[dict[str, Any]], None] | None = None
        self._on_dropped: Callable[[int], None] | None = None

    def bind(
        self,
        sequencer: Sequencer,
        *,
        on_sent: Callable[[dict[str, Any]], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        """Session events from now on are numbered by ``sequencer`` as they leave;
        ``on_sent`` sees each one, ``on_dropped`` counts media a cancel overtook."""
        self._sequencer = sequencer
        self._on_sent = on_sent
        self._on_dropped = on_dropped

    @property
    def closed(self) -> bool:
        return self.state is OutboundState.CLOSED

    def _move(self, to: OutboundState) -> None:
        if to not in _ALLOWED[self.state]:
            raise OutboundStateError(f"outbound {self.state.value} -> {to.value}")
        self.state = to

    # ---- in ---------------------------------------------------------------------------

    def send_local(self, data: bytes, after_sent: Callable[[], None] | None = None) -> bool:
        """A frame of the socket's own (already encoded); ``after_sent`` runs once sent."""
        return self._push((None, data, after_sent, True))

    def send_replay(self, data: bytes) -> bool:
        """A journaled frame a resume replays: sent in order like any other, charged
        against ``max_replay_bytes`` only (the journal keeps these very bytes)."""
        return self._push((None, data, None, False))

    def send_event(self, rendered: dict[str, Any]) -> bool:
        """One event of the session's ordered stream (rendered, not yet numbered). A
        cancelled ``response.done`` drops that response's media still waiting."""
        cancelled = cancelled_response_id(rendered)
        if cancelled is not None:
            dropped = self._queue.drop_media_of(cancelled)
            if dropped and self._on_dropped is not None:
                self._on_dropped(dropped)
        if self._replay_bytes and self._sequencer is not None:
            # Behind a replay still going out: numbered now, it waits as the journal's.
            data = self._sequencer(rendered)
            if self._on_sent is not None:
                self._on_sent(rendered)
            return self._push((None, data, None, False))
        return self._push((rendered, None, None, True))

    def close_after_pending(self, code: int = 1000, reason: str = "") -> None:
        """Send what waits, then the close frame."""
        if self.state is OutboundState.OPEN:
            self._close = CloseFrame(code, reason)
            self._move(OutboundState.CLOSING)

    def _push(self, item: _Item) -> bool:
        if self.state is OutboundState.CLOSED:
            # Nothing waits once closed (it was numbered first), so numbering this one
            # now keeps the journal in stream order.
            if item[0] is not None and self._sequencer is not None:
                self._sequencer(item[0])
            return False
        self._queue.push(item)
        if not item[3]:
            self._replay_bytes += len(item[1] or b"")
        return self._queue.over_bound or self._replay_bytes > self.max_replay_bytes

    # ---- out --------------------------------------------------------------------------

    def next_frame(self) -> Frame | CloseFrame | None:
        """The next thing to put on the socket; ``None`` while nothing is due. After a
        ``CloseFrame`` the outbound is ``CLOSED``."""
        while self._queue:
            rendered, data, after_sent, charged = self._queue.pop()
            if not charged:
                self._replay_bytes -= len(data or b"")
            if rendered is not None:
                if self._sequencer is None:
                    continue  # a session event before any session: nothing to number it
                data = self._sequencer(rendered)
                if self._on_sent is not None:
                    self._on_sent(rendered)
            if data is not None:
                return Frame(data, after_sent)
        if self.state is OutboundState.CLOSING and self._close is not None:
            self._move(OutboundState.CLOSED)
            return self._close
        return None

    @property
    def backlogged(self) -> bool:
        """More than half the bound waits: whoever queues should let the writer run."""
        return self.state is not OutboundState.CLOSED and self._queue.filled_past(0.5)

    @property
    def pending_bytes(self) -> int:
        """The bytes charged to what waits."""
        return self._queue.bytes

    @property
    def pending_events(self) -> int:
        return len(self._queue)

    def abandon(self) -> None:
        """Stop sending: number what still waits into the journal, in order."""
        pending = self._queue.take_all()
        self._replay_bytes = 0
        if self._sequencer is not None:
            for rendered, _, _, _ in pending:
                if rendered is not None:
                    self._sequencer(rendered)
        if self.state is not OutboundState.CLOSED:
            self._move(OutboundState.CLOSED)
