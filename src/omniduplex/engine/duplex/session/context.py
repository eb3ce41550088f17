"""The narrow view the parts of a session runner work through.

A ``DuplexSessionRunner`` is split into parts: ``InputFlow`` (appends, commits, items,
session updates), ``ResponseFlow`` (responses, cancels, playback) and
``LiveTranscription`` (transcribing the user while they speak). None of them sees the
runner. Each gets a ``SessionContext``: the session it may change (on the orchestrator
loop, inside a mailbox step of its runner), the emitter, the plugin, the clock and the
thread pool, the session's stage requests, its input tail, its admission reservations,
its playback and its remote MCP servers, and ``tell``: what concerns another part goes
to the runner as a ``part_events`` event, and the runner alone acts on it. ``InputFlow``
holds the session's ``LiveTranscription`` (the transcription of its input), so no part
calls a peer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ....protocol.duplex import commands as cmd
from ..contracts import SessionStages, StageSubmission

if TYPE_CHECKING:
    from ..plugin import DuplexModelPlugin
    from .emitter import SessionEmitter
    from .mcp_servers import McpServers
    from .part_events import PartEvent
    from .playback import Playback
    from .state import DuplexEngineSession

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StageOutputItem:
    """One stage output addressed to the session, as its mailbox carries it."""

    request_id: str
    data: dict[str, Any]
    finished: bool
    error: str | None
    compute_s: float = 0.0
    # Stage 0 addressed it to the session (a partial transcript), not to the next stage.
    to_owner: bool = False


@dataclass(frozen=True, slots=True)
class FinalTranscript:
    """The final transcript of a committed utterance: its user item and the delta that
    completes the transcript deltas already sent for it ('' when none is owed), which
    starts at word ``delta_from`` of the transcript."""

    item_id: str
    delta: str
    delta_from: int = 0


# ---- what the runner owns and lends ---------------------------------------------------


class StageRequests:
    """The session's stage requests: every submit and abort keeps ``request_ids`` (what
    the manager cleans up at close) true."""

    def __init__(self, session: DuplexEngineSession, stages: SessionStages) -> None:
        self._session = session
        self.stages = stages

    def submit(self, submission: StageSubmission) -> None:
        """Send it on, unless it would open a request of an epoch a cancel ended (or of a
        closed session): that request's abort has gone out already, and registering it
        again would bring it back to life."""
        session = self._session
        request_id = submission.request_id
        if request_id not in session.request_ids and (
            not session.open or submission.fence.epoch != session.epoch
        ):
            log.debug("stale session submission %s dropped", request_id)
            return
        session.request_ids.add(request_id)
        self.stages.submit(submission)

    def abort(self, request_ids: list[str]) -> None:
        """Abort requests; they need no cleanup at close any more."""
        self.stages.abort_requests(request_ids)
        self._session.request_ids.difference_update(request_ids)

    def finished(self, request_id: str) -> None:
        """The stage finished the request by itself."""
        self._session.request_ids.discard(request_id)


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """How much input one session may have queued ahead of its runner."""

    max_pending_input_bytes: int
    max_pending_turns: int


class Admission:
    """Reservations of input accepted onto the mailbox but not yet handled: the bytes of
    appends still to be decoded and the commits still queued. Reserved when the manager
    dispatches a command, released on every path the command takes (handled, failed,
    cancelled, refused because the session closed)."""

    def __init__(self, session: DuplexEngineSession, limits: AdmissionLimits) -> None:
        self._session = session
        self.limits = limits

    def reserve(self, command: Any) -> str | None:
        """Reserve room for ``command``; the refusal's message when there is none."""
        session = self._session
        if isinstance(command, cmd.AppendAudio):
            size = len(command.audio)
            if session.reserved_input_bytes + size > self.limits.max_pending_input_bytes:
                return "Duplex session has too many pending input bytes"
            session.reserved_input_bytes += size
        elif isinstance(command, cmd.Commit):
            if session.pending_turns >= self.limits.max_pending_turns:
                return "Duplex session has too many pending input turns"
            session.pending_turns += 1
        return None

    def release(self, command: Any) -> None:
        """Give back what ``reserve`` took for ``command`` (once per command)."""
        session = self._session
        if isinstance(command, cmd.AppendAudio):
            session.reserved_input_bytes = max(0, session.reserved_input_bytes - len(command.audio))
        elif isinstance(command, cmd.Commit):
            session.pending_turns = max(0, session.pending_turns - 1)


