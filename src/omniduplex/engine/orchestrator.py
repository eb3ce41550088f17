"""Routes requests through the stages, on the orchestrator's own asyncio loop.

``OrchestratorBase`` is the generic machinery: the ordered request stream, stage
submission (first input of a request on a stage opens it, later ones update it), routing
of a stage's outputs to the next stage or to the output sink, abort across stages, and
worker death. Subclasses change behaviour only through the template seams
(``_dispatch_message``, ``_handle_rpc``, ``_intercept_stage_output``,
``_build_next_stage_input``, ``_on_worker_died``, ``_on_engine_dead``,
``_on_request_finished``, ``_background_tasks``, ``_shutdown_extensions``).
``Orchestrator`` adds turn-based admission: a client's ``AddRequest`` enters stage 0, an
``AddStageRequest`` (a stage task, ``stage/tasks.py``) enters the stage it names and ends
there.

Everything here runs on the orchestrator loop; nothing is locked.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..config.pipeline import PipelineConfig
from .errors import EngineNotRunningError
from .outputs import EngineDead, RequestOutput
from .request_owner import RequestOwner
from .stage.handle import StageHandle
from .stage.messages import (
    AbortRequest,
    AddRequest,
    StageInput,
    StageMetrics,
    StageOutput,
    UpdateRequest,
    WorkerDied,
)

log = logging.getLogger(__name__)

OutputSink = Callable[[object], None]


@dataclass(slots=True)
class RequestState:
    """What the orchestrator knows about one request across the stages."""

    request_id: str
    final_stage_index: int
    # None for a client request. Otherwise the component that owns it (a
    # ``RequestOwner``, routed by ``_route_owned``): an owned request never reaches the
    # sink, gets no synthetic terminal output, and is not released when its final stage
    # finishes; it leaves only when its owner says it ended, through
    # ``abort_request(s)``, or a failure.
    owner: RequestOwner | None = None
    # Stages the request was opened on (add_request sent) ...
    started_stages: set[int] = field(default_factory=set)
    # ... and those still holding it (not finished there, not aborted).
    live_stages: set[int] = field(default_factory=set)
    stage_metrics: dict[int, StageMetrics] = field(default_factory=dict)
    terminal_sent: bool = False


@dataclass(frozen=True, slots=True)
class _Envelope:
    message: object
    # Set for an RPC: resolved with the handler's result on the orchestrator loop.
    reply: concurrent.futures.Future[Any] | None = None


@dataclass(frozen=True, slots=True)
class AddStageRequest:
    """Client message: open a request on one stage alone; that stage's outputs are the
    answer (a standalone stage task)."""

    request_id: str
    stage_index: int
    inputs: StageInput


class OrchestratorBase:
    def __init__(
        self,
        *,
        stages: Sequence[StageHandle],
        output_sink: OutputSink,
        pipeline: PipelineConfig | None = None,
    ) -> None:
        if not stages:
            raise ValueError("an orchestrator needs at least one stage")
        self.pipeline = pipeline
        self._stages = tuple(stages)
        self._sink = output_sink
        self._requests: dict[str, RequestState] = {}
        self._queue: asyncio.Queue[_Envelope] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._rpc_tasks: set[asyncio.Task[Any]] = set()
        self._dead_reason: str | None = None
        self._closed = False

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._tasks.append(asyncio.create_task(self._request_loop(), name="omni-requests"))
        for coro in self._background_tasks():
            self._tasks.append(asyncio.create_task(coro))

    async def shutdown(self, reason: str = "engine shut down") -> None:
        """Stop the background work and fail every open request. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in (*self._tasks, *self._rpc_tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._rpc_tasks, return_exceptions=True)
        while self._queue is not None and not self._queue.empty():
            reply = self._queue.get_nowait().reply
            if reply is not None and reply.set_running_or_notify_cancel():
                reply.set_exception(
                    EngineNotRunningError("orchestrator shut down before the call ran")
                )
        try:
            await self._shutdown_extensions()
        except Exception:
            log.exception("orchestrator shutdown extension failed")
        for request_id in list(self._requests):
            self._fail_request(request_id, reason)

    # ---- entry points (called by the engine on this loop) -------------------------------

    def enqueue(self, message: object, reply: concurrent.futures.Future[Any] | None = None) -> None:
        """Queue a client message (one-way) or an RPC (``reply`` set), in arrival order."""
        if self._queue is None or self._closed:
            if reply is not None and reply.set_running_or_notify_cancel():
                reply.set_exception(EngineNotRunningError("orchestrator is not running"))
            return
        self._queue.put_nowait(_Envelope(message, reply))

    def handle_worker_event(self, event: object) -> None:
        if isinstance(event, StageOutput):
            self._on_stage_output(event)
        elif isinstance(event, WorkerDied):
            self._handle_worker_died(event)
        else:
            log.error("ignoring unknown worker event %r", event)

    async def _request_loop(self) -> None:
        assert self._queue is not None
        while True:
            envelope = await self._queue.get()
            if envelope.reply is None:
                self._dispatch_safely(envelope.message)
                continue
            task = asyncio.create_task(self._serve_rpc(envelope.message, envelope.reply))
            self._rpc_tasks.add(task)
            task.add_done_callback(self._rpc_tasks.discard)
            # Let the RPC run up to its first suspension before the next message, so
            # handlers observe the request stream in order.
            await asyncio.sleep(0)

    def _dispatch_safely(self, message: object) -> None:
        try:
            handled = self._dispatch_message(message)
        except Exception as exc:
            log.exception("dispatching %s failed", type(message).__name__)
            request_id = getattr(message, "request_id", None)
            if isinstance(request_id, str):
                self._reject(request_id, f"internal error: {type(exc).__name__}: {exc}")
            return
        if not handled:
            log.error("no handler for message %s", type(message).__name__)

    async def _serve_rpc(self, target: object, reply: concurrent.futures.Future[Any]) -> None:
        # Once running, an RPC completes even if its caller stopped waiting.
        if not reply.set_running_or_notify_cancel():
            return
        try:
            if callable(target):
                result = target(self)
                if inspect.isawaitable(result):
                    result = await result
            else:
                result = await self._handle_rpc(target)
        except asyncio.CancelledError:
            reply.set_exception(EngineNotRunningError("orchestrator shut down during the call"))
            raise
        except Exception as exc:
            reply.set_exception(exc)
        else:
            reply.set_result(result)

    # ---- template seams ---------------------------------------------------------------

    def _dispatch_message(self, message: object) -> bool:
        """Handle a one-way client message; False if this class does not know it.

        Overrides handle what they know and pass everything else to ``super()``.
        """
        if isinstance(message, AbortRequest):
            self.abort_request(message.request_id)
            return True
        return False

    async def _handle_rpc(self, message: object) -> Any:
        """Answer an RPC message sent with ``engine.call(message)``."""
        raise TypeError(f"no RPC handler for {type(message).__name__}")

    def _intercept_stage_output(self, stage_index: int, output: StageOutput) -> bool:
        """See an output before generic routing; True means consumed (no routing at all).

        Called for every output of a registered request, errors included, after the
        bookkeeping (metrics stored, a finished stage removed from ``live_stages``). A
        consumer owns what happens next: forwarding, finishing, aborting or failing. By
        default an owned request's outputs go through ``_route_owned``.
        """
        state = self._requests.get(output.request_id)
        if state is None or state.owner is None:
            return False
        self._route_owned(state.owner, state, stage_index, output)
        return True

    def _build_next_stage_input(self, stage_index: int, output: StageOutput) -> StageInput | None:
        """The input stage ``stage_index + 1`` gets from ``output``; None forwards nothing."""
        if not output.data and not output.finished:
            return None
        return StageInput(data=dict(output.data), final=output.finished)

    def _on_worker_died(self, event: WorkerDied) -> None:
        """Fail the requests the dead worker held (``event`` lists every one of them)."""
        stage = self._stages[event.stage_index]
        for request_id in event.request_ids_in_flight:
            self._fail_request(
                request_id,
                f"stage {stage.index} ({stage.name}) worker died: {event.reason}",
                stage_index=stage.index,
            )

    def _on_engine_dead(self, reason: str) -> None:
        """The engine can serve nothing more (every open request has failed): say so.

        Called once. An override that ends its own work first (sessions) must still emit
        ``EngineDead`` when it is done: callers stop listening for anything else then.
        """
        self._emit(EngineDead(reason))

    def _on_request_finished(self, request_id: str) -> None:
        """A request left the orchestrator (finished, failed or aborted); called once."""

    def _background_tasks(self) -> list[Coroutine[Any, Any, None]]:
        """Coroutines to run for the orchestrator's lifetime (cancelled at shutdown)."""
        return []

    async def _shutdown_extensions(self) -> None:
        """Subclass cleanup, after background tasks stop and before open requests fail."""

    # ---- stage access ----------------------------------------------------------------

    @property
    def stage_count(self) -> int:
        return len(self._stages)

    @property
    def dead_reason(self) -> str | None:
        """Why the engine can serve nothing more; set once, on this loop, and safe to
        read from any thread."""
        return self._dead_reason

    def stage(self, index: int) -> StageHandle:
        return self._stages[index]

    def get_request(self, request_id: str) -> RequestState | None:
        return self._requests.get(request_id)

    def register_request(
        self,
        request_id: str,
        *,
        final_stage_index: int | None = None,
        owner: RequestOwner | None = None,
    ) -> RequestState:
        """Start tracking a request; required before its first ``submit_stage_input``.

        ``owner`` marks a request some component drives itself (see ``RequestState``).
        """
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} is already registered")
        final = self.stage_count - 1 if final_stage_index is None else final_stage_index
        if not 0 <= final < self.stage_count:
            raise ValueError(f"final_stage_index {final} out of range")
        state = RequestState(request_id, final_stage_index=final, owner=owner)
        self._requests[request_id] = state
        return state

    def submit_stage_input(self, stage_index: int, request_id: str, inputs: StageInput) -> bool:
        """Send input to a stage: the first input opens the request there, later ones update it.

        Returns False, sending nothing, when the request is not registered (it was
        aborted, failed or finished) or the stage already finished it.
        """
        state = self._requests.get(request_id)
        if state is None:
            log.debug("stage %d input for unregistered request %s dropped", stage_index, request_id)
            return False
        stage = self._stages[stage_index]
        if not stage.available:
            self._fail_request(
                request_id,
                f"stage {stage_index} ({stage.name}) is unavailable",
                stage_index=stage_index,
            )
            return False
        if stage_index in state.started_stages:
            if stage_index not in state.live_stages:
                log.debug("stage %d already finished %s; input dropped", stage_index, request_id)
                return False
            stage.submit(UpdateRequest(request_id, inputs))
        else:
            state.started_stages.add(stage_index)
            state.live_stages.add(stage_index)
            stage.submit(AddRequest(request_id, inputs))
        return True

    def abort_request(self, request_id: str) -> None:
        """Abort a request on every stage holding it and forget it; it emits nothing more.

        This is also how an owner releases an owned request that no stage holds any more.
        """
        state = self._requests.get(request_id)
        if state is None:
            return
        self._abort_live_stages(state)
        self._forget(state)

    def abort_requests(self, request_ids: Sequence[str]) -> None:
        for request_id in dict.fromkeys(request_ids):
            self.abort_request(request_id)

    # ---- output routing ---------------------------------------------------------------

    def _on_stage_output(self, output: StageOutput) -> None:
        state = self._requests.get(output.request_id)
        if state is None:
            return  # aborted, failed or finished meanwhile: late outputs are dropped
        stage_index = output.stage_index
        state.stage_metrics[stage_index] = output.metrics
        if output.finished:  # errors are always finished
            state.live_stages.discard(stage_index)
        try:
            consumed = self._intercept_stage_output(stage_index, output)
        except Exception as exc:
            log.exception("intercepting stage %d output of %s", stage_index, state.request_id)
            self._fail_request(
                state.request_id, f"internal error: {type(exc).__name__}: {exc}", stage_index=-1
            )
            return
        if not consumed:
            self._route_stage_output(stage_index, output)

    def _route_stage_output(self, stage_index: int, output: StageOutput) -> None:
        """Generic routing: forward to the next stage, or deliver the final stage's output."""
        state = self._requests.get(output.request_id)
        if state is None:
            return
        if output.error is not None:
            self._fail_request(state.request_id, output.error, stage_index=stage_index)
            return
        if stage_index < state.final_stage_index:
            if output.to_owner:
                # A word for the client on the way (a partial transcript), not an input
                # for the next stage; it never ends the request by itself.
                if state.owner is None:
                    self._emit(self._request_output(state, replace(output, finished=False)))
            else:
                next_input = self._build_next_stage_input(stage_index, output)
                if next_input is not None:
                    self.submit_stage_input(stage_index + 1, state.request_id, next_input)
            still_open = self._requests.get(state.request_id) is state
            if output.finished and still_open and not state.live_stages and state.owner is None:
                self._finish(state)
            return
        if state.owner is not None:
            return
        if output.finished:
            # The final stage is done: the answer is complete, whatever earlier stages
            # still hold is no longer needed.
            state.terminal_sent = True
            self._abort_live_stages(state)
            self._forget(state)
        self._emit(self._request_output(state, output))

    def _route_owned(
        self, owner: RequestOwner, state: RequestState, stage_index: int, output: StageOutput
    ) -> None:
        """Forward an owned request's output to the next stage, or hand it to its owner;
        release the request when the owner says it ended."""
        request_id = state.request_id
        if output.error is None and not output.to_owner and stage_index < state.final_stage_index:
            next_input = self._build_next_stage_input(stage_index, output)
            if next_input is not None:
                taken = self.submit_stage_input(stage_index + 1, request_id, next_input)
                if not taken and self._requests.get(request_id) is None:
                    stage = self._stages[stage_index + 1]
                    owner.failed(
                        state, stage_index + 1, f"stage {stage.index} ({stage.name}) is unavailable"
                    )
                    return
            if not (output.finished and not state.live_stages):
                return  # the request goes on at the next stage
        if owner.deliver(state, stage_index, output):
            self.abort_request(request_id)

    def _request_output(self, state: RequestState, output: StageOutput) -> RequestOutput:
        return RequestOutput(
            request_id=state.request_id,
            data=output.data,
            finished=output.finished,
            error=output.error,
            stage_index=output.stage_index,
            metrics=output.metrics,
            stage_metrics=dict(state.stage_metrics),
        )

    # ---- request endings --------------------------------------------------------------

    # A request is released (and ``_on_request_finished`` runs) before its terminal
    # output is emitted, so whoever sees the terminal output can rely on the release.

    def _fail_request(self, request_id: str, error: str, *, stage_index: int = -1) -> None:
        """End a request with an error: abort it everywhere, forget it, tell the sink."""
        state = self._requests.get(request_id)
        if state is None:
            return
        self._abort_live_stages(state)
        self._forget(state)
        if state.owner is None and not state.terminal_sent:
            state.terminal_sent = True
            self._emit(
                RequestOutput(
                    request_id=request_id,
                    data={},
                    finished=True,
                    error=error,
                    stage_index=stage_index,
                    stage_metrics=dict(state.stage_metrics),
                )
            )

    def _finish(self, state: RequestState) -> None:
        self._forget(state)
        if state.owner is None and not state.terminal_sent:
            # Every client request ends with a finished output, even when the last stage
            # had nothing more to say.
            state.terminal_sent = True
            self._emit(
                RequestOutput(
                    request_id=state.request_id,
                    data={},
                    finished=True,
                    stage_index=state.final_stage_index,
                    stage_metrics=dict(state.stage_metrics),
                )
            )

    def _reject(self, request_id: str, error: str) -> None:
        if request_id in self._requests:
            self._fail_request(request_id, error)
        else:
            self._emit(RequestOutput(request_id=request_id, data={}, finished=True, error=error))

    def _abort_live_stages(self, state: RequestState) -> None:
        for stage_index in sorted(state.live_stages):
            self._stages[stage_index].submit(AbortRequest(state.request_id))
        state.live_stages.clear()

    def _forget(self, state: RequestState) -> None:
        if self._requests.pop(state.request_id, None) is None:
            return
        try:
            self._on_request_finished(state.request_id)
        except Exception:
            log.exception("_on_request_finished(%s) failed", state.request_id)

    def _emit(self, message: object) -> None:
        self._sink(message)

    # ---- worker death -----------------------------------------------------------------

    def _handle_worker_died(self, event: WorkerDied) -> None:
        stage = self._stages[event.stage_index]
        if not stage.available or event.worker_generation != stage.generation:
            log.debug("ignoring stale %r", event)
            return
        affected = dict.fromkeys(event.request_ids_in_flight)
        for request_id, state in self._requests.items():
            if stage.index in state.live_stages:
                affected[request_id] = None
        for request_id in affected:
            state = self._requests.get(request_id)
            if state is not None:
                # The worker that held it is gone: nothing to abort there, and the next
                # generation must see a fresh add_request.
                state.live_stages.discard(stage.index)
                state.started_stages.discard(stage.index)
        event = replace(event, request_ids_in_flight=tuple(affected))
        log.error(
            "stage %d (%s) worker died: %s; %d request(s) affected",
            stage.index,
            stage.name,
            event.reason,
            len(affected),
        )
        try:
            self._on_worker_died(event)
        except Exception:
            log.exception("_on_worker_died failed")
        if not stage.restart():
            self._declare_dead(
                f"stage {stage.index} ({stage.name}) worker died and its restart budget "
                f"({stage.max_restarts}) is spent: {event.reason}"
            )

    def _declare_dead(self, reason: str) -> None:
        if self._dead_reason is not None:
            return
        self._dead_reason = reason
        for request_id in list(self._requests):
            self._fail_request(request_id, reason)
        self._on_engine_dead(reason)


