"""``idle_timeout_ms`` (server VAD): a user who stays quiet after the assistant spoke is
prompted.

OpenAI's rule: the timeout runs from when the last response's audio finished playing, the
user's speech resets it, and when it expires the server sends
``input_audio_buffer.timeout_triggered``, commits the silent segment as an empty user item
and answers it (when ``create_response`` is on).

Silence is counted in input audio time, as every other server-VAD duration is (DESIGN
decision 12), so the watch needs no timer of its own: each append under server VAD says
whether anyone had the floor (the user speaking, a response in progress, or its audio
still playing out by the playout clock) and, when no one had, how far the silence now
reaches. The silence starts where the first append found the floor free. A client that
streams its microphone, as OpenAI's clients do, is prompted ``idle_timeout_ms`` after the
reply finished playing; one that sends no audio is not prompted.

Unpaced sessions (the playout clock makes no estimate of what was heard): the silence
starts the response's audio duration after its end, OpenAI's own estimate
(``response.done`` plus the playback duration).

The watch is armed by the floor being taken: nothing fires before anyone spoke, and once
it fired it waits for the next speech or response, so one silence prompts once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IdleTimeout:
    """The silence that timed out, on the session's input clock (ms)."""

    audio_start_ms: int
    audio_end_ms: int

    @property
    def silent_ms(self) -> int:
        return self.audio_end_ms - self.audio_start_ms


class IdleWatch:
    """One session's silence since the floor was last taken. Written by its runner's
    parts only (the single writer)."""

    def __init__(self) -> None:
        self._since_ms: int | None = None  # where the current silence began
        self._armed = False  # the floor was taken since the session opened or last fired
        self._unheard_ms = 0  # unpaced: the last response's audio the client still plays

    def floor_taken(self) -> None:
        """The user speaks or a response is in progress: the silence so far is over."""
        self._since_ms = None
        self._unheard_ms = 0
        self._armed = True

    def response_unheard(self, audio_ms: int) -> None:
        """An unpaced response just ended with ``audio_ms`` of audio the client is taken
        to play from now on: the silence starts after it."""
        self._unheard_ms = max(0, audio_ms)

    def restart(self) -> None:
        """Turn detection came back on: what happened while it was off is unknown, so a
        silence starts afresh at the next append."""
        self._since_ms = None

    def silence(self, start_ms: int, end_ms: int, timeout_ms: int | None) -> IdleTimeout | None:
        """An append covering ``[start_ms, end_ms)`` found the floor free; returns the
        timeout that expired with it, if one did (then the watch waits for the floor to
        be taken again)."""
        if not self._armed:
            return None
        if self._since_ms is None:
            self._since_ms = start_ms + self._unheard_ms
            self._unheard_ms = 0
        if timeout_ms is None or end_ms - self._since_ms < timeout_ms:
            return None
        expired = IdleTimeout(self._since_ms, end_ms)
        self._since_ms = None
        self._armed = False
        return expired
