"""The bounded queue a session's events wait in until their consumer takes them.

One implementation serves both consumers of a session's events: a handle's outbox (typed
events, for in-process readers) and a Realtime socket's queue (rendered events, and the
socket's own frames). A session's events pass through exactly one of them. The queue
counts events and bytes against its bounds (DESIGN decision 13: what a consumer that
stopped reading may hold), and when a response ends cancelled it drops that response's
media still waiting, so the terminal overtakes them. What to do at the bound is the
owner's rule (a handle detaches its session, a socket is treated as disconnected).
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
    ``None``.
    """

    def __init__(
        self,
        *,
        max_events: int,
        max_bytes: int,
        size_of: Callable[[T], int],
        media_of: Callable[[T], str | None],
    ) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._media_of = media_of
        self._items: deque[T] = deque()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes

    def fits(self, item: T) -> bool:
        """Whether ``item`` can join without passing a bound."""
        return (
            len(self._items) < self.max_events
            and self._bytes + self._size_of(item) <= self.max_bytes
        )

    @property
    def over_bound(self) -> bool:
        return len(self._items) > self.max_events or self._bytes > self.max_bytes

    def push(self, item: T) -> None:
        self._items.append(item)
        self._bytes += self._size_of(item)

    def pop(self) -> T:
        """The oldest item (the queue must not be empty)."""
        item = self._items.popleft()
        self._bytes -= self._size_of(item)
        return item

    def take_all(self) -> list[T]:
        """Everything waiting, oldest first; the queue is empty after."""
        items = list(self._items)
        self._items.clear()
        self._bytes = 0
        return items

    def drop_media_of(self, response_id: str | None) -> int:
        """Drop the waiting media of ``response_id``; how many items went."""
        if not response_id or not self._items:
            return 0
        kept: deque[T] = deque()
        for item in self._items:
            if self._media_of(item) == response_id:
                self._bytes -= self._size_of(item)
            else:
                kept.append(item)
        dropped = len(self._items) - len(kept)
        self._items = kept
        return dropped
