"""The replay journal of one session's ordered event stream (sans-I/O, injected clock).

Every event of a session's ordered stream gets a ``server_event_seq``: 1 for
``session.created``, then 2, 3, ... (decision 2; the reference left ``session.created``
unnumbered). The journal stamps the seq into the rendered event, serialises it once with
``orjson`` and keeps those exact bytes, so a replay re-sends byte-for-byte what the live
socket got: same seq, same ``event_id``.

Retention, oldest first, always as one contiguous run ``floor + 1 .. head``:

* ``ack(seq)`` (``session.event_ack``) drops everything up to ``seq``;
* entries older than ``ttl_s`` are dropped (on every append / replay, or ``trim()``);
* when the retained size passes ``max_bytes`` the oldest entries are dropped until it fits
  again. An event that alone is bigger than the cap is sent live but not kept.

There is no overflow mode: the live stream is never affected by the journal, every event
keeps its seq, and memory stays bounded by ``max_bytes`` (each entry is charged its encoded
length plus ``ENTRY_OVERHEAD_BYTES`` for the Python objects holding it). The price is paid
only by a later resume that asks for events the journal no longer holds: ``replay_after``
raises ``JournalGap`` and the route answers ``session.resync_required``
(``reason: journal_gap``) instead of replaying a stream with a hole in it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection
from itertools import islice
from typing import Any, ClassVar, Final

import orjson

Clock = Callable[[], float]

#: What one retained entry costs beyond its encoded bytes (a tuple, a float, the bytes
#: object's header and a deque slot, rounded up), so that many tiny events cannot hold
#: more memory than ``max_bytes`` says.
ENTRY_OVERHEAD_BYTES: Final = 128
#: Reference defaults (``DuplexSessionRuntimeConfig``): 8 MiB and 60 s per session.
DEFAULT_REPLAY_MAX_BYTES: Final = 8 * 1024 * 1024
DEFAULT_REPLAY_TTL_S: Final = 60.0

SEQ_KEY: Final = "server_event_seq"


class DuplexTransportError(Exception):
    """A refusal of the duplex transport layer, carrying its wire error ``code``."""

    code: ClassVar[str] = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class JournalGap(DuplexTransportError):
    """Events after the client's last seq were trimmed: replay cannot be exact.

    Not an error on the wire: the route answers ``session.resync_required`` with
    ``reason`` ``journal_gap`` and ends the resume.
    """

    code: ClassVar[str] = "journal_gap"
    reason: ClassVar[str] = "journal_gap"


class JournalAhead(DuplexTransportError):
    """The client claims a seq the session never sent (a stale or foreign client)."""

    code: ClassVar[str] = "session_resume_conflict"


class InvalidEventAck(DuplexTransportError):
    """A ``session.event_ack`` that names no valid seq of this session."""

    code: ClassVar[str] = "invalid_event_ack"


def _is_seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class ReplayJournal:
    """Numbers one session's events and keeps their bytes for an exact replay."""

    __slots__ = ("_clock", "_entries", "_floor", "_head", "_retained", "max_bytes", "ttl_s")

    def __init__(
        self,
        max_bytes: int = DEFAULT_REPLAY_MAX_BYTES,
        ttl_s: float = DEFAULT_REPLAY_TTL_S,
        clock: Clock = time.monotonic,
    ) -> None:
        """``max_bytes`` 0 numbers events but keeps none (a session that cannot resume)."""
        if not _is_seq(max_bytes):
            raise ValueError("max_bytes must be a non-negative int")
        if not ttl_s > 0:
            raise ValueError("ttl_s must be positive")
        self.max_bytes = max_bytes
        self.ttl_s = float(ttl_s)
        self._clock = clock
        # (created, encoded) of seqs floor+1 .. head, oldest first: the seq is implied.
        self._entries: deque[tuple[float, bytes]] = deque()
        self._head = 0
        self._floor = 0
        self._retained = 0

    # ---- state ----------------------------------------------------------------------

    @property
    def head(self) -> int:
        """The last seq assigned (0 before the first event)."""
        return self._head

    @property
    def floor(self) -> int:
        """Every seq up to here is gone (acked or trimmed); ``floor + 1`` is the oldest kept."""
        return self._floor

    @property
    def retained_bytes(self) -> int:
        """What the kept entries are charged: encoded bytes plus per-entry overhead."""
        return self._retained

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"ReplayJournal(floor={self._floor}, head={self._head}, "
            f"retained_bytes={self._retained}, max_bytes={self.max_bytes})"
        )

    # ---- writing --------------------------------------------------------------------

    def append(
        self, rendered: dict[str, Any], *, unkept: Collection[str] = ()
    ) -> tuple[int, bytes]:
        """Number ``rendered`` (stamped in place as ``server_event_seq``), encode and keep it.

        Returns the seq and the exact bytes to send. The dict is the caller's freshly
        rendered event; its seq is part of it from now on. Keys in ``unkept`` (secrets) are
        sent but not kept: a replay has the event without them.
        """
        now = self._clock()
        seq = self._head + 1
        rendered[SEQ_KEY] = seq
        encoded = orjson.dumps(rendered)
        kept = encoded
        if any(key in rendered for key in unkept):
            kept = orjson.dumps({k: v for k, v in rendered.items() if k not in unkept})
        self._head = seq
        self._entries.append((now, kept))
        self._retained += len(kept) + ENTRY_OVERHEAD_BYTES
        self._trim(now)
        return seq, encoded

    def ack(self, seq: Any) -> int:
        """The client holds everything up to ``seq``: drop it. Returns how many went.

        ``seq`` must be an int from 0 to ``head``; acking below what is already gone is a
        no-op. Anything else raises ``InvalidEventAck``.
        """
        if not _is_seq(seq):
            raise InvalidEventAck("session.event_ack requires a non-negative server_event_seq")
        if seq > self._head:
            raise InvalidEventAck(
                f"acknowledged server_event_seq {seq} is newer than the last event sent "
                f"({self._head})"
            )
        return self._drop_through(seq)

    def trim(self) -> int:
        """Drop entries older than ``ttl_s`` and any excess over ``max_bytes``."""
        return self._trim(self._clock())

    # ---- reading --------------------------------------------------------------------

    def replay_after(self, last_seq: Any) -> list[bytes]:
        """The exact bytes of every event after ``last_seq``, in order.

        Raises ``JournalAhead`` if ``last_seq`` is beyond ``head`` (or not a seq at all) and
        ``JournalGap`` if any event after it has already been dropped.
        """
        self.check_resumable(last_seq)
        start = last_seq - self._floor
        return [encoded for _, encoded in islice(self._entries, start, None)]

    def check_resumable(self, last_seq: Any) -> None:
        """``replay_after``'s checks without building the replay."""
        if not _is_seq(last_seq):
            raise JournalAhead("last_received_server_event_seq must be a non-negative int")
        if last_seq > self._head:
            raise JournalAhead(
                f"last_received_server_event_seq {last_seq} is newer than the last event "
                f"sent ({self._head})"
            )
        self.trim()
        if last_seq < self._floor:
            raise JournalGap(
                f"events {last_seq + 1}..{self._floor} are no longer retained; "
                f"the oldest kept is {self._floor + 1}"
            )

    # ---- internals ------------------------------------------------------------------

    def _trim(self, now: float) -> int:
        entries = self._entries
        cutoff = now - self.ttl_s
        dropped = 0
        while entries and (self._retained > self.max_bytes or entries[0][0] <= cutoff):
            _, encoded = entries.popleft()
            self._retained -= len(encoded) + ENTRY_OVERHEAD_BYTES
            dropped += 1
        self._floor += dropped
        return dropped

    def _drop_through(self, seq: int) -> int:
        entries = self._entries
        dropped = 0
        while entries and self._floor < seq:
            _, encoded = entries.popleft()
            self._retained -= len(encoded) + ENTRY_OVERHEAD_BYTES
            self._floor += 1
            dropped += 1
        return dropped


__all__ = [
    "DEFAULT_REPLAY_MAX_BYTES",
    "DEFAULT_REPLAY_TTL_S",
    "ENTRY_OVERHEAD_BYTES",
    "SEQ_KEY",
    "DuplexTransportError",
    "InvalidEventAck",
    "JournalAhead",
    "JournalGap",
    "ReplayJournal",
]