class InputTail:
    """Slow input work (decoding an append), chained in arrival order off the mailbox.

    The mailbox worker never awaits it: a cancel behind an append is handled at once and
    cancels the tail (``cancel``). Steps that must follow the appends before them (a
    commit, a response.create) wait on the tail through ``after``. ``settle`` runs when
    each task has ended, however it ended (the runner recounts the input audio its session
    holds).
    """

    def __init__(
        self,
        session: DuplexEngineSession,
        out: SessionEmitter,
        *,
        settle: Callable[[], None] | None = None,
    ) -> None:
        self._session = session
        self._out = out
        self._settle = settle
        self._tail: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def busy(self) -> bool:
        return self._tail is not None and not self._tail.done()

    def track(self, work: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run ``work`` after every earlier input task, without blocking the mailbox.

        The task may be cancelled before ``work`` ever starts (a cancel right behind it):
        whatever it owes on every path belongs in a done callback, not in ``work``.
        """
        previous = self._tail

        async def chained() -> None:
            if previous is not None and not previous.done():
                # Waits without inheriting the previous task's failure or cancellation,
                # while a cancel of this task still propagates.
                await asyncio.wait([previous])
            await work()

        task = asyncio.get_running_loop().create_task(chained())
        self._tail = task
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._settle is not None:
            self._settle()
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("session %s: input task failed", self._session.session_id, exc_info=exc)
            self._out.error("runtime_append_task_failed", f"append failed: {exc}", retryable=False)

    def after(self, step: Callable[[], None], *, on_skip: Callable[[], None] | None = None) -> None:
        """Handle ``step`` now, or after the in-flight appends when there are some.

        ``on_skip`` runs instead when a deferred step never runs (its input was
        cancelled, or the session closed).
        """
        if not self.busy:
            step()
            return
        session = self._session
        generation = session.input_generation
        ran = False

        async def deferred() -> None:
            nonlocal ran
            if not session.open:
                return
            if session.input_generation != generation:
                # The input this step referred to was cancelled; the cancel answered it.
                return
            ran = True
            step()

        def skipped(_task: asyncio.Task[None]) -> None:
            if not ran and on_skip is not None:
                on_skip()

        self.track(deferred).add_done_callback(skipped)

    def cancel(self) -> bool:
        """Cancel in-flight input work; True if there was any."""
        pending = [t for t in self._tasks if not t.done()]
        for task in pending:
            task.cancel()
        self._tail = None
        return bool(pending)


class SessionContext:
    """Everything a part of the runner may use; built by the runner, one per session."""

    __slots__ = (
        "admission",
        "clock",
        "input_tail",
        "mcp",
        "offload",
        "out",
        "playback",
        "plugin",
        "session",
        "stage",
        "tell",
    )

    def __init__(
        self,
        *,
        session: DuplexEngineSession,
        out: SessionEmitter,
        plugin: DuplexModelPlugin,
        clock: Callable[[], float],
        offload: Callable[..., Awaitable[Any]],
        stage: StageRequests,
        input_tail: InputTail,
        admission: Admission,
        playback: Playback,
        mcp: McpServers,
        tell: Callable[[PartEvent], None],
    ) -> None:
        self.session = session
        self.mcp = mcp
        self.out = out
        self.plugin = plugin
        self.clock = clock
        self.offload = offload
        self.stage = stage
        self.input_tail = input_tail
        self.admission = admission
        # What the user heard: the session's outgoing audio and its cursors.
        self.playback = playback
        # The runner, for what concerns another part (``part_events``).
        self.tell = tell
