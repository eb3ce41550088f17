"""``DuplexOrchestrator``: the orchestrator that also hosts the duplex sessions.

It extends the turn-based ``Orchestrator`` (a seam it does not override falls through, so
turn-based requests still work on a duplex deployment) and implements the
``SessionStages`` the sessions use:

- a session's stage request is registered on its first submission, owned by a
  ``SessionRequestOwner``; its first input opens it on the stage, later ones update it;
- the orchestrator's one routing step for owned requests (``_route_owned``) forwards an
  output to the next stage or hands it to the owner: the final stage's outputs, any
  error and any output addressed ``to_owner`` (a partial transcript from stage 0) go to
  the session's mailbox through ``DuplexSessionManager.on_stage_output``; a request that
  no stage holds any more, or whose finished output went to its owner, is released
  (later stages aborted);
- a dead worker ends the sessions whose requests it held; a dead engine (a stage's
  restart budget spent) ends every session with ``engine_unavailable`` before it reports
  ``EngineDead``, and refuses new ones with ``EngineDeadError``;
- a turn response (``StartTurnResponse``: a chat completion, no session) is planned with
  the plugin, run as a request owned by a ``TurnResponseOwner``, and each of its stage
  outputs is projected with the plugin's data plane there, so the caller receives model
  results (``TurnResponseOutput``), never raw stage data;
- the manager's reaper runs as a background task, and shutdown closes every session.

Everything runs on the orchestrator loop; nothing is locked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from ..config.pipeline import PipelineConfig
from .duplex.contracts import SessionStages, StageSubmission, parse_stage_request_id
from .duplex.messages import AbandonOpenMessage, SessionCommandMessage, SessionEventMessage
from .duplex.plugin import DuplexModelPlugin
from .duplex.runtime_config import DuplexSessionRuntimeConfig
from .duplex.session.manager import DuplexSessionManager, OpenResult
from .duplex.session.runner import StageOutputItem
from .duplex.turn_response import (
    StartTurnResponse,
    TurnFailure,
    TurnProjection,
    TurnResponseError,
    TurnResponseOutput,
    TurnResponsePlanner,
    TurnResponseRequest,
    stage_failure,
)
from .errors import EngineDeadError
from .orchestrator import Orchestrator, OutputSink, RequestState
from .request_owner import RequestOwner
from .stage.handle import StageHandle
from .stage.messages import StageInput, StageOutput, WorkerDied

log = logging.getLogger(__name__)


class SessionRequestOwner(RequestOwner):
    """A session's stage request: what reaches the session goes to its mailbox."""

    def __init__(self, manager: DuplexSessionManager, session_id: str) -> None:
        self.manager = manager
        self.session_id = session_id

    def deliver(self, state: RequestState, stage_index: int, output: StageOutput) -> bool:
        # A finished output addressed to the owner ends the request (a transcript no
        # response follows), whatever later stages started on it (a reply's draft).
        ended = output.error is not None or (
            output.finished and (output.to_owner or not state.live_stages)
        )
        if output.error is None and not output.to_owner and stage_index < state.final_stage_index:
            return ended  # passed on until no stage held it: nothing for the session
        self.manager.on_stage_output(
            self.session_id,
            StageOutputItem(
                request_id=output.request_id,
                data=output.data,
                finished=ended,
                error=output.error,
                compute_s=output.metrics.compute_s,
                to_owner=output.to_owner,
            ),
        )
        return ended

    def failed(self, state: RequestState, stage_index: int, error: str) -> None:
        self.manager.on_stage_output(
            self.session_id,
            StageOutputItem(request_id=state.request_id, data={}, finished=True, error=error),
        )


