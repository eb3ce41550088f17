"""User input of one session: appends, commits, clears, text, items, session updates.

Part of the session runner (single writer), through its ``SessionContext``. An append
whose turn detection runs a model (a neural VAD, a turn-completion model), or that is
long, is decoded, resampled and classified in the manager's thread pool inside a tracked
input task (decision 10: the orchestrator loop never runs model work); the task re-checks
the session's input generation after the await, so input cancelled meanwhile is dropped
and nothing of it reaches the conversation or a stage. A short append under loudness
turn detection (or none), with no input task in flight, is taken on the loop at once:
its decoding costs a fraction of the hop to a pool thread and back (a task, a future,
a wake-up of the loop), which made up over a third of the server's CPU per event.

An append is refused whole, before turn detection sees it, when it would take the turn
past ``max_turn_s`` (``input_audio_buffer_full``) or the server's input audio past its
budget (``server_input_audio_full``, ``input_budget.py``).

Under server VAD each append also feeds the session's idle watch (``idle_timeout.py``):
a silence past ``idle_timeout_ms`` is committed as an empty user turn and answered."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ....protocol.duplex import (
    IDLE_TIMEOUT_KEY,
    IMAGE_SIGNATURES,
    InputAudioConverter,
    RealtimeProtocolError,
    apply_partially,
    b64decode_strict,
    rms,
)
from ....protocol.duplex import commands as cmd
from ..contracts import StageSubmission
from ..plugin import DuplexRuntimeConfigError, InputImage, InputImageError, ModelInputTranscript
from ..settings import SessionSettings
from .context import SessionContext
from .conversation import StoredItem
from .idle_timeout import IdleTimeout
from .input_budget import AppendReservation, InputAudioBudget, InputAudioHold
from .lease import LeaseActivity
from .live_transcript import LiveTranscription
from .part_events import AnswerTurn, HoldReply, ResumeReply, TalkedOver
from .state import SIGNAL_STEPS, InputTurn, TurnStep, new_item_id
from .turn_detection import TurnDetector, TurnEvent

# Speech is declared some frames after its onset; keep this much more than the padding.
_VAD_LAG_MARGIN_MS = 500
# The longest append taken on the loop: 0.34 s of 24 kHz pcm16 (clients stream 20 to
# 100 ms chunks), about 60 us of decoding and resampling on one core of the CI machine
# class, under a third of what the hop to a pool thread and back costs.
_LOOP_APPEND_MAX_BYTES = 16 * 1024


def _frame_image(frame: str) -> InputImage:
    """A camera frame (bare base64 JPEG/PNG, its header checked by the wire) as an image."""
    data = b64decode_strict(frame)
    for mime_type, signature in IMAGE_SIGNATURES.items():
        if data.startswith(signature):
            return InputImage(mime_type, data)
    raise RealtimeProtocolError(
        "each video frame must be a JPEG or PNG image", "invalid_video_frames"
    )


@dataclass(slots=True)
class _DecodedAppend:
    """An append as the pool thread left it: its samples at the plugin's rate and, under
    server turn detection, what the detector found in them."""

    samples: np.ndarray
    over_limit: bool = False  # past the turn's bound
    over_budget: bool = False  # past the server's input audio budget
    detector: TurnDetector | None = None
    was_speaking: bool = False  # the detector's state before these samples
    turn_events: list[TurnEvent] = field(default_factory=list)
    speech_extent_ms: int = 0  # the detector's speech extent after these samples


@dataclass(slots=True)
class _HeldSpeech:
    """Speech that started while the assistant spoke, under ``backchannel_policy:
    ignore``: not announced until it outlasts ``backchannel_max_ms`` (a barge-in) or ends
    before (a backchannel, dropped). Meanwhile the reply's playout is held (paused)."""

    onset_ms: int  # the speech's own onset (the session's input clock)


