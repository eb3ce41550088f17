"""When the PersonaPlex slot table steps, and which slots a step advances (``realtime``).

The table steps when its inputs are there, not on a fixed 80 ms grid, and it never lets
a session's input pile up. The rules, in order (``TickPacer.due_batch``):

1. **Ready**: every live slot has its next input (a queued frame or a prompt frame):
   step all of them at once. One session's frame is stepped as soon as it arrives.
2. **Catch-up**: some slot holds more than ``max_backlog_frames`` queued frames (an
   overrun step, a burst from its client): step at once, advancing only the slots that
   hold two or more (each keeps a frame for the next full step, so none is made to
   starve); the others are frozen (exec mask), not fed silence. Repeated until no slot
   holds more than one frame: the floor, a frame waiting for its step.
3. **Deadline**: the period is up (``period`` after the last full step, on an anchored
   grid) plus ``grace`` for late frames: step every live slot; a slot whose frame has
   not come gets silence (its client is behind; real-time pacing goes on without it).

Input that is too old is dropped by the stage, not here (``max_input_lag_ms``).

Why catch-up waits for more than one extra frame: with clients out of phase and
jittering, a session often holds its next frame while the step waits for a late
neighbour; stepping it alone at once would cost a whole table step (the table's shape
is fixed) for nothing, and the next full step would find it empty and feed it silence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class PacedSlot(Protocol):
    @property
    def ready(self) -> bool:
        """It has its next input: a queued frame, or a prompt frame still to feed."""

    @property
    def backlog(self) -> int:
        """Input frames queued, waiting for a tick."""


S = TypeVar("S", bound=PacedSlot)


class TickPacer:
    """The tick rule of one slot table; times in seconds on the stage's clock."""

    def __init__(
        self,
        *,
        period_s: float,
        grace_s: float,
        max_backlog_frames: int,
        clock: Callable[[], float],
    ) -> None:
        self.period_s = period_s
        self.grace_s = grace_s
        self.max_backlog_frames = max_backlog_frames
        self._clock = clock
        # When the table's next frame is due by real time; None while the table is empty.
        self.next_due: float | None = None
        self.catching_up = False

    def start(self) -> None:
        """A slot joined an empty table: its first step is due now."""
        if self.next_due is None:
            self.next_due = self._clock()

    def stop(self) -> None:
        """The table emptied."""
        self.next_due = None

    def due_batch(self, live: Sequence[S]) -> list[S]:
        """The slots to step now (empty: no step is due yet)."""
        if not live or self.next_due is None:
            return []
        if all(slot.ready for slot in live):
            return list(live)
        if any(slot.backlog > self.max_backlog_frames for slot in live):
            self.catching_up = True
        if self.catching_up:
            behind = [slot for slot in live if slot.backlog > 1]
            if behind:
                return behind
            self.catching_up = False
        if self._clock() >= self.next_due + self.grace_s:
            return list(live)
        return []

    def wake_after_s(self) -> float | None:
        """Seconds until the deadline step, when nothing is ready before it."""
        if self.next_due is None:
            return None
        return max(0.0, self.next_due + self.grace_s - self._clock())

    def late_frame(self, arrived_at: float) -> None:
        """A frame came after its step had gone ahead with silence (and was dropped).

        The deadline moves to a period after it, so the grid follows that client's phase:
        its next frame is in time instead of every one landing just past the deadline.
        """
        if self.next_due is not None:
            self.next_due = max(self.next_due, arrived_at + self.period_s)

    def stepped(self, *, started: float, full: bool, starved: bool) -> None:
        """Move the deadline after a step that began at ``started``.

        A catch-up step (not ``full``) leaves it: it is extra, not a period. A full step
        whose inputs were all there re-anchors the grid on them (the next deadline is a
        period after this input-driven step); a deadline step that fed silence keeps the
        grid (so a silent client still gets exactly real time) without owing more than
        one period after a stall.
        """
        if not full or self.next_due is None:
            return
        if starved:
            self.next_due = max(self.next_due + self.period_s, started)
        else:
            self.next_due = started + self.period_s