class TurnResponseOwner(RequestOwner):
    """A turn response's stage request: each output is projected with the plugin's data
    plane and reaches the caller as a ``TurnResponseOutput``."""

    def __init__(self, orchestrator: DuplexOrchestrator) -> None:
        self.orchestrator = orchestrator

    def deliver(self, state: RequestState, stage_index: int, output: StageOutput) -> bool:
        orchestrator = self.orchestrator
        request_id = state.request_id
        if output.error is not None:
            orchestrator.abort_request(request_id)
            failure = stage_failure(output.error)
            orchestrator._emit(
                TurnResponseOutput.failed(request_id, failure, stage_index=stage_index)
            )
            return True
        final_stage = stage_index == state.final_stage_index
        projection = TurnProjection(())
        if final_stage or output.to_owner:
            # The final stage's outputs are the answer; a word addressed to the owner on
            # the way (a partial transcript) is projected as well.
            projection = orchestrator.turn_planner.project(output.data)
        done = (
            projection.ended
            or (final_stage and output.finished)
            or (output.finished and not state.live_stages)
        )
        if done:
            # Released before its last output goes out; whatever a stage still holds is
            # no longer needed.
            orchestrator.abort_request(request_id)
        if projection.results or done:
            failure = projection.failure
            orchestrator._emit(
                TurnResponseOutput(
                    request_id=request_id,
                    data=output.data,
                    finished=done,
                    error=failure.message if failure is not None else None,
                    stage_index=stage_index,
                    metrics=output.metrics,
                    stage_metrics=dict(state.stage_metrics),
                    results=projection.results,
                    failure=failure,
                )
            )
        return done

    def failed(self, state: RequestState, stage_index: int, error: str) -> None:
        failure = stage_failure(error)
        self.orchestrator._emit(
            TurnResponseOutput.failed(state.request_id, failure, stage_index=stage_index)
        )


