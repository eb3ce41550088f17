"""The single writer of one session: an ordered mailbox on the orchestrator loop.

Client commands, stage outputs, timers and internal items enter one FIFO mailbox and are
handled one at a time. Slow work (decoding and resampling an append) runs in a tracked
task on the session's *input tail*, offloaded to the manager's thread pool; the worker
never awaits it, so a cancel behind an append is handled at once. A tail task re-checks
the session after every await and does nothing if the input it carried was cancelled.

Cancels advance the epoch before anything else happens, abort every stage request of
the old epoch and emit the cancelled terminal events in the same step; a stage output of
an old epoch is dropped when it is dequeued. Together these make the stream of one
session ordered: nothing of an epoch follows that epoch's terminal event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ....protocol.duplex import commands as cmd
from ..contracts import DuplexStagePort, StageSubmission, epoch_of_request
from ..plugin import DuplexModelPlugin
from .emitter import SessionEmitter
from .input_flow import InputFlow
from .lease import LeaseActivity
from .live_transcript import LiveTranscription
from .response_flow import ResponseFlow
from .state import DuplexEngineSession, SessionState
from .turn_detection import TurnDetector

log = logging.getLogger(__name__)

EventSink = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class StageOutputItem:
    request_id: str
    data: dict[str, Any]
    finished: bool
    error: str | None
    compute_s: float = 0.0
    # Stage 0 addressed it to the session (a partial transcript), not to the next stage.
    to_owner: bool = False


@dataclass(frozen=True, slots=True)
class TimerItem:
    kind: str
    payload: Any = None


@dataclass(frozen=True, slots=True)
class InternalItem:
    run: Callable[[], Awaitable[None] | None]


class DuplexSessionRunner:
    """Owns one ``DuplexEngineSession`` and is the only code that mutates it."""

    def __init__(
        self,
        session: DuplexEngineSession,
        *,
        plugin: DuplexModelPlugin,
        stage_port: DuplexStagePort,
        sink: EventSink,
        offload: Callable[..., Awaitable[Any]],
        clock: Callable[[], float],
        on_runtime_close: Callable[[str], None],
        max_input_turn_s: float | None = None,
    ) -> None:
        self.session = session
        self.plugin = plugin
        self.stage_port = stage_port
        self.clock = clock
        self.offload = offload
        self._on_runtime_close = on_runtime_close
        self._mailbox: asyncio.Queue[Any] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._input_tail: asyncio.Task[None] | None = None
        self._input_tasks: set[asyncio.Task[None]] = set()
        self.out = SessionEmitter(session, sink)
        self.turns = TurnDetector.from_settings(
            session.settings,
            plugin.input_sample_rate_hz,
            plugin.create_speech_classifier,
            completion_model=plugin.turn_completion_model(),
        )
        self.responses = ResponseFlow(self)
        self.inputs = InputFlow(self, max_turn_s=max_input_turn_s)
        self.live = LiveTranscription(self)

    # ---- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        self.out.session_created()
        self._worker = asyncio.get_running_loop().create_task(
            self._run(), name=f"duplex-session-{self.session.session_id}"
        )

    @property
    def closing(self) -> bool:
        return self.session.state is not SessionState.OPEN

    def submit(self, command: Any) -> None:
        self._mailbox.put_nowait(command)

    def on_stage_output(self, item: StageOutputItem) -> None:
        self._mailbox.put_nowait(item)

    def post(self, item: TimerItem | InternalItem) -> None:
        self._mailbox.put_nowait(item)

    async def stop(self, reason: str, *, expired: bool = False) -> list[str]:
        """Tear the session down; returns the stage request ids that must be cleaned up.

        The terminal event itself is emitted by the manager after stage cleanup.
        """
        session = self.session
        if session.state is SessionState.OPEN:
            session.state = SessionState.CLOSING
        self.cancel_input_tasks()
        request_ids = self.responses.abandon()
        if self._worker is not None and self._worker is not asyncio.current_task():
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
        return request_ids

    def emit_terminal(self, reason: str, *, expired: bool) -> None:
        self.session.state = SessionState.CLOSED
        self.out.session_terminal(reason, expired=expired)

    # ---- mailbox worker ----------------------------------------------------------

    async def _run(self) -> None:
        while True:
            item = await self._mailbox.get()
            try:
                await self._handle(item)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one bad item never kills the session
                log.exception("session %s: item failed", self.session.session_id)
                self.out.error("internal_error", f"internal error: {exc}")

    async def _handle(self, item: Any) -> None:
        if isinstance(item, StageOutputItem):
            self._on_stage_output(item)
        elif isinstance(item, TimerItem):
            self.inputs.on_timer(item)
        elif isinstance(item, InternalItem):
            result = item.run()
            if asyncio.iscoroutine(result):
                await result
        elif self.closing:
            self.release_admission(item)
            self.out.error(
                "session_closed",
                f"Duplex session is closing: {self.session.session_id}",
                event_id=getattr(item, "event_id", None),
            )
        else:
            self._on_command(item)

    def release_admission(self, command: Any) -> None:
        session = self.session
        if isinstance(command, cmd.AppendAudio):
            session.reserved_input_bytes = max(0, session.reserved_input_bytes - len(command.audio))
        elif isinstance(command, cmd.Commit):
            session.pending_turns = max(0, session.pending_turns - 1)

    def _on_command(self, command: Any) -> None:
        handler = self._handlers().get(type(command))
        if handler is None:
            self.out.error(
                "unknown_event",
                f"Unsupported command: {getattr(command, 'type', type(command).__name__)}",
                event_id=getattr(command, "event_id", None),
            )
            return
        handler(command)

    def _handlers(self) -> dict[type, Callable[[Any], None]]:
        inputs, responses = self.inputs, self.responses
        return {
            cmd.AppendAudio: inputs.on_append,
            cmd.Commit: lambda c: self.after_input(
                lambda: inputs.on_commit(c), on_skip=lambda: self.release_admission(c)
            ),
            cmd.ClearInput: inputs.on_clear,
            cmd.AppendText: lambda c: self.after_input(lambda: inputs.on_append_text(c)),
            cmd.CreateResponse: lambda c: self.after_input(lambda: responses.on_create(c)),
            cmd.CancelResponse: self._on_cancel_response,
            cmd.ClearOutputAudio: responses.on_clear_output,
            cmd.CancelInput: responses.on_barge_in,
            cmd.BargeIn: responses.on_barge_in,
            cmd.AckPlayback: responses.on_playback_ack,
            cmd.Heartbeat: self._on_heartbeat,
            cmd.UpdateSession: lambda c: self.after_input(lambda: inputs.on_session_update(c)),
            cmd.CreateItem: lambda c: self.after_input(lambda: inputs.on_create_item(c)),
            cmd.DeleteItem: responses.on_delete_item,
            cmd.TruncateItem: responses.on_truncate_item,
            cmd.RetrieveItem: responses.on_retrieve_item,
            cmd.SignalTurn: inputs.on_signal_turn,
        }

    def _on_cancel_response(self, command: cmd.CancelResponse) -> None:
        """An active response is cancelled at once, never behind in-flight appends. With
        none active, a commit still waiting behind the appends may be about to open the
        response this cancel means: the cancel then keeps its place behind that input."""
        responses = self.responses
        if self.session.response is None and self.input_busy:
            self.after_input(
                lambda: responses.on_cancel_response(command),
                on_skip=lambda: responses.on_cancel_response(command),
            )
            return
        responses.on_cancel_response(command)

    def _on_heartbeat(self, command: Any) -> None:
        try:
            self.session.lease.touch(self.clock(), LeaseActivity.HEARTBEAT)
        except Exception as exc:
            self.out.error("runtime_touch_failed", str(exc), event_id=command.event_id)
            return
        self.out.heartbeat_ack()

    # ---- the input tail -----------------------------------------------------------

    @property
    def input_busy(self) -> bool:
        return self._input_tail is not None and not self._input_tail.done()

    def track_input(self, work: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run ``work`` after every earlier input task, without blocking the mailbox.

        The task may be cancelled before ``work`` ever starts (a cancel right behind it):
        whatever it owes on every path belongs in a done callback, not in ``work``.
        """
        previous = self._input_tail

        async def chained() -> None:
            if previous is not None and not previous.done():
                # Waits without inheriting the previous task's failure or cancellation,
                # while a cancel of this task still propagates.
                await asyncio.wait([previous])
            await work()

        task = asyncio.get_running_loop().create_task(chained())
        self._input_tail = task
        self._input_tasks.add(task)
        task.add_done_callback(self._input_done)
        return task

    def _input_done(self, task: asyncio.Task[None]) -> None:
        self._input_tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("session %s: input task failed", self.session.session_id, exc_info=exc)
            self.out.error("runtime_append_task_failed", f"append failed: {exc}", retryable=False)

    def after_input(
        self, step: Callable[[], None], *, on_skip: Callable[[], None] | None = None
    ) -> None:
        """Handle ``step`` now, or after the in-flight appends when there are some.

        ``on_skip`` runs instead when a deferred step never runs (its input was
        cancelled, or the session closed).
        """
        if not self.input_busy:
            step()
            return
        generation = self.session.input_generation
        ran = False

        async def deferred() -> None:
            nonlocal ran
            if self.closing:
                return
            if self.session.input_generation != generation:
                # The input this step referred to was cancelled; the cancel answered it.
                return
            ran = True
            step()

        def skipped(_task: asyncio.Task[None]) -> None:
            if not ran and on_skip is not None:
                on_skip()

        self.track_input(deferred).add_done_callback(skipped)

    def cancel_input_tasks(self) -> bool:
        """Cancel in-flight input work; True if there was any."""
        pending = [t for t in self._input_tasks if not t.done()]
        for task in pending:
            task.cancel()
        self._input_tail = None
        return bool(pending)

    # ---- stage requests -----------------------------------------------------------

    def submit_stage(self, submission: StageSubmission) -> None:
        self.session.request_ids.add(submission.request_id)
        self.stage_port.submit(submission)

    # ---- stage outputs ----------------------------------------------------------

    def _on_stage_output(self, item: StageOutputItem) -> None:
        epoch = epoch_of_request(item.request_id)
        if item.finished:
            self.session.request_ids.discard(item.request_id)
        if self.closing or epoch is None or epoch != self.session.epoch:
            return  # stale: its epoch was cancelled (its terminal events are already out)
        try:
            self.session.lease.touch(self.clock(), LeaseActivity.MODEL_OUTPUT)
        except Exception:
            return
        if self.live.claims(item):
            return
        self.responses.on_stage_output(item)
