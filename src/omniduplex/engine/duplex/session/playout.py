"""One session's playout clock: a response's audio leaves at real time plus a lead.

A turn-based plugin (the cascade, loopback-fast, any TTS) generates a reply much faster
than it is spoken. Sent as generated, the whole reply would sit in the client's buffer
within milliseconds: the server could not tell what the user heard, a talk-over would
find no response left to stop, and history would keep words nobody heard. The clock
holds the response's encoded audio here and releases a unit once its start is within
``lead_ms`` of the real-time position, so the client holds at most the lead plus one
unit; the rest waits in the engine.

The played position is the clock's estimate of what the client has played: zero until
the response's first audio left, then the time since, never more than what was
released. ``acknowledge`` re-anchors it to what the client says it played (one behind
its jitter buffer moves it back; a claim beyond what was released is clamped); ``cut``
freezes it where the playout was stopped and drops what was never released.

``hold`` pauses the playout without cutting it: nothing more is released, while the
client plays out what it holds (at most the lead plus one unit), so the played position
runs on up to what was released and stops there. ``resume`` releases again from there: a
client that drained its buffer meanwhile hears the reply go on where it paused, after the
gap, with nothing lost (the clock re-anchors so the gap does not count as played).

Unpaced (``paced=False``, each response's ``begin`` says) every unit is released at once
and the clock makes no estimate: what was played is what the client acknowledged, as
before pacing existed.

Pure bookkeeping over an injected monotonic clock (seconds); the session runner owns the
timer that calls ``release`` again at ``next_due``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AudioUnit:
    """One chunk of a response's audio, ready for the wire."""

    audio: str  # encoded and base64'd
    text: str  # the transcript it carries
    end_ms: int  # where it ends in the response's audio
    text_chars: int = 0  # the response's transcript length once this unit is spoken


class PlayoutClock:
    """Pacing and the played position of the session's current response."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.lead_ms = 0
        self.paced = False  # set per response by ``begin``
        self._clock = clock
        self.response_id: str | None = None
        self._pending: deque[AudioUnit] = deque()
        self.pending_chars = 0
        self.released_ms = 0
        # Clock time at which the played position was (or is taken to have been) zero.
        self._anchor: float | None = None
        self._cut_at_ms: int | None = None
        self.held = False  # paused by ``hold``: nothing is released until ``resume``

    def begin(self, response_id: str, *, paced: bool, lead_ms: int) -> None:
        """A new response: nothing released, nothing played (settings as of now)."""
        self.paced, self.lead_ms = paced, lead_ms
        self.response_id = response_id
        self._pending.clear()
        self.pending_chars = 0
        self.released_ms = 0
        self._anchor = None
        self._cut_at_ms = None
        self.held = False

    @property
    def started(self) -> bool:
        """The response's first audio has left."""
        return self._anchor is not None or (not self.paced and self.released_ms > 0)

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    # ---- audio in and out -------------------------------------------------------------

    def push(self, unit: AudioUnit) -> None:
        self._pending.append(unit)
        self.pending_chars += len(unit.audio)

    def release(self) -> list[AudioUnit]:
        """The units due now, in order; the first one of a response is due at once."""
        if not self._pending or self.held:
            return []
        now = self._clock()
        if self._anchor is None and self.paced:
            self._anchor = now
        out: list[AudioUnit] = []
        while self._pending:
            if self.paced and self.released_ms > self._position_ms(now) + self.lead_ms:
                break
            unit = self._pending.popleft()
            self.pending_chars -= len(unit.audio)
            self.released_ms = unit.end_ms
            out.append(unit)
        return out

    def next_due(self) -> float | None:
        """When ``release`` has something again (clock time), or ``None``."""
        if not self.paced or not self._pending or self._anchor is None or self.held:
            return None
        return self._anchor + (self.released_ms - self.lead_ms) / 1000.0

    def played_out_at(self) -> float | None:
        """When everything released so far will have been played (paced), or ``None``."""
        if self._anchor is None or self._cut_at_ms is not None:
            return None
        return self._anchor + self.released_ms / 1000.0

    # ---- what was heard ---------------------------------------------------------------

    def played_ms(self) -> int:
        """The played position of the response (paced sessions)."""
        if self._cut_at_ms is not None:
            return self._cut_at_ms
        if self._anchor is None:
            return 0
        return int(min(self.released_ms, self._position_ms(self._clock())))

    @property
    def playing(self) -> bool:
        """Released audio is still being played (paced, not cut)."""
        if not self.paced or self._cut_at_ms is not None or not self.started:
            return False
        return self.played_ms() < self.released_ms

    def acknowledge(self, played_ms: int) -> int:
        """The client played ``played_ms``: re-anchor the estimate there, clamped to what
        was released. Returns the position taken."""
        taken = max(0, min(int(played_ms), self.released_ms))
        if self._cut_at_ms is not None:
            self._cut_at_ms = taken
        elif self.paced and self.started:
            self._anchor = self._clock() - taken / 1000.0
        return taken

    def cut(self) -> int:
        """Stop the playout here: drop what was never released; the played position
        freezes. Returns it."""
        played = self.played_ms() if self.paced else self.released_ms
        self._pending.clear()
        self.pending_chars = 0
        self._cut_at_ms = played
        return played

    def hold(self) -> None:
        """Pause: release nothing more until ``resume`` (what was released plays out)."""
        self.held = True

    def resume(self) -> None:
        """Release again from where the playout paused. A client that has played all it
        was sent waited in silence since: the played position starts again from the end
        of what was released, not from where the wall clock would put it."""
        if not self.held:
            return
        self.held = False
        if not self.paced or self._anchor is None or self._cut_at_ms is not None:
            return
        now = self._clock()
        if self._position_ms(now) > self.released_ms:
            self._anchor = now - self.released_ms / 1000.0

    def _position_ms(self, now: float) -> float:
        assert self._anchor is not None
        # Rounded to the microsecond: clock arithmetic must not lose a unit to 1e-13 ms.
        return max(0.0, round((now - self._anchor) * 1000.0, 3))
