"""The bounded queue a session's events wait in until their consumer takes them.

One implementation serves both consumers of a session's events: a handle's outbox (typed
events, for in-process readers) and a Realtime socket's queue (rendered events, and the
socket's own frames). A session's events pass through exactly one of them. The queue
counts events and bytes against its bounds (DESIGN decision 13: what a consumer that
stopped reading may hold), and when a response ends cancelled it drops that response's
media still waiting, so the terminal overtakes them. What to do at the bound is the
owner's rule (a handle detaches its session, a socket is treated as disconnected).

An item may be free (``charged(item)`` False): it counts against neither bound. A
socket's replay is such an item: its bytes are the journal's own, already paid for
there, and a replay that alone passed the bound would drop every resuming client.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedEventQueue(Generic[T]):
    """FIFO of ``T`` with event and byte counts.

    ``size_of(item)``: the bytes an item is charged. ``media_of(item)``: the response id
    of an item that a cancel of that response drops (audio and transcript deltas), else
    ``None``. ``charged(item)``: False for an item that counts against no bound (default:
    every item counts).
    """

    def __init__(
        self,
        *,
        max_events: int,
        max_bytes: int,
        size_of: Callable[[T], int],
        media_of: Callable[[T], str | None],
        charged: Callable[[T], bool] | None = None,
    ) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._media_of = media_of
        self._charged = charged
        self._items: deque[T] = deque()
        # What the bounds see: the charged items' count and bytes.
        self._count = 0
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    @property
    def bytes(self) -> int:
        """The bytes charged to what waits."""
        return self._bytes

    @property
    def charged_events(self) -> int:
        """How many of the waiting items count against ``max_events``."""
        return self._count

    def fits(self, item: T) -> bool:
        """Whether ``item`` can join without passing a bound."""
        if not self._counts(item):
            return True
        return self._count < self.max_events and self._bytes + self._size_of(item) <= self.max_bytes

    @property
    def over_bound(self) -> bool:
        return self._count > self.max_events or self._bytes > self.max_bytes

    def filled_past(self, fraction: float) -> bool:
        """Whether what waits is past ``fraction`` of either bound."""
        return self._count > self.max_events * fraction or self._bytes > self.max_bytes * fraction

    def _counts(self, item: T) -> bool:
        return self._charged is None or self._charged(item)

    def _charge(self, item: T, sign: int) -> None:
        if self._counts(item):
            self._count += sign
            self._bytes += sign * self._size_of(item)

    def push(self, item: T) -> None:
        self._items.append(item)
        self._charge(item, 1)

    def pop(self) -> T:
        """The oldest item (the queue must not be empty)."""
        item = self._items.popleft()
        self._charge(item, -1)
        return item

    def take_all(self) -> list[T]:
        """Everything waiting, oldest first; the queue is empty after."""
        items = list(self._items)
        self._items.clear()
        self._count = 0
        self._bytes = 0
        return items

    def drop_media_of(self, response_id: str | None) -> int:
        """Drop the waiting media of ``response_id``; how many items went."""
        if not response_id or not self._items:
            return 0
        kept: deque[T] = deque()
        for item in self._items:
            if self._media_of(item) == response_id:
                self._charge(item, -1)
            else:
                kept.append(item)
        dropped = len(self._items) - len(kept)
        self._items = kept
        return dropped