class Orchestrator(OrchestratorBase):
    """Turn-based admission: a client's ``AddRequest`` opens the request on stage 0.

    A client ``UpdateRequest`` streams more input into stage 0 of its open request. An
    ``AddStageRequest`` opens a request on the stage it names, whose outputs are final.
    """

    def _dispatch_message(self, message: object) -> bool:
        if isinstance(message, AddRequest):
            self._admit(message.request_id, message.inputs, stage_index=0, final_stage_index=None)
            return True
        if isinstance(message, AddStageRequest):
            stage_index = message.stage_index
            self._admit(
                message.request_id,
                message.inputs,
                stage_index=stage_index,
                final_stage_index=stage_index,
            )
            return True
        if isinstance(message, UpdateRequest):
            if not self.submit_stage_input(0, message.request_id, message.inputs):
                log.debug("update for closed request %s dropped", message.request_id)
            return True
        return super()._dispatch_message(message)

    def _admit(
        self,
        request_id: str,
        inputs: StageInput,
        *,
        stage_index: int,
        final_stage_index: int | None,
    ) -> None:
        """Open a client request on ``stage_index``; it ends on ``final_stage_index``
        (``None``: the last stage)."""
        if self._dead_reason is not None:
            self._reject(request_id, self._dead_reason)
            return
        if request_id in self._requests:
            log.warning("duplicate request id %s refused", request_id)
            self._emit(
                RequestOutput(
                    request_id=request_id,
                    data={},
                    finished=True,
                    error=f"request id {request_id!r} is already in use",
                )
            )
            return
        if not 0 <= stage_index < self.stage_count:
            self._reject(request_id, f"stage {stage_index} does not exist")
            return
        self.register_request(request_id, final_stage_index=final_stage_index)
        self.submit_stage_input(stage_index, request_id, inputs)
