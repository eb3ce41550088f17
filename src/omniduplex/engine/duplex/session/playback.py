"""What the user heard: the one owner of a session's outgoing audio and its truth.

``Playback`` holds the session's playout clock (``playout.py``) and the runner's wake-up
for it, releases a response's audio as it falls due, stops or cuts it (a cancel, a
talk-over), holds and resumes it (a backchannel), and keeps each response's playback
cursor: what was generated, sent, played and committed. What the client says it played
decides what history keeps: ``playback.ack`` moves a response's played/committed cursor
forward (monotonic), or, with ``truncate: true`` (DESIGN decision 5), sets it exactly and
truncates the assistant item in history at ``played_ms``. A ``conversation.item.truncate``
(the OpenAI spelling of a truncating acknowledgement) of the response still going out
stops it there (``stops_at``); of a stored item, ``conversation.ItemCommands`` answers
it. Paced, the clock itself knows what was heard, and a client's word only corrects it.

A response the model finished stays active until its last audio has left; after
``response.done`` its released audio may still be playing (paced), and a talk-over in
that stretch truncates the stored item at the played position.

Part of the session runner (single writer); every method runs on the orchestrator loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ....protocol.duplex import commands as cmd
from ....protocol.duplex import truncate_transcript
from .emitter import SessionEmitter
from .playout import AudioUnit, PlayoutClock
from .state import ActiveResponse, DuplexEngineSession, PlaybackCursor

Wake = Callable[[float | None], None]


class Playback:
    """``wake(at)``: the runner's one playout timer (``at`` in the clock's seconds; None
    cancels it)."""

    def __init__(
        self,
        session: DuplexEngineSession,
        out: SessionEmitter,
        *,
        clock: Callable[[], float],
        wake: Wake,
    ) -> None:
        self.session = session
        self.out = out
        self.clock = PlayoutClock(clock)
        self._wake = wake
        # A finished response whose released audio is still playing out (paced): its
        # output_audio_buffer.stopped is owed, and a talk-over truncates its item.
        self._playing_out: ActiveResponse | None = None

    # ---- what plays -----------------------------------------------------------------

    @property
    def paced(self) -> bool:
        return self.clock.paced

    @property
    def playing(self) -> bool:
        """Released audio has not finished playing out."""
        return self.clock.playing

    def assistant_speaking(self) -> bool:
        """The assistant's voice is on: its audio plays, or a reply whose audio began is
        still in progress (between two sentences the model has not finished yet)."""
        return self.clock.playing or (self.session.response is not None and self.clock.started)

    @property
    def pending(self) -> bool:
        return self.clock.pending

    @property
    def pending_chars(self) -> int:
        return self.clock.pending_chars

    # ---- a response's audio -----------------------------------------------------------

    def begin(self, response: ActiveResponse) -> None:
        """A new response: the last one's audio counts as played out."""
        self.end_play_out()
        session = self.session
        self.clock.begin(
            response.response_id, paced=session.settings.paced, lead_ms=session.playout_lead_ms()
        )
        session.playback[response.response_id] = PlaybackCursor()

    def push(self, unit: AudioUnit) -> None:
        self.clock.push(unit)

    def release(self, response: ActiveResponse) -> None:
        """Send the audio of ``response`` that is due."""
        clock = self.clock
        first = not clock.started
        units = clock.release()
        if units and first and clock.paced:
            self.out.output_audio_started(response.response_id)
        cursor = self.session.cursor(response.response_id)
        for unit in units:
            cursor.sent_ms = unit.end_ms
            self.out.audio_delta(response, unit.audio, unit.text, unit.end_ms, unit.text_chars)

    def wake_when_due(self) -> None:
        self._wake(self.clock.next_due())

    def on_due(self) -> None:
        """The timer fired with no response active: the last one may have played out."""
        self.end_play_out(only_if_played=True)

    def hold(self) -> None:
        self.clock.hold()
        self._wake(None)

    def resume(self) -> bool:
        """Resume held audio; False if none was held."""
        if not self.clock.held:
            return False
        self.clock.resume()
        return True

    # ---- stopping -------------------------------------------------------------------

    def stop(self, response: ActiveResponse) -> int | None:
        """Cut the playout of ``response``: what was not released never is. Paced and
        started, the played position becomes what was heard (returned) and the client is
        told its buffer was cleared; otherwise ``None``."""
        clock = self.clock
        self._wake(None)
        started = clock.paced and clock.started
        played = clock.cut()
        if not started:
            return None
        cursor = self.session.cursor(response.response_id)
        cursor.played_ms = cursor.committed_ms = played
        self.out.output_audio_cleared(response.response_id)
        return played

    def cut_played_out(self) -> bool:
        """A talk-over after ``response.done`` while its audio still plays: the stored
        item is truncated at the played position."""
        response = self._playing_out
        if response is None or not self.clock.playing:
            return False
        self._playing_out = None
        self._wake(None)
        played = self.clock.cut()
        cursor = self.session.cursor(response.response_id)
        cursor.played_ms = cursor.committed_ms = played
        self.out.output_audio_cleared(response.response_id)
        if truncate_stored_item(self.session, response.item_id, played):
            self.out.item_truncated(response.item_id, 0, played)
        return True

    def end_play_out(self, *, only_if_played: bool = False) -> None:
        """The last response's audio has played out (or a new response starts):
        ``output_audio_buffer.stopped``."""
        response = self._playing_out
        if response is None:
            return
        if only_if_played and self.clock.playing:
            self._wake(self.clock.played_out_at())
            return
        self._playing_out = None
        if self.session.settings.playback_commit_policy == "ack_only":
            # History keeps what was heard: now all of what was played out.
            truncate_stored_item(self.session, response.item_id, self.clock.played_ms())
        self.out.output_audio_stopped(response.response_id)

    def response_ended(self, response: ActiveResponse, status: str) -> None:
        """``response.done`` went out: a completed response may still be playing."""
        clock = self.clock
        if status == "completed" and clock.playing:
            self._playing_out = response
            self._wake(clock.played_out_at())
        elif status == "completed" and clock.paced and clock.started:
            self.out.output_audio_stopped(response.response_id)
        elif status == "completed" and not clock.paced and response.wants_audio:
            # Nothing here knows what the client has played: OpenAI's estimate, the
            # audio's whole duration from response.done, is when the user may be idle.
            self.session.idle.response_unheard(round(response.audio_ms))

    def abandon(self) -> None:
        """The session closes: nothing more plays."""
        self._wake(None)
        self.clock.cut()

    # ---- what was heard ----------------------------------------------------------------

    def heard_ms(self, response: ActiveResponse, status: str) -> tuple[int, int]:
        """``(audio_ms, committed_ms)`` the stored item of an ending response keeps."""
        cursor = self.session.cursor(response.response_id)
        audio_ms = round(response.audio_ms)
        committed = cursor.committed_ms
        if self.clock.paced:
            if status != "completed":
                audio_ms = cursor.sent_ms  # the rest never left
            # The clock knows what was heard without an ack; the rest is committed as it
            # plays out (``end_play_out``).
            committed = max(committed, self.clock.played_ms())
        return audio_ms, committed

    def acknowledge(self, command: cmd.AckPlayback) -> None:
        """``playback.ack``: the client's word on what it played."""
        clock = self.clock
        resolved = resolve_ack(self.session, command)
        if clock.paced and resolved is not None and resolved[0] == clock.response_id:
            # The client's word corrects the clock; it cannot have played what never left.
            taken = clock.acknowledge(command.played_ms)
            committed = command.committed_ms
            command = replace(
                command,
                played_ms=taken,
                committed_ms=None if committed is None else min(committed, taken),
            )
        self._apply_ack(command, resolved)

    def stops_at(self, command: cmd.TruncateItem) -> bool:
        """A truncate of the response still going out (paced): the client stopped playing
        it at ``audio_end_ms``, which the clock takes as played; the caller cancels it.
        False: an ordinary truncate of a stored item."""
        response = self.session.response
        clock = self.clock
        if (
            response is not None
            and command.item_id == response.item_id
            and clock.paced
            and clock.started
        ):
            clock.acknowledge(command.audio_end_ms)
            return True
        return False

    def _apply_ack(self, command: cmd.AckPlayback, resolved: tuple[str, str] | None) -> None:
        session, out = self.session, self.out
        if resolved is None:
            out.error(
                "playback_item_not_found", "No response to acknowledge", event_id=command.event_id
            )
            return
        response_id, item_id = resolved
        if item_id != f"item_{response_id}":
            out.error(
                "playback_item_mismatch",
                f"item {item_id} does not belong to response {response_id}",
                event_id=command.event_id,
            )
            return
        if response_id not in session.playback:
            out.error(
                "playback_item_not_found",
                f"Unknown assistant item: {item_id}",
                event_id=command.event_id,
            )
            return
        cursor = session.playback[response_id]
        played = max(0, int(command.played_ms))
        committed = played if command.committed_ms is None else max(0, int(command.committed_ms))
        if command.truncate:
            limit = max(cursor.sent_ms, cursor.generated_ms)
            cursor.played_ms = min(played, limit)
            cursor.committed_ms = min(committed, limit)
        else:
            cursor.played_ms = max(cursor.played_ms, played)
            cursor.committed_ms = max(cursor.committed_ms, committed)
        history_committed = self._commit_history(item_id, cursor.committed_ms, command.truncate)
        out.playback_acknowledged(
            item_id=item_id,
            played_ms=cursor.played_ms,
            committed_ms=cursor.committed_ms,
            truncate=command.truncate,
            playback=cursor.as_dict(),
            history_committed=history_committed,
        )

    def _commit_history(self, item_id: str, committed_ms: int, hard: bool) -> bool:
        """Rewrite the stored assistant item to the acknowledged prefix of its transcript."""
        session = self.session
        if session.items.get(item_id) is None:
            return False  # still streaming: the item is stored when the response ends
        if session.settings.playback_commit_policy != "ack_only" and not hard:
            return True
        return truncate_stored_item(session, item_id, committed_ms)


def resolve_ack(session: DuplexEngineSession, command: cmd.AckPlayback) -> tuple[str, str] | None:
    """The (response id, item id) an ack names: by either, else the current or last one."""
    response_id = command.response_id
    item_id = command.item_id
    if response_id is None and item_id is not None and item_id.startswith("item_"):
        response_id = item_id[len("item_") :]
    if response_id is None:
        response_id = session.response.response_id if session.response else session.last_response_id
    if response_id is None:
        return None
    return response_id, item_id or f"item_{response_id}"


def truncate_stored_item(session: DuplexEngineSession, item_id: str, audio_end_ms: int) -> bool:
    """Cut a stored assistant item's audio and transcript at ``audio_end_ms`` (the server
    knows the user heard no more); False if there is no such item."""
    stored = session.items.get(item_id)
    if stored is None:
        return False
    heard = truncate_transcript(
        stored.full_transcript, audio_end_ms, stored.audio_duration_ms, stored.marks
    )
    for part in stored.item.get("content", []):
        if part.get("type") == "output_audio":
            part["transcript"] = heard
    return True