class InputFlow:
    """The runner's part that takes the user's input: it owns the input audio clock, the
    resampler and the server turn detector of its session."""

    def __init__(
        self,
        ctx: SessionContext,
        *,
        max_turn_s: float | None = None,
        audio_hold: InputAudioHold | None = None,
        live: LiveTranscription,
    ) -> None:
        self.ctx = ctx
        self.session = ctx.session
        self.out = ctx.out
        # The transcription of this input while the user speaks.
        self.live = live
        plugin = ctx.plugin
        rate = plugin.input_sample_rate_hz
        self.rate_hz = rate
        # None: turns are the client's (``turn_detection: null``).
        self.turns: TurnDetector | None = TurnDetector.from_settings(
            ctx.session.settings,
            rate,
            plugin.create_speech_classifier,
            completion_model=plugin.turn_completion_model(),
        )
        self._max_turn_s = max_turn_s
        self._max_turn_samples = int(rate * max_turn_s) if max_turn_s else None
        # The session's share of the server's input audio budget (the runner settles it).
        self._hold = audio_hold or InputAudioBudget(None, rate).hold()
        self._converter = InputAudioConverter(rate)
        # Appends decode in pool threads one after another (the input tail orders them),
        # but a cancelled task's thread may still be running while the loop resets the
        # input: the lock keeps the resampler and the turn detector to one thread at a time.
        self._input_lock = threading.Lock()
        self._position = 0  # samples appended this session (the input audio clock)
        self._stream_units = np.zeros(0, dtype=np.float32)
        self._streamed = False  # a unit reached stage 0 (streaming plugins)
        self._held_speech: _HeldSpeech | None = None  # over the assistant, not yet judged

    @property
    def _held(self) -> _HeldSpeech | None:
        return self._held_speech

    @_held.setter
    def _held(self, held: _HeldSpeech | None) -> None:
        # Held speech ends by silence alone, as under server VAD, whatever the turn
        # detection: semantic_vad would end "Wait, sorry," at its first short pause and
        # judge each piece of an interruption a backchannel.
        self._held_speech = held
        if self.turns is not None:
            self.turns.by_silence_only = held is not None

    # ---- appends ----------------------------------------------------------------

    def _decode(
        self, command: cmd.AppendAudio, generation: int, reservation: AppendReservation
    ) -> _DecodedAppend | None:
        """A pool thread's (or, for a light append, the loop's) share of an append:
        convert it, reserve its samples in the server's budget and run turn detection
        over it; ``None`` when the input was cancelled before this ran (it must then
        change nothing)."""
        with self._input_lock:
            if self.session.input_generation != generation:
                return None
            samples = self._converter.convert(command.audio, command.format, command.sample_rate_hz)
            limit = self._max_turn_samples
            if limit is not None and self.session.input.samples + samples.size > limit:
                return _DecodedAppend(samples, over_limit=True)
            if not self._hold.reserve(reservation, samples.size):
                return _DecodedAppend(samples, over_budget=True)
            detector = self.turns
            if detector is None:
                return _DecodedAppend(samples)
            was_speaking = detector.speaking
            detector.words = self.live.heard()
            events = detector.process(samples)
            return _DecodedAppend(
                samples,
                detector=detector,
                was_speaking=was_speaking,
                turn_events=events,
                speech_extent_ms=detector.speech_extent_ms,
            )

    def _takes_on_loop(self, command: cmd.AppendAudio) -> bool:
        """Whether this append is light enough to take on the loop now (the order of
        appends holds: nothing of the input is still in a pool thread)."""
        if self.ctx.input_tail.busy or len(command.audio) > _LOOP_APPEND_MAX_BYTES:
            return False
        return self.turns is None or not self.turns.runs_a_model

    def _append_on_loop(
        self, command: cmd.AppendAudio, reservation: AppendReservation, arrived_at: float
    ) -> None:
        try:
            decoded = self._decode(command, self.session.input_generation, reservation)
        except RealtimeProtocolError as exc:
            self.out.error(exc.code, exc.message, event_id=command.event_id)
            decoded = None
        finally:
            self.ctx.admission.release(command)
        try:
            if decoded is not None:
                self._take(decoded, command, reservation, arrived_at)
        finally:
            self._hold.end(reservation, kept=False)  # a no-op once kept

    def _take(
        self,
        decoded: _DecodedAppend,
        command: cmd.AppendAudio,
        reservation: AppendReservation,
        arrived_at: float,
    ) -> None:
        self.session.arrival_jitter.observe(arrived_at, decoded.samples.size / self.rate_hz)
        self._accept(decoded, command, reservation)

    def on_append(self, command: cmd.AppendAudio) -> None:
        session = self.session
        generation = session.input_generation
        ctx = self.ctx
        # Stamped on receipt: a pool thread's delay in decoding is ours, not the client's.
        arrived_at = ctx.clock()
        reservation = self._hold.begin()
        if self._takes_on_loop(command):
            self._append_on_loop(command, reservation, arrived_at)
            return
        released = False

        def release(_task: Any = None) -> None:
            # Once, on every path: converted, failed, or cancelled (even before starting).
            nonlocal released
            if not released:
                released = True
                ctx.admission.release(command)

        def unreserve(_task: Any) -> None:
            # A no-op once the samples joined the turn (``_accept`` ended it, kept).
            self._hold.end(reservation, kept=False)

        async def work() -> None:
            try:
                decoded = await ctx.offload(self._decode, command, generation, reservation)
            except RealtimeProtocolError as exc:
                self.out.error(exc.code, exc.message, event_id=command.event_id)
                return
            finally:
                release()
            if decoded is None or not session.open or session.input_generation != generation:
                return  # the input was cancelled while it was being decoded
            self._take(decoded, command, reservation, arrived_at)

        task = ctx.input_tail.track(work)
        task.add_done_callback(release)
        task.add_done_callback(unreserve)

    def _accept(
        self, decoded: _DecodedAppend, command: cmd.AppendAudio, reservation: AppendReservation
    ) -> None:
        session = self.session
        settings = session.settings
        samples = decoded.samples
        if decoded.over_limit:
            self.out.error(
                "input_audio_buffer_full",
                f"the input audio buffer holds at most {self._max_turn_s:g} s of audio;"
                " commit or clear it before appending more",
                event_id=command.event_id,
            )
            return
        if decoded.over_budget:
            self._refuse_over_budget(samples.size, command)
            return
        if command.video_frames and not self._take_frames(command):
            return
        try:
            session.lease.touch(self.ctx.clock(), LeaseActivity.APPEND)
        except Exception:
            return
        self._hold.end(reservation, kept=True)
        turn = session.input
        start_ms = self._position * 1000 // self.rate_hz
        self._position += samples.size
        turn.chunks.append(samples)
        turn.samples += samples.size
        turn.appended = True
        hints = command.hints or {}
        for key in ("transcript", "text"):
            hint = hints.get(key)
            if (
                isinstance(hint, str)
                and hint
                and (not turn.transcript_hints or turn.transcript_hints[-1] != hint)
            ):
                turn.transcript_hints.append(hint)
        if decoded.detector is not None:
            self._accept_with_vad(decoded)
            self._watch_idle(decoded.detector, start_ms)
        else:
            is_speech = command.is_speech
            if is_speech is None:
                is_speech = rms(samples) >= settings.overlap_silence_rms
            if is_speech:
                turn.speech_samples += samples.size
                if not turn.speech_active:
                    turn.speech_active = True
                    turn.item_id = turn.item_id or new_item_id()
                    turn.audio_start_ms = start_ms
                    self.out.speech_started(start_ms, turn.item_id)
                session.advance(TurnStep.USER_SPEECH)
                self._overlap(samples.size)
        if self.ctx.plugin.streams_input:
            self._stream(samples)

    def _take_frames(self, command: cmd.AppendAudio) -> bool:
        """Hand the append's camera frames to the model before its audio, so they ride
        the unit that audio completes; ``False`` (the error sent, the append refused
        whole) when the model cannot read one."""
        try:
            images = [_frame_image(frame) for frame in command.video_frames]
        except RealtimeProtocolError as exc:
            self.out.error(exc.code, exc.message, event_id=command.event_id, param="video_frames")
            return False
        try:
            self.ctx.plugin.take_input_images(self.session.model_state, images)
        except InputImageError as exc:
            self.out.error(
                "invalid_video_frames",
                f"video_frames[{exc.index}]: {exc}",
                event_id=command.event_id,
                param="video_frames",
            )
            return False
        return True

    def _refuse_over_budget(self, samples: int, command: cmd.AppendAudio) -> None:
        """Other sessions may have filled the server's input budget: not the client's
        fault, so a capacity error it may retry (after committing or clearing its own
        buffer, or once others have)."""
        budget = self._hold.budget
        rate = self.rate_hz
        self.out.error(
            "server_input_audio_full",
            f"the server holds at most {budget.limit_s:g} s of input audio across all"
            f" sessions and this append ({samples / rate:.3g} s) does not fit now; this"
            f" session holds {self._hold.held_samples / rate:.3g} s of it. Commit or clear"
            " the input audio buffer, or retry later",
            event_id=command.event_id,
            retryable=True,
        )

    def _accept_with_vad(self, decoded: _DecodedAppend) -> None:
        detector = decoded.detector
        assert detector is not None
        samples = decoded.samples
        turn = self.session.input
        live = self.live
        if decoded.was_speaking:
            turn.speech_samples += samples.size
            live.feed(samples)
        settings = self.session.settings
        for event in decoded.turn_events:
            turn = self.session.input  # a commit or a dropped backchannel starts a new one
            if event.kind == "started":
                turn.speech_active = True
                turn.speech_samples += samples.size
                turn.item_id = turn.item_id or new_item_id()
                turn.audio_start_ms = event.audio_ms
                onset_ms = event.onset_ms if event.onset_ms is not None else event.audio_ms
                speaking = self.ctx.playback.assistant_speaking()
                if settings.backchannel_policy == "ignore" and speaking:
                    self._held = _HeldSpeech(onset_ms)
                    # Pause the reply now, not once judged: an interruption then stops
                    # within what the client holds, a backchannel resumes it losing nothing.
                    if self.session.response is not None:
                        self.ctx.tell(HoldReply())
                        self.out.overlap_decision(settings.overlap_policy, "pause", "held_speech")
                    continue
                self._announce_speech()
            elif event.kind == "stopped" and turn.speech_active:
                held = self._held
                if held is not None:
                    if event.audio_ms - held.onset_ms < settings.backchannel_max_ms:
                        self._ignore_backchannel()
                        continue
                    self._announce_speech()
                turn.speech_active = False
                self.out.speech_stopped(event.audio_ms, turn.item_id)
                create = settings.turn_detection.get("create_response", True)
                answer = self.commit(create_response=bool(create), event_id=None, vad=True)
                if answer is not None:
                    self.ctx.tell(answer)
        for decision in detector.resolved_decisions():
            self.out.turn_decision(decision)
        if (
            self._held is not None
            and detector.speaking
            and decoded.speech_extent_ms >= settings.backchannel_max_ms
        ):
            self._announce_speech()
        if not detector.speaking and not self.session.input.speech_active:
            self._forget_old_silence(self.session.input, detector.prefix_padding_ms)

    def _watch_idle(self, detector: TurnDetector, start_ms: int) -> None:
        """Server VAD's ``idle_timeout_ms`` (``idle_timeout.py``): this append either
        found someone on the floor or extends the silence, which may time out now."""
        session = self.session
        watch = session.idle
        if (
            detector.speaking
            or session.input.speech_active
            or self._held is not None
            or session.response is not None
            or self.ctx.playback.playing  # the reply's audio is still playing out
        ):
            watch.floor_taken()
            return
        timeout_ms = (session.settings.turn_detection or {}).get(IDLE_TIMEOUT_KEY)
        expired = watch.silence(start_ms, self._position * 1000 // self.rate_hz, timeout_ms)
        if expired is not None:
            answer = self._time_out(expired)
            if answer is not None:
                self.ctx.tell(answer)

    def _time_out(self, expired: IdleTimeout) -> AnswerTurn | None:
        """The user stayed quiet: OpenAI says so, commits the silent segment as an empty
        user item and answers it when ``create_response`` is on."""
        settings = self.session.settings
        turn = self.session.input
        turn.item_id = turn.item_id or new_item_id()
        self.out.timeout_triggered(expired.audio_start_ms, expired.audio_end_ms, turn.item_id)
        create = settings.turn_detection.get("create_response", True)
        return self.commit(create_response=bool(create), event_id=None, vad=True, silence=expired)

    def _announce_speech(self) -> None:
        """The turn's speech is announced (``speech_started``) and, over a reply, barges
        in: at once, or once held speech outlasted a backchannel."""
        held, self._held = self._held, None
        session = self.session
        turn = session.input
        session.advance(TurnStep.USER_SPEECH)
        self.out.speech_started(turn.audio_start_ms, turn.item_id)
        if session.response is not None or self.ctx.playback.playing:
            self.out.overlap_decision(
                session.settings.overlap_policy,
                "barge_in",
                "speech_beyond_backchannel" if held else "server_vad_speech_started",
            )
            self.ctx.tell(TalkedOver("turn_detected"))
        turn_start = self._position - turn.samples
        assert turn.item_id is not None
        self.live.begin(turn.item_id, turn.audio_start_ms * self.rate_hz // 1000 - turn_start)

    def _ignore_backchannel(self) -> None:
        """Held speech ended within ``backchannel_max_ms``: a backchannel. The reply goes
        on; its audio is no turn and nothing of it reaches the client's events."""
        self._held = None
        session = self.session
        session.input = InputTurn()
        with self._input_lock:
            if self.turns is not None:
                self.turns.reset(self._position)
        self.live.abort()
        self.out.overlap_decision(session.settings.overlap_policy, "ignore", "backchannel")
        self.ctx.tell(ResumeReply())

    def _forget_old_silence(self, turn: InputTurn, padding_ms: int) -> None:
        """Under server VAD a turn starts at most ``prefix_padding_ms`` before its speech,
        so audio older than that (plus the detector's own lag) can never be part of one:
        a session that listens for an hour must not hold an hour of silence."""
        keep = self.rate_hz * (padding_ms + _VAD_LAG_MARGIN_MS) // 1000
        if turn.samples <= 2 * keep:
            return
        recent = turn.audio()[-keep:].copy()
        turn.chunks = [recent]
        turn.samples = recent.size

    def _overlap(self, samples: int) -> None:
        """Speech while the assistant talks, without server VAD: apply the overlap policy."""
        session = self.session
        if session.response is None and not self.ctx.playback.playing:
            return
        settings = session.settings
        session.overlap_speech_ms += samples * 1000 // self.rate_hz
        if settings.overlap_policy != "barge_in_on_speech":
            return
        if session.overlap_speech_ms < settings.overlap_barge_in_ms:
            return
        session.overlap_speech_ms = 0
        if not session.capabilities.supports_barge_in:
            self.out.overlap_decision(settings.overlap_policy, "listen", "barge_in_unsupported")
            return
        self.out.overlap_decision(settings.overlap_policy, "barge_in", "barge_in_on_speech")
        self.ctx.tell(TalkedOver("barge_in"))

    def _stream(self, samples: np.ndarray) -> None:
        """Model-native plugins get every whole unit of input as it arrives."""
        ctx = self.ctx
        session = self.session
        unit = self.rate_hz * session.capabilities.chunk_period_ms // 1000
        self._stream_units = np.concatenate((self._stream_units, samples))
        while self._stream_units.size >= unit:
            chunk, self._stream_units = self._stream_units[:unit], self._stream_units[unit:]
            data = ctx.plugin.plan_input_unit(session.model_state, chunk, fence=session.fence)
            if data is not None:
                ctx.stage.submit(StageSubmission.opening(session.fence, "stage0", data))
                self._streamed = True

    # ---- commit --------------------------------------------------------------------

    def on_commit(self, command: cmd.Commit) -> AnswerTurn | None:
        """The client commits its turn; returns the response to start, if one is due."""
        self.ctx.admission.release(command)
        create_response = command.create_response
        if command.auto_response is False and create_response is None:
            create_response = False
        elif command.auto_response is None and self.session.settings.auto_response:
            create_response = True
        return self.commit(
            create_response=create_response,
            event_id=command.event_id,
            is_speech=command.is_speech,
        )

    def commit(
        self,
        *,
        create_response: bool | None,
        event_id: str | None,
        is_speech: bool | None = None,
        vad: bool = False,
        silence: IdleTimeout | None = None,
    ) -> AnswerTurn | None:
        """Commit the turn as a user item; returns the response that answers it when one
        is due now (the caller has the runner start it). ``silence``: the turn is the
        silence an idle timeout ended, answered as such (no speech, yet a response)."""
        session = self.session
        settings = session.settings
        turn = session.input
        with self._input_lock:
            tail = self._converter.flush()
        if tail.size:
            # The resampler holds back its filter delay: a short append at another rate
            # may only show its speech here, at the end of the turn.
            start_ms = self._position * 1000 // self.rate_hz
            self._position += tail.size
            turn.chunks.append(tail)
            turn.samples += tail.size
            self.live.feed(tail)
            if self.turns is None and rms(tail) >= settings.overlap_silence_rms:
                turn.speech_samples += tail.size
                if not turn.speech_active and turn.appended and is_speech is not False:
                    turn.speech_active = True
                    turn.item_id = turn.item_id or new_item_id()
                    turn.audio_start_ms = start_ms
                    self.out.speech_started(start_ms, turn.item_id)
        if not turn.appended:
            self.out.error(
                "input_audio_buffer_commit_empty",
                "Error committing input audio buffer: buffer too small. "
                "Expected at least 1 sample of audio, but the buffer is empty.",
                event_id=event_id,
            )
            return None
        speech = turn.has_speech if is_speech is None else is_speech
        if silence is not None:
            speech = False
        item_id = turn.item_id or new_item_id()
        if turn.speech_active and not vad:
            self.out.speech_stopped(self._position * 1000 // self.rate_hz, item_id)
        transcript = " ".join(turn.transcript_hints).strip()
        part: dict[str, Any] = {"type": "input_audio", "transcript": transcript or None}
        if not speech:
            part = {"type": "input_audio", "transcript": ""}
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [part],
        }
        audio = turn.audio()
        session.input = InputTurn()
        if self._held is not None:
            self._held = None
            self.ctx.tell(ResumeReply())  # judged by the client's commit instead
        if self.turns is not None:
            with self._input_lock:
                self.turns.reset(self._position)
        stored = StoredItem(
            item=item,
            input_commit_seq=session.commit_seq + 1,
            silent_ms=None if silence is None else silence.silent_ms,
        )
        previous = session.items.add(stored)
        session.commit_seq += 1
        session.advance(TurnStep.USER_COMMIT)
        self.out.user_item_committed(item, previous, transcript if speech else "")
        live = self.live
        if silence is not None:
            live.abort()
            if not create_response:
                return None
            # The model hears of the silence through history (``silent_ms``), not its
            # samples: an ASR makes words of silence (Whisper's "Thank you.").
            session.committed_input = np.zeros(0, dtype=np.float32)
            return AnswerTurn()
        if not speech:
            live.abort()
            self.out.listen("silence_or_noise", None)
            return None
        if settings.transcription_only:
            # A transcription session answers nothing: each turn gets its transcript.
            live.transcribe_committed(item_id, audio)
            return None
        if create_response is None:
            create_response = bool(settings.auto_response)
        if not create_response:
            live.finish_transcript_only()
            session.committed_input = audio
            return None
        if session.response is not None:
            overlap_ms = audio.size * 1000 // self.rate_hz
            if overlap_ms <= settings.overlap_short_ack_ms:
                live.abort()
                self.out.overlap_decision(settings.overlap_policy, "drop", "short_ack")
                return None
            live.finish_transcript_only()
            session.deferred_commit = audio
            self.out.overlap_decision(
                settings.overlap_policy, "listen", "accumulating_overlap_speech"
            )
            return None
        session.committed_input = audio
        return AnswerTurn(carried_by=live.hand_over())

    # ---- clear / cancel input ----------------------------------------------------------

    def on_clear(self, command: cmd.ClearInput) -> None:
        held = self._held is not None
        self.drop_input()
        if held:
            self.ctx.tell(ResumeReply())  # the held speech is gone, not a turn
        self.out.input_cleared()

    def drop_input(self) -> bool:
        """Forget buffered and in-flight input; True if there was any. A playout held
        for speech stays held: the caller cancels the response or resumes it."""
        session = self.session
        had = self.ctx.input_tail.cancel() or session.input.appended
        session.input_generation += 1
        session.input = InputTurn()
        session.overlap_speech_ms = 0
        self._held = None
        self._stream_units = np.zeros(0, dtype=np.float32)
        with self._input_lock:
            self._converter.reset()
            if self.turns is not None:
                self.turns.reset(self._position)
        self.live.abort()
        return had

    # ---- text and items ------------------------------------------------------------------

    def on_append_text(self, command: cmd.AppendText) -> None:
        session = self.session
        if session.settings.transcription_only:
            self.out.error(
                "transcription_session_response_unsupported",
                "a transcription session transcribes audio; it takes no text turns",
                event_id=command.event_id,
                param="type",
            )
            return
        if not session.capabilities.supports_text_input:
            self.out.error(
                "native_text_append_unsupported",
                "this model accepts audio input only",
                event_id=command.event_id,
            )
            return
        self._add_user_text(command.text)
        if session.response is None:
            self.ctx.tell(AnswerTurn())

    def _add_user_text(self, text: str) -> None:
        item = {
            "id": new_item_id(),
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": text}],
        }
        previous = self.session.items.add(StoredItem(item=item))
        self.out.item_added(item, previous, done=True)
        self.session.pending_user_text = (self.session.pending_user_text + " " + text).strip()

    def on_session_update(self, command: cmd.UpdateSession) -> None:
        session = self.session

        def attempt(patch: dict[str, Any]) -> SessionSettings:
            candidate = session.settings.updated(patch)
            self.ctx.plugin.validate_session_config(candidate.as_model_config())
            self.ctx.mcp.check(candidate.tools)
            return candidate

        # A field that cannot be honoured is reported on its own and the rest applies
        # (session_patch); only an update with nothing usable left is refused whole.
        for rejection in command.rejected:
            self.out.error(
                rejection.code, rejection.message, event_id=command.event_id, param=rejection.param
            )
        try:
            outcome = apply_partially(
                command.patch, attempt, errors=(RealtimeProtocolError, DuplexRuntimeConfigError)
            )
        except (RealtimeProtocolError, DuplexRuntimeConfigError) as exc:
            self.out.error(
                exc.code, str(exc), event_id=command.event_id, param=getattr(exc, "param", None)
            )
            return
        for rejection in outcome.rejected:
            self.out.error(
                rejection.code, rejection.message, event_id=command.event_id, param=rejection.param
            )
        if outcome.value is None:
            return
        updated = outcome.value
        previous, session.settings = session.settings, updated
        if updated.idle_timeout_s is not None and updated.idle_timeout_s != previous.idle_timeout_s:
            # Decision 11: the session's idle_timeout_s drives its lease from now on.
            session.lease.config = session.lease.config.with_idle_timeout(updated.idle_timeout_s)
        plugin = self.ctx.plugin
        if plugin.streams_input and not self._streamed:
            # A model-native plugin hands its session config (persona, voice, sampling) to
            # stage 0 with the first streamed unit; until then a session.update (the usual
            # autostart flow: session.created, session.update, audio) rebuilds that state.
            session.model_state = plugin.create_session_state(updated.as_model_config())
        if previous.turn_detection is None and updated.turn_detection is not None:
            session.idle.restart()  # no VAD saw whether the user spoke meanwhile
        if updated.turn_detection != previous.turn_detection:
            # Only a change of turn detection restarts it: an update of anything else
            # while the user speaks must not lose the speech in progress.
            self.turns = TurnDetector.from_settings(
                updated,
                self.rate_hz,
                plugin.create_speech_classifier,
                position_samples=self._position,
                completion_model=plugin.turn_completion_model(),
            )
            if self._held is not None:
                self._held = None
                self.ctx.tell(ResumeReply())
            if self.turns is None or not self.turns.speaking:
                self.live.abort()
        self.out.session_updated()
        self.ctx.mcp.reconcile(updated.tools)

    def on_signal_turn(self, command: cmd.SignalTurn) -> None:
        """A client's turn signal relabels the turn state (any other event is echoed with
        the state unchanged); the runner routes ``barge_in`` to a barge-in instead."""
        step = SIGNAL_STEPS.get(command.event)
        if step is not None:
            self.session.advance(step)
        self.out.turn_event(command.event, self.session.turn_state.value)

    def on_model_transcript(
        self, result: ModelInputTranscript, *, request_id: str | None = None
    ) -> None:
        """A final transcript: of the utterance ``request_id`` carried, else of the last
        user item. One already reported for that item is not reported again."""
        if not result.final or not result.text:
            return
        final = self.live.take_final(request_id, result.text) if request_id else None
        target = None
        for stored in self.session.items:
            if stored.item.get("role") != "user":
                continue
            if final is None or stored.item.get("id") == final.item_id:
                target = stored
        if target is None:
            return
        parts = [p for p in target.item.get("content", []) if p.get("type") == "input_audio"]
        if parts and all(p.get("transcript") == result.text for p in parts):
            return
        logprobs = list(result.logprobs) if result.logprobs is not None else None
        if final is not None and final.delta:
            # The final delta's words are the transcript's last ones.
            tail = logprobs[final.delta_from :] if logprobs is not None else None
            self.out.input_transcript_delta(final.item_id, final.delta, tail)
        for part in parts:
            part["transcript"] = result.text
        self.out.input_transcribed(target.item["id"], result.text, logprobs)
