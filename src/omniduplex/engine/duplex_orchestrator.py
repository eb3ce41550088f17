"""``DuplexOrchestrator``: the orchestrator that also hosts the duplex sessions.

It extends the turn-based ``Orchestrator`` (a seam it does not override falls through, so
turn-based requests still work on a duplex deployment) and implements the
``SessionStages`` the sessions use:

- a session's stage request is registered on its first submission with
  ``owner="session:<id>"``; its first input opens it on the stage, later ones update it;
- outputs of session-owned requests are intercepted: earlier stages forward to the next
  stage, the final stage's outputs, any error and any output addressed ``to_owner`` (a
  partial transcript from stage 0) go to the session's mailbox through
  ``DuplexSessionManager.on_stage_output``; a request that no stage holds any more, or
  whose finished output went to its owner, is forgotten (later stages aborted);
- a dead worker ends the sessions whose requests it held; a dead engine (a stage's
  restart budget spent) ends every session with ``engine_unavailable`` before it reports
  ``EngineDead``, and refuses new ones with ``EngineDeadError``;
- a turn response (``StartTurnResponse``: a chat completion, no session) is planned with
  the plugin, run as a request owned by ``TURN_RESPONSE_OWNER``, and each of its stage
  outputs is projected with the plugin's data plane here, so the caller receives model
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
from .duplex.contracts import (
    SessionStages,
    StageSubmission,
    epoch_of_request,
    session_id_of_request,
)
from .duplex.messages import AbandonOpenMessage, SessionCommandMessage, SessionEventMessage
from .duplex.plugin import DuplexModelPlugin
from .duplex.runtime_config import DuplexSessionRuntimeConfig
from .duplex.session.manager import DuplexSessionManager, OpenResult
from .duplex.session.runner import StageOutputItem
from .duplex.turn_response import (
    TURN_RESPONSE_OWNER,
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
from .stage.handle import StageHandle
from .stage.messages import StageInput, StageOutput, WorkerDied

log = logging.getLogger(__name__)

SESSION_OWNER_PREFIX = "session:"


def session_owner(session_id: str) -> str:
    return SESSION_OWNER_PREFIX + session_id


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
        )

    # ---- events out ------------------------------------------------------------------

    def _emit_session_event(self, session_id: str, event: Any) -> None:
        self._emit(SessionEventMessage(session_id, event))

    # ---- SessionStages ---------------------------------------------------------------
    # ``stage_count`` and ``abort_requests`` are OrchestratorBase's own.

    def submit(self, submission: StageSubmission) -> None:
        request_id = submission.request_id
        session_id = session_id_of_request(request_id)
        if session_id is None:
            raise ValueError(f"not a session stage request id: {request_id!r}")
        if self.get_request(request_id) is None:
            if not self._is_current(session_id, request_id):
                # A late submission of a cancelled epoch (or a closed session): the abort
                # already covered its id; registering it again would resurrect it.
                log.debug("stale session submission %s dropped", request_id)
                return
            if self._dead_reason is not None:
                raise RuntimeError(self._dead_reason)
            self.register_request(request_id, owner=session_owner(session_id))
        sent = self.submit_stage_input(
            submission.stage_index,
            request_id,
            StageInput(dict(submission.data), final=submission.final),
        )
        if not sent and self.get_request(request_id) is None:
            # The stage refused it (unavailable) and the request was failed: an owned
            # request's failure reaches nobody else, so the session learns it here.
            raise RuntimeError(f"stage {submission.stage_index} could not take {request_id}")

    def _is_current(self, session_id: str, request_id: str) -> bool:
        runner = self.manager.runners.get(session_id)
        if runner is None or runner.closing:
            return False
        return epoch_of_request(request_id) == runner.session.epoch

    async def cleanup(self, request_ids: Sequence[str]) -> None:
        self.abort_requests(request_ids)

    # ---- stage outputs ---------------------------------------------------------------

    def _intercept_stage_output(self, stage_index: int, output: StageOutput) -> bool:
        state = self.get_request(output.request_id)
        if state is None or state.owner is None:
            return False
        if state.owner == TURN_RESPONSE_OWNER:
            self._route_turn_response(state, stage_index, output)
            return True
        if not state.owner.startswith(SESSION_OWNER_PREFIX):
            return False
        session_id = session_id_of_request(output.request_id)
        if session_id is None:
            return False
        to_session = output.error is not None or output.to_owner
        if not to_session and stage_index < state.final_stage_index:
            next_input = self._build_next_stage_input(stage_index, output)
            if next_input is not None:
                self.submit_stage_input(stage_index + 1, output.request_id, next_input)
        else:
            # A finished output addressed to the owner ends the request (a transcript no
            # response follows), whatever later stages started on it (a reply's draft).
            ends = output.error is not None or output.to_owner or not state.live_stages
            finished = output.finished and ends
            self.manager.on_stage_output(
                session_id,
                StageOutputItem(
                    request_id=output.request_id,
                    data=output.data,
                    finished=finished,
                    error=output.error,
                    compute_s=output.metrics.compute_s,
                    to_owner=output.to_owner,
                ),
            )
        if output.error is not None or (
            output.finished and (output.to_owner or not state.live_stages)
        ):
            # No stage holds it any more, it failed, or it ended at its owner: release it.
            # Aborting also stops whatever later stage still holds it.
            self.abort_request(output.request_id)
        return True

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
        self.register_request(request_id, owner=TURN_RESPONSE_OWNER)
        self._submit_turn_input(0, request_id, StageInput(data, final=True))

    def _submit_turn_input(self, stage_index: int, request_id: str, inputs: StageInput) -> None:
        if not self.submit_stage_input(stage_index, request_id, inputs) and (
            self.get_request(request_id) is None
        ):
            # The stage was unavailable and the owned request failed silently.
            stage = self.stage(stage_index)
            failure = stage_failure(f"stage {stage_index} ({stage.name}) is unavailable")
            self._emit(TurnResponseOutput.failed(request_id, failure, stage_index=stage_index))

    def _route_turn_response(
        self, state: RequestState, stage_index: int, output: StageOutput
    ) -> None:
        request_id = state.request_id
        if output.error is not None:
            self.abort_request(request_id)
            failure = stage_failure(output.error)
            self._emit(TurnResponseOutput.failed(request_id, failure, stage_index=stage_index))
            return
        final_stage = stage_index == state.final_stage_index
        projection = TurnProjection(())
        if final_stage or output.to_owner:
            # The final stage's outputs are the answer; a word addressed to the owner on
            # the way (a partial transcript) is projected as well.
            projection = self.turn_planner.project(output.data)
        else:
            next_input = self._build_next_stage_input(stage_index, output)
            if next_input is not None:
                self._submit_turn_input(stage_index + 1, request_id, next_input)
                if self.get_request(request_id) is None:
                    return  # the next stage could not take it (reported)
        done = (
            projection.ended
            or (final_stage and output.finished)
            or (output.finished and not state.live_stages)
        )
        if done:
            # Whatever a stage still holds is no longer needed.
            self.abort_request(request_id)
        if projection.results or done:
            failure = projection.failure
            self._emit(
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

    # ---- worker death ----------------------------------------------------------------

    def _on_worker_died(self, event: WorkerDied) -> None:
        owned = {
            rid for rid in event.request_ids_in_flight if session_id_of_request(rid) is not None
        }
        turns = [
            rid
            for rid in event.request_ids_in_flight
            if (state := self.get_request(rid)) is not None and state.owner == TURN_RESPONSE_OWNER
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
