"""The single writer of one session: an ordered mailbox on the orchestrator loop.

Client commands (admitted by the manager), stage outputs, the playout clock's
wake-ups (one timer per session, ``PLAYOUT_DUE``: audio of the response is due to leave)
and the outcomes of remote MCP work (``mcp_servers``: a server listed, a call done)
enter one FIFO mailbox and are handled one at a time. Slow work (decoding and resampling
an append) runs in a tracked task on the session's *input tail*, offloaded to the
manager's thread pool; the worker never awaits it, so a cancel behind an append is
handled at once. A tail task re-checks the session after every await and does nothing if
the input it carried was cancelled.

Cancels advance the epoch before anything else happens, abort every stage request of
the old epoch and emit the cancelled terminal events in the same step; a stage output of
an old epoch is dropped when it is dequeued. Together these make the stream of one
session ordered: nothing of an epoch follows that epoch's terminal event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ....protocol.duplex import commands as cmd
from ..contracts import SessionStages, parse_stage_request_id
from ..mcp.config import McpConfig
from ..mcp.policy import McpUrlPolicy
from ..plugin import DuplexModelPlugin
from .context import (
    Admission,
    AdmissionLimits,
    InputTail,
    SessionContext,
    StageOutputItem,
    StageRequests,
)
from .conversation import ItemCommands
from .emitter import SessionEmitter
from .input_budget import InputAudioBudget, held_input_samples
from .input_flow import InputFlow
from .lease import LeaseActivity
from .live_transcript import LiveTranscription
from .mcp_servers import McpCallDone, McpListed, McpServers
from .part_events import (
    AnswerTurn,
    HoldReply,
    InputTranscribed,
    PartEvent,
    ResponseEnded,
    ResumeReply,
    TalkedOver,
)
from .playback import Playback
from .response_flow import ResponseFlow
from .state import DuplexEngineSession, SessionState

__all__ = ["DuplexSessionRunner", "StageOutputItem"]

log = logging.getLogger(__name__)

EventSink = Callable[[Any], None]


class PlayoutDue:
    """Mailbox item: the playout clock has audio due (or a playout ended)."""

    __slots__ = ()


PLAYOUT_DUE = PlayoutDue()


class DuplexSessionRunner:
    """Owns one ``DuplexEngineSession`` and is the only code that mutates it: itself, and
    the parts it builds (input, responses, playback, items, live transcription), each
    through the one ``SessionContext`` it lends them. It alone coordinates them: a part
    returns or tells it what concerns another (``part_events``), and it acts."""

    def __init__(
        self,
        session: DuplexEngineSession,
        *,
        plugin: DuplexModelPlugin,
        session_stages: SessionStages,
        sink: EventSink,
        offload: Callable[..., Awaitable[Any]],
        clock: Callable[[], float],
        limits: AdmissionLimits,
        max_input_turn_s: float | None = None,
        input_audio_budget: InputAudioBudget | None = None,
        max_unplayed_output_bytes: int = 8 * 1024 * 1024,
        mcp_config: McpConfig | None = None,
        mcp_policy: McpUrlPolicy | None = None,
    ) -> None:
        self.session = session
        self.clock = clock
        self._mailbox: asyncio.Queue[Any] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self.out = SessionEmitter(session, sink)
        self._stage = StageRequests(session, session_stages)
        self._input_tail = InputTail(session, self.out, settle=self._settle_input_audio)
        # This session's share of the server's input audio (None: only its turns bound it).
        budget = input_audio_budget or InputAudioBudget(None, plugin.input_sample_rate_hz)
        self._input_audio = budget.hold()
        self._admission = Admission(session, limits)
        # Real time, whatever clock the lease uses: the playout follows the wall.
        self.playback = Playback(
            session, self.out, clock=time.monotonic, wake=self._schedule_playout
        )
        self._playout_timer: asyncio.TimerHandle | None = None
        mcp_config = mcp_config or McpConfig()
        self.mcp = McpServers(
            session,
            self.out,
            config=mcp_config,
            policy=mcp_policy or McpUrlPolicy(mcp_config.allowed_urls),
            post=self.submit,
        )
        ctx = SessionContext(
            session=session,
            out=self.out,
            plugin=plugin,
            clock=clock,
            offload=offload,
            stage=self._stage,
            input_tail=self._input_tail,
            admission=self._admission,
            playback=self.playback,
            mcp=self.mcp,
            tell=self._on_part_event,
        )
        self.responses = ResponseFlow(ctx, max_unplayed_output_bytes=max_unplayed_output_bytes)
        self.live = LiveTranscription(ctx, preview=self.responses.preview_request)
        self.inputs = InputFlow(
            ctx, max_turn_s=max_input_turn_s, audio_hold=self._input_audio, live=self.live
        )
        self.items = ItemCommands(session, self.out, plugin)
        self._handlers = self._build_handlers()

    # ---- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        self.out.session_created()
        self._worker = asyncio.get_running_loop().create_task(
            self._run(), name=f"duplex-session-{self.session.session_id}"
        )
        self.mcp.reconcile(self.session.settings.tools)

    @property
    def closing(self) -> bool:
        return not self.session.open

    def admit(self, command: Any) -> bool:
        """Reserve admission for ``command`` before it is queued (appends: their bytes,
        commits: a pending turn); a refusal is answered with ``input_backpressure``."""
        refusal = self._admission.reserve(command)
        if refusal is not None:
            self.out.error(
                "input_backpressure", refusal, event_id=getattr(command, "event_id", None)
            )
            return False
        return True

    def submit(self, item: Any) -> None:
        """Queue a command (admitted) or a ``StageOutputItem`` on the mailbox."""
        self._mailbox.put_nowait(item)

    def touch(self, activity: LeaseActivity, *, expected_generation: int | None = None) -> int:
        """Record lease activity reported by an RPC (not a mailbox command):
        ``DETACH`` starts the disconnect grace of lease ``expected_generation``. Returns
        the lease generation; raises ``LeaseGenerationMismatch`` for a stale one."""
        lease = self.session.lease
        if activity is LeaseActivity.DETACH:
            lease.detach(self.clock(), expected_generation=expected_generation)
        else:
            lease.touch(self.clock(), activity)
        return lease.generation

    def resume(self, expected_generation: int) -> int:
        """A connection resumes the session: the lease's compare-and-swap on its
        generation; returns the new generation."""
        return self.session.lease.resume(self.clock(), expected_generation=expected_generation)

    async def stop(self, reason: str) -> list[str]:
        """End the lease and tear the session down; returns the stage request ids that
        must be cleaned up.

        The terminal event itself is emitted by the manager after stage cleanup
        (``emit_terminal``).
        """
        session = self.session
        session.lease.mark_terminal(reason)
        if session.state is SessionState.OPEN:
            session.state = SessionState.CLOSING
        self._input_tail.cancel()
        # The ended session's input audio is no one's any more, whatever it held.
        self._input_audio.close()
        self._schedule_playout(None)
        request_ids = self.responses.abandon()
        if self._worker is not None and self._worker is not asyncio.current_task():
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
        await self.mcp.close()
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
        try:
            self._handle_item(item)
        finally:
            self._settle_input_audio()

    def _handle_item(self, item: Any) -> None:
        if isinstance(item, StageOutputItem):
            self._on_stage_output(item)
        elif isinstance(item, McpListed):
            self.mcp.on_listed(item)
        elif isinstance(item, McpCallDone):
            if not self.closing:
                self.responses.on_mcp_call_done(item)
        elif item is PLAYOUT_DUE:
            if not self.closing:
                self.responses.on_playout_due()
        elif self.closing:
            self._admission.release(item)
            self.out.error(
                "session_closed",
                f"Duplex session is closing: {self.session.session_id}",
                event_id=getattr(item, "event_id", None),
            )
        else:
            self._on_command(item)

    def _on_command(self, command: Any) -> None:
        handler = self._handlers.get(type(command))
        if handler is None:
            self.out.error(
                "unknown_event",
                f"Unsupported command: {getattr(command, 'type', type(command).__name__)}",
                event_id=getattr(command, "event_id", None),
            )
            return
        handler(command)

    def _build_handlers(self) -> dict[type, Callable[[Any], None]]:
        """The command table, built once per session. Commands that refer to the input
        before them (a commit, text, a response.create, an update) wait for the appends
        still being decoded."""
        inputs, responses, items = self.inputs, self.responses, self.items
        after = self._input_tail.after
        release = self._admission.release
        return {
            cmd.AppendAudio: inputs.on_append,
            cmd.Commit: lambda c: after(
                lambda: self._answer(inputs.on_commit(c)), on_skip=lambda: release(c)
            ),
            cmd.ClearInput: inputs.on_clear,
            cmd.AppendText: lambda c: after(lambda: inputs.on_append_text(c)),
            cmd.CreateResponse: self._on_create_response,
            cmd.CancelResponse: self._on_cancel_response,
            cmd.ClearOutputAudio: responses.on_clear_output,
            cmd.CancelInput: self._on_barge_in,
            cmd.BargeIn: self._on_barge_in,
            cmd.AckPlayback: responses.on_playback_ack,
            cmd.Heartbeat: self._on_heartbeat,
            cmd.UpdateSession: lambda c: after(lambda: inputs.on_session_update(c)),
            cmd.CreateItem: lambda c: after(lambda: self._on_create_item(c)),
            cmd.DeleteItem: items.delete,
            cmd.TruncateItem: self._on_truncate_item,
            cmd.RetrieveItem: items.retrieve,
            cmd.SignalTurn: self._on_signal_turn,
        }

    def _on_create_response(self, command: cmd.CreateResponse) -> None:
        """A response starts behind the input before it; a transcription session never
        answers, so it refuses at once."""
        if self.session.settings.transcription_only:
            self.out.error(
                "transcription_session_response_unsupported",
                "response.create is not available in a transcription session: it only "
                "transcribes the input audio",
                event_id=command.event_id,
                param="type",
            )
            return
        self._input_tail.after(lambda: self.responses.on_create(command))

    def _on_create_item(self, command: cmd.CreateItem) -> None:
        """An item joins the conversation; a client's answer to an MCP approval request
        has the server act on it (the call runs, or the model hears it was refused)."""
        item = self.items.create(command)
        if item is not None and item.get("type") == "mcp_approval_response":
            self.responses.on_mcp_approval(item)

    def _on_cancel_response(self, command: cmd.CancelResponse) -> None:
        """An active response is cancelled at once, never behind in-flight appends. With
        none active, a commit still waiting behind the appends may be about to open the
        response this cancel means: the cancel then keeps its place behind that input."""
        responses = self.responses
        if self.session.response is None and self.input_busy:
            self._input_tail.after(
                lambda: responses.on_cancel_response(command),
                on_skip=lambda: responses.on_cancel_response(command),
            )
            return
        responses.on_cancel_response(command)

    def _on_barge_in(self, command: cmd.BargeIn | cmd.CancelInput) -> None:
        """Cancel input in flight and the active response; every cancel is answered."""
        if isinstance(command, cmd.BargeIn) and not self.session.capabilities.supports_barge_in:
            self.out.error(
                "barge_in_unsupported",
                "this model yields by itself; barge_in is not supported",
                event_id=command.event_id,
            )
            return
        had_input = self.inputs.drop_input()
        self.responses.barge_in("barge_in", had_input=had_input)

    def _on_truncate_item(self, command: cmd.TruncateItem) -> None:
        if self.playback.stops_at(command):
            # The client stopped playing the response still going out at audio_end_ms:
            # the rest will not be heard. Cut it there.
            self.responses.cancel("client_cancelled")
            return
        self.items.truncate(command)

    def _on_signal_turn(self, command: cmd.SignalTurn) -> None:
        """``turn.signal`` with ``barge_in`` is a barge-in; any other event is a relabel."""
        if command.event == "barge_in":
            self._on_barge_in(cmd.BargeIn(event_id=command.event_id))
            return
        self.inputs.on_signal_turn(command)

    def _on_heartbeat(self, command: Any) -> None:
        try:
            self.session.lease.touch(self.clock(), LeaseActivity.HEARTBEAT)
        except Exception as exc:
            self.out.error("runtime_touch_failed", str(exc), event_id=command.event_id)
            return
        self.out.heartbeat_ack()

    # ---- what the parts tell ---------------------------------------------------------

    def _answer(self, answer: AnswerTurn | None) -> None:
        if answer is not None:
            self.responses.start(carried_by=answer.carried_by)

    def _on_part_event(self, event: PartEvent) -> None:
        """Act on what one part saw that concerns another (``part_events``)."""
        if isinstance(event, TalkedOver):
            self.responses.talked_over(event.reason)
        elif isinstance(event, AnswerTurn):
            self._answer(event)
        elif isinstance(event, HoldReply):
            self.responses.hold_playout()
        elif isinstance(event, ResumeReply):
            self.responses.resume_playout()
        elif isinstance(event, InputTranscribed):
            self.inputs.on_model_transcript(event.result, request_id=event.request_id)
        elif isinstance(event, ResponseEnded):
            self.live.forget(list(event.request_ids))

    # ---- the playout timer ---------------------------------------------------------

    def _schedule_playout(self, when: float | None) -> None:
        """Wake the playout at ``when`` (``time.monotonic`` seconds) through the mailbox,
        replacing any earlier wake-up; ``None`` cancels it."""
        if self._playout_timer is not None:
            self._playout_timer.cancel()
            self._playout_timer = None
        if when is None:
            return
        delay = max(0.0, when - time.monotonic())
        loop = asyncio.get_running_loop()
        self._playout_timer = loop.call_later(delay, self.submit, PLAYOUT_DUE)

    # ---- the input tail -----------------------------------------------------------

    @property
    def input_busy(self) -> bool:
        """Appends are still being decoded."""
        return self._input_tail.busy

    def _settle_input_audio(self) -> None:
        """Count what the session now holds against the server's input budget. Runs after
        every mailbox item and every input task, so each way audio leaves the session
        (answered, cleared, talked over, forgotten silence) gives its share back."""
        self._input_audio.settle(held_input_samples(self.session))

    # ---- stage outputs ----------------------------------------------------------

    def _on_stage_output(self, item: StageOutputItem) -> None:
        parsed = parse_stage_request_id(item.request_id)
        if item.finished:
            self._stage.finished(item.request_id)
        if self.closing or parsed is None or parsed.epoch != self.session.epoch:
            return  # stale: its epoch was cancelled (its terminal events are already out)
        try:
            self.session.lease.touch(self.clock(), LeaseActivity.MODEL_OUTPUT)
        except Exception:
            return
        if self.live.claims(item):
            return
        self.responses.on_stage_output(item)