class DuplexOrchestrator(Orchestrator, SessionStages):
    """Built on the orchestrator loop (``_create_orchestrator`` runs there)."""

    def __init__(
        self,
        *,
        stages: Sequence[StageHandle],
        output_sink: OutputSink,
        pipeline: PipelineConfig | None = None,
        plugin: DuplexModelPlugin,
        runtime: DuplexSessionRuntimeConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(stages=stages, output_sink=output_sink, pipeline=pipeline)
        self.plugin = plugin
        self.runtime = runtime
        self.turn_planner = TurnResponsePlanner(plugin)
        self._reaper_stop = asyncio.Event()
        self._side_tasks: set[asyncio.Task[Any]] = set()
        served = pipeline.served_model_name if pipeline is not None else None
        self.manager = DuplexSessionManager(
            plugin=plugin,
            session_stages=self,
            runtime=runtime,
            sink=self._emit_session_event,
            clock=clock,
            served_model=served or "omniduplex",
            mcp=pipeline.mcp if pipeline is not None else None,
        )

    # ---- events out ------------------------------------------------------------------

    def _emit_session_event(self, session_id: str, event: Any) -> None:
        self._emit(SessionEventMessage(session_id, event))

    # ---- SessionStages ---------------------------------------------------------------
    # ``stage_count`` and ``abort_requests`` are OrchestratorBase's own.

    def submit(self, submission: StageSubmission) -> None:
        request_id = submission.request_id
        if self.get_request(request_id) is None:
            # The session dropped a stale submission already (``StageRequests.submit``).
            if self._dead_reason is not None:
                raise RuntimeError(self._dead_reason)
            owner = SessionRequestOwner(self.manager, submission.fence.session_id)
            self.register_request(request_id, owner=owner)
        sent = self.submit_stage_input(
            submission.stage_index,
            request_id,
            StageInput(dict(submission.data), final=submission.final),
        )
        if not sent and self.get_request(request_id) is None:
            # The stage refused it (unavailable) and the request was failed: an owned
            # request's failure reaches nobody else, so the session learns it here.
            raise RuntimeError(f"stage {submission.stage_index} could not take {request_id}")

    async def cleanup(self, request_ids: Sequence[str]) -> None:
        self.abort_requests(request_ids)

    # ---- turn responses --------------------------------------------------------------

    def _start_turn_response(self, request: TurnResponseRequest) -> None:
        request_id = request.request_id
        try:
            if self._dead_reason is not None:
                raise TurnResponseError(
                    TurnFailure.UNAVAILABLE, "engine_unavailable", self._dead_reason
                )
            if self.get_request(request_id) is not None:
                raise TurnResponseError(
                    TurnFailure.REFUSED,
                    "duplicate_request_id",
                    f"request id {request_id!r} is already in use",
                )
            data = self.turn_planner.plan(request)
        except TurnResponseError as failure:
            self._emit(TurnResponseOutput.failed(request_id, failure))
            return
        self.register_request(request_id, owner=TurnResponseOwner(self))
        if not self.submit_stage_input(0, request_id, StageInput(data, final=True)) and (
            self.get_request(request_id) is None
        ):
            # The stage was unavailable and the owned request failed silently.
            stage = self.stage(0)
            failure = stage_failure(f"stage 0 ({stage.name}) is unavailable")
            self._emit(TurnResponseOutput.failed(request_id, failure, stage_index=0))

    # ---- worker death ----------------------------------------------------------------

    def _on_worker_died(self, event: WorkerDied) -> None:
        in_flight = event.request_ids_in_flight
        owned = {rid for rid in in_flight if parse_stage_request_id(rid) is not None}
        turns = [
            rid
            for rid in in_flight
            if (state := self.get_request(rid)) is not None
            and isinstance(state.owner, TurnResponseOwner)
        ]
        super()._on_worker_died(event)
        stage = self.stage(event.stage_index)
        reason = f"stage {stage.index} ({stage.name}) worker died: {event.reason}"
        for request_id in turns:
            failure = stage_failure(reason)
            self._emit(TurnResponseOutput.failed(request_id, failure, stage_index=stage.index))
        # A worker that will not be restarted takes the engine down with it, and that
        # ends every session (``_on_engine_dead``), these included, with one reason.
        if owned and stage.can_restart:
            self._spawn(self.manager.close_sessions_of_requests(owned, reason))

    def _on_engine_dead(self, reason: str) -> None:
        self._spawn(self._close_sessions_then_report_dead(reason))

    async def _close_sessions_then_report_dead(self, reason: str) -> None:
        # EngineDead goes last: a caller that sees it fails whatever it still holds, so
        # each session's error and session.closed must be on their way before it.
        try:
            await self.manager.close_all_failed(
                "engine_unavailable", f"the model engine is unavailable: {reason}"
            )
        finally:
            super()._on_engine_dead(reason)

    # ---- client messages ---------------------------------------------------------------

    def _dispatch_message(self, message: object) -> bool:
        if isinstance(message, SessionCommandMessage):
            self.manager.dispatch(message.session_id, message.command)
            return True
        if isinstance(message, StartTurnResponse):
            self._start_turn_response(message.request)
            return True
        if isinstance(message, AbandonOpenMessage):
            if message.session_id in self.manager.runners:
                self._spawn(self.manager.close(message.session_id, "open_abandoned"))
            else:
                self.manager.abandon_open(message.session_id)
            return True
        return super()._dispatch_message(message)

    async def open_session(self, session_id: str, session: dict[str, Any]) -> OpenResult:
        """Admit a session (``DuplexOmniEngine.open_session`` calls this here); refused
        with ``EngineDeadError`` once the engine is dead."""
        if self._dead_reason is not None:
            raise EngineDeadError(self._dead_reason)
        result = await self.manager.open(session_id, session)
        if self._dead_reason is not None:
            # The engine died while this session was admitted (the open awaits), so the
            # close of every session missed it.
            await self.manager.close(session_id, "engine_unavailable")
            raise EngineDeadError(self._dead_reason)
        return result

    # ---- lifecycle ---------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_task_done)

    def _side_task_done(self, task: asyncio.Task[Any]) -> None:
        self._side_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("duplex orchestrator task failed", exc_info=task.exception())

    def _background_tasks(self) -> list[Coroutine[Any, Any, None]]:
        return [*super()._background_tasks(), self.manager.reaper_loop(self._reaper_stop)]

    async def _shutdown_extensions(self) -> None:
        self._reaper_stop.set()
        try:
            await self.manager.shutdown("shutdown")
        finally:
            side = list(self._side_tasks)
            for task in side:
                task.cancel()
            await asyncio.gather(*side, return_exceptions=True)
            await super()._shutdown_extensions()
