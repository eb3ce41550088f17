"""The server-wide bound on the input audio all sessions of one engine hold.

A session holds the user's audio in the engine until a response takes it: the turn not
yet committed (``session.input``), a turn committed for a response still to be asked for
(``committed_input``) and one committed while a response was active (``deferred_commit``).
``max_input_turn_s`` bounds one turn; an ``InputAudioBudget`` (``max_buffered_input_s``)
bounds the sum over every session, so that many sessions streaming at once cannot take
the server's memory between them. An append that does not fit is refused with
``server_input_audio_full`` and the session keeps everything it held before.

The budget belongs to one session manager; each runner takes its session's share as an
``InputAudioHold``. An append reserves its samples while it is decoded (in a pool thread,
before turn detection sees them) and its ``AppendReservation`` ends on every path: kept
when the samples join the turn, given back when the append is refused or cancelled. The
runner ``settle``\\ s the hold to what its session truly holds after every step that may
have changed it, so each way audio is let go of (a response takes the turn, a clear or a
talk-over drops it, server VAD forgets old silence) returns its share without being
listed, and closing the hold at session end returns all of it.

Runners share one budget from the orchestrator loop and from pool threads: every count
changes under the budget's lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import DuplexEngineSession


class InputAudioBudget:
    """How many samples (at the plugin's input rate) all sessions may hold together;
    ``limit_s`` None: no bound beyond each turn's."""

    def __init__(self, limit_s: float | None, rate_hz: int) -> None:
        self.limit_s = limit_s
        self.rate_hz = rate_hz
        self.limit_samples = int(limit_s * rate_hz) if limit_s is not None else None
        self._lock = threading.Lock()
        self._used = 0

    @property
    def used_samples(self) -> int:
        """Samples held or reserved by every session."""
        with self._lock:
            return self._used

    def hold(self) -> InputAudioHold:
        """A new session's share (empty)."""
        return InputAudioHold(self)


@dataclass(slots=True)
class AppendReservation:
    """The samples one append reserved while it is decoded; it ends once."""

    samples: int = 0
    ended: bool = False


class InputAudioHold:
    """One session's share of an ``InputAudioBudget``: what its session holds
    (``held_samples``) plus what its appends in flight have reserved."""

    def __init__(self, budget: InputAudioBudget) -> None:
        self.budget = budget
        self._held = 0
        self._reserved = 0
        self._closed = False

    @property
    def held_samples(self) -> int:
        with self.budget._lock:
            return self._held

    def begin(self) -> AppendReservation:
        """A reservation for an append about to be decoded (it reserves nothing yet)."""
        return AppendReservation()

    def reserve(self, reservation: AppendReservation, samples: int) -> bool:
        """Reserve ``samples`` for the append; False when the budget has no room for
        them (or the append already ended: it was cancelled, its result is dropped)."""
        budget = self.budget
        with budget._lock:
            if self._closed or reservation.ended:
                return False
            limit = budget.limit_samples
            if limit is not None and budget._used + samples > limit:
                return False
            reservation.samples += samples
            self._reserved += samples
            budget._used += samples
            return True

    def end(self, reservation: AppendReservation, *, kept: bool) -> None:
        """The append is done: its samples joined the session's input (``kept``) or
        were refused or dropped. Only the first call counts."""
        with self.budget._lock:
            if reservation.ended:
                return
            reservation.ended = True
            samples, reservation.samples = reservation.samples, 0
            if self._closed:
                return
            self._reserved -= samples
            if kept:
                self._held += samples
            else:
                self.budget._used -= samples

    def settle(self, samples: int) -> None:
        """The session now holds ``samples``: take or give back the difference. Only
        appends are refused; what the session already holds is counted as it is."""
        budget = self.budget
        with budget._lock:
            if self._closed:
                return
            budget._used += samples - self._held
            self._held = samples

    def close(self) -> None:
        """The session ended: give everything back; later calls change nothing."""
        with self.budget._lock:
            if self._closed:
                return
            self._closed = True
            self.budget._used -= self._held + self._reserved
            self._held = self._reserved = 0


def held_input_samples(session: DuplexEngineSession) -> int:
    """The samples of user audio ``session`` holds: its open turn and the committed turns
    no response has taken yet."""
    held = session.input.samples
    for audio in (session.committed_input, session.deferred_commit):
        if audio is not None:
            held += audio.size
    return held
