"""The engine: stage workers, the orchestrator thread and loop, and the paths between
them and the caller's loop.

Threads and loops::

    caller loop (API server) --submit / call--> orchestrator loop (own thread)
    orchestrator loop        --stage messages--> stage workers (threads / processes)
    stage workers            --events----------> orchestrator loop (call_soon_threadsafe,
                                                  one per burst of events)
    orchestrator loop        --outputs---------> caller loop (asyncio.Queue ``outputs``)

Both directions cross in batches, in order, one ``call_soon_threadsafe`` (one wake-up of
the other loop) per batch: outputs, what one orchestrator loop iteration (a mailbox step,
a stage step) emitted; requests, what one iteration of a caller's loop submitted
(``submit`` and ``call`` share the batch, so they keep their one order).

One-way messages and RPCs share one ordered request stream. Subclasses choose the
orchestrator (``_create_orchestrator``), may validate the deployment before any stage
starts (``_validate_deployment``) and may place stage workers elsewhere
(``_create_stage_worker``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from ..config.pipeline import PipelineConfig, StageConfig
from .errors import EngineDeadError, EngineNotRunningError, EngineStartupError
from .orchestrator import OrchestratorBase, OutputSink
from .outputs import EngineDead
from .stage.counters import StageCounterBook
from .stage.handle import StageHandle
from .stage.inprocess import InProcessStageWorker
from .stage.messages import StageCounters
from .stage.subprocess_worker import SubprocessStageWorker
from .stage.worker import StageWorker, WorkerEventCallback

log = logging.getLogger(__name__)

# An RPC target: a message for ``OrchestratorBase._handle_rpc``, or a function run on
# the orchestrator loop with the orchestrator as its argument (it may return an awaitable).
CallTarget = object | Callable[[OrchestratorBase], Any]


class OmniEngineBase(ABC):
    def __init__(
        self,
        pipeline: PipelineConfig,
        *,
        startup_timeout_s: float = 120.0,
        stop_timeout_s: float = 5.0,
    ) -> None:
        self.pipeline = pipeline
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._state = "new"  # new -> starting -> running -> stopped
        self._state_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stages: tuple[StageHandle, ...] = ()
        self._orchestrator: OrchestratorBase | None = None
        # Worker events that arrive before the orchestrator exists (orchestrator loop only).
        self._early_events: list[object] = []
        # Worker events not yet on the orchestrator loop: a burst (one stage step's
        # outputs) takes one wake-up of that loop. Filled on worker threads.
        self._worker_events: list[object] = []
        self._worker_events_due = False
        self._worker_events_lock = threading.Lock()
        self._counters = StageCounterBook()
        self._output_loop: asyncio.AbstractEventLoop | None = None
        self._outputs: asyncio.Queue[object] | None = None
        # Outputs of the current orchestrator loop iteration, not yet handed over.
        self._unsent_outputs: list[object] = []
        # Requests of the current caller loop iteration, not yet handed over (callers may
        # be on several threads: the lock keeps one order).
        self._unsent_requests: list[_Request] = []
        self._requests_lock = threading.Lock()
        self._dead_reason: str | None = None
        # RPC replies not yet resolved, failed at teardown so no caller waits forever.
        self._pending_replies: set[concurrent.futures.Future[Any]] = set()

    # ---- seams ------------------------------------------------------------------------

    def _validate_deployment(self) -> None:  # noqa: B027 - optional hook, default accepts
        """Refuse a pipeline this engine cannot serve; runs before any stage starts."""

    @abstractmethod
    def _create_orchestrator(
        self,
        *,
        stages: Sequence[StageHandle],
        output_sink: OutputSink,
        pipeline: PipelineConfig,
    ) -> OrchestratorBase:
        """Build the orchestrator; called on the orchestrator thread once stages are up."""

    def _create_stage_worker(
        self,
        stage_index: int,
        config: StageConfig,
        *,
        generation: int,
        on_event: WorkerEventCallback,
    ) -> StageWorker:
        worker_cls = InProcessStageWorker if config.worker == "thread" else SubprocessStageWorker
        return worker_cls(
            stage_index,
            config.model,
            max_batch=config.max_batch,
            on_event=on_event,
            generation=generation,
            name=config.name,
        )

    # ---- state ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def alive(self) -> bool:
        return self.running and self.dead_reason is None

    @property
    def dead_reason(self) -> str | None:
        """Why the engine can serve nothing more, from the moment the orchestrator knows
        (``EngineDead`` reaches ``outputs`` only after the sessions it ends)."""
        orchestrator = self._orchestrator
        if self._dead_reason is None and orchestrator is not None:
            return orchestrator.dead_reason
        return self._dead_reason

    @property
    def stage_counters(self) -> dict[str, dict[str, float]]:
        """Each stage model's cumulative counters (``StageModel.counters``), by stage name."""
        names = {stage.index: stage.name for stage in self._stages}
        return self._counters.totals(names)

    @property
    def stages(self) -> tuple[StageHandle, ...]:
        """The stage slots (for introspection; the orchestrator thread drives them)."""
        return self._stages

    @property
    def outputs(self) -> asyncio.Queue[object]:
        """Everything the orchestrator emits, on the caller's loop, in order."""
        if self._outputs is None:
            raise EngineNotRunningError("engine has not been started")
        return self._outputs

    # ---- start ------------------------------------------------------------------------

    async def start_async(self) -> None:
        """Start from a coroutine: outputs will be delivered to the running loop."""
        await asyncio.to_thread(self.start, asyncio.get_running_loop())

    def start(self, output_loop: asyncio.AbstractEventLoop) -> None:
        """Start every stage, then the orchestrator; blocks until all are up.

        Raises ``EngineStartupError`` (with everything torn down) if a stage cannot start.
        """
        with self._state_lock:
            if self._state != "new":
                raise EngineNotRunningError(f"engine cannot start from state {self._state!r}")
            self._state = "starting"
        try:
            self._validate_deployment()
            self._output_loop = output_loop
            self._outputs = asyncio.Queue()
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._run_loop, args=(self._loop,), name="omni-orchestrator", daemon=True
            )
            self._thread.start()
            self._start_stages()
            bootstrap = asyncio.run_coroutine_threadsafe(self._bootstrap_orchestrator(), self._loop)
            bootstrap.result(self.startup_timeout_s)
        except BaseException as exc:
            self._teardown()
            with self._state_lock:
                self._state = "stopped"
            if not isinstance(exc, Exception) or isinstance(exc, EngineStartupError | ValueError):
                raise
            raise EngineStartupError(f"engine failed to start: {exc}") from exc
        with self._state_lock:
            self._state = "running"

    def _start_stages(self) -> None:
        self._stages = tuple(
            StageHandle(
                index,
                config.name,
                functools.partial(self._build_worker, index, config),
                max_restarts=config.max_restarts,
            )
            for index, config in enumerate(self.pipeline.stages)
        )
        # Launch all before waiting for any, so subprocess stages come up in parallel.
        for stage in self._stages:
            stage.start()
        deadline = time.monotonic() + self.startup_timeout_s
        for stage in self._stages:
            try:
                stage.wait_ready(max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                raise EngineStartupError(
                    f"stage {stage.index} ({stage.name}) failed to start: {exc}"
                ) from exc

    def _build_worker(self, index: int, config: StageConfig, generation: int) -> StageWorker:
        return self._create_stage_worker(
            index, config, generation=generation, on_event=self._on_worker_event
        )

    async def _bootstrap_orchestrator(self) -> None:
        orchestrator = self._create_orchestrator(
            stages=self._stages, output_sink=self._post_output, pipeline=self.pipeline
        )
        await orchestrator.start()
        self._orchestrator = orchestrator
        early, self._early_events = self._early_events, []
        for event in early:
            orchestrator.handle_worker_event(event)

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    # ---- worker events -> orchestrator loop ---------------------------------------------

    def _on_worker_event(self, event: object) -> None:
        # Runs on a worker's thread.
        if isinstance(event, StageCounters):
            self._counters.record(event)  # for /metrics; the orchestrator needs none
            return
        loop = self._loop
        if loop is None:
            return
        with self._worker_events_lock:
            self._worker_events.append(event)
            if self._worker_events_due:
                return  # the wake-up already asked for takes this one too
            self._worker_events_due = True
        try:
            loop.call_soon_threadsafe(self._deliver_worker_events)
        except RuntimeError:
            log.debug("worker event after the orchestrator loop closed: %r", event)

    def _deliver_worker_events(self) -> None:
        with self._worker_events_lock:
            batch, self._worker_events = self._worker_events, []
            self._worker_events_due = False
        for event in batch:
            try:
                self._deliver_worker_event(event)
            except Exception:  # one bad event must not take the rest of its burst along
                log.exception("handling worker event %r failed", type(event).__name__)

    def _deliver_worker_event(self, event: object) -> None:
        if self._orchestrator is None:
            self._early_events.append(event)
        else:
            self._orchestrator.handle_worker_event(event)

    # ---- orchestrator loop -> caller loop -----------------------------------------------

    def _post_output(self, message: object) -> None:
        if isinstance(message, EngineDead):
            self._dead_reason = message.reason
        if self._output_loop is None or self._outputs is None:
            return
        orchestrator_loop = self._loop
        if orchestrator_loop is None or not _running_here(orchestrator_loop):
            # Not from an orchestrator step (its loop stopped, or another thread): keep
            # the order of what that loop still holds by going through it, if it runs.
            if orchestrator_loop is not None and orchestrator_loop.is_running():
                with contextlib.suppress(RuntimeError):
                    orchestrator_loop.call_soon_threadsafe(self._post_output, message)
                    return
            self._hand_over([message])
            return
        self._unsent_outputs.append(message)
        if len(self._unsent_outputs) == 1:
            orchestrator_loop.call_soon(self._flush_outputs)

    def _stop_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        # Callbacks scheduled in the loop's last iteration never run: hand over first.
        self._flush_outputs()
        loop.stop()

    def _flush_outputs(self) -> None:
        batch, self._unsent_outputs = self._unsent_outputs, []
        if batch:
            self._hand_over(batch)

    def _hand_over(self, batch: list[object]) -> None:
        loop, outputs = self._output_loop, self._outputs
        if loop is None or outputs is None:
            return
        try:
            loop.call_soon_threadsafe(_put_all, outputs, batch)
        except RuntimeError:
            log.debug("output after the caller's loop closed: %r", batch)

    # ---- request path (caller loop -> orchestrator loop) --------------------------------

    def _require_serving(self) -> tuple[asyncio.AbstractEventLoop, OrchestratorBase]:
        if self._dead_reason is not None:
            raise EngineDeadError(self._dead_reason)
        loop, orchestrator = self._loop, self._orchestrator
        if self._state != "running" or loop is None or orchestrator is None:
            raise EngineNotRunningError(f"engine is not running (state {self._state!r})")
        return loop, orchestrator

    def submit(self, message: object) -> None:
        """Queue a one-way message for the orchestrator; thread-safe, never blocks."""
        self._send_request((message, None))

    def _send_request(self, request: _Request) -> None:
        """Queue ``request`` for the orchestrator behind every earlier one. From a running
        loop it joins that loop iteration's batch; from a plain thread it goes at once."""
        loop, orchestrator = self._require_serving()
        try:
            caller = asyncio.get_running_loop()
        except RuntimeError:
            caller = None
        with self._requests_lock:
            self._unsent_requests.append(request)
            first = len(self._unsent_requests) == 1
        if caller is None:
            self._flush_requests(loop, orchestrator)
        elif first:
            caller.call_soon(self._flush_requests, loop, orchestrator)

    def _flush_requests(
        self, loop: asyncio.AbstractEventLoop, orchestrator: OrchestratorBase
    ) -> None:
        with self._requests_lock:
            batch, self._unsent_requests = self._unsent_requests, []
        if not batch:
            return
        try:
            loop.call_soon_threadsafe(_enqueue_all, orchestrator, batch)
        except RuntimeError:  # the loop closed under us: shutdown raced these requests
            for _, reply in batch:
                if reply is not None and reply.set_running_or_notify_cancel():
                    reply.set_exception(EngineNotRunningError("engine is shutting down"))

    async def call(self, target: CallTarget, *, timeout: float | None = None) -> Any:
        """Run an RPC on the orchestrator loop and await its result.

        ``target`` is a message (answered by ``_handle_rpc``) or a function of the
        orchestrator. It is queued behind earlier ``submit``s. On timeout or cancellation
        the caller stops waiting, but an RPC that already started still completes.
        """
        reply: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._send_request((target, reply))
        self._pending_replies.add(reply)
        reply.add_done_callback(self._pending_replies.discard)
        return await asyncio.wait_for(asyncio.wrap_future(reply), timeout)

    # ---- shutdown ---------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the orchestrator, every stage worker and the loop thread. Idempotent."""
        with self._state_lock:
            if self._state in ("new", "stopped"):
                self._state = "stopped"
                return
            self._state = "stopped"
        self._teardown()

    async def shutdown_async(self) -> None:
        await asyncio.to_thread(self.shutdown)

    def _teardown(self) -> None:
        loop, thread, orchestrator = self._loop, self._thread, self._orchestrator
        if loop is not None and orchestrator is not None and loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(orchestrator.shutdown(), loop).result(
                    self.stop_timeout_s
                )
            except Exception:
                log.exception("orchestrator shutdown failed")
        for stage in self._stages:
            try:
                stage.stop(self.stop_timeout_s)
            except Exception:
                log.exception("stopping stage %d failed", stage.index)
        if loop is not None and thread is not None:
            with contextlib.suppress(RuntimeError):  # already closed
                loop.call_soon_threadsafe(self._stop_loop, loop)
            if thread is not threading.current_thread():
                thread.join(self.stop_timeout_s)
        self._orchestrator = None
        for reply in list(self._pending_replies):
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                reply.set_exception(EngineNotRunningError("engine shut down"))


def _running_here(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _put_all(queue: asyncio.Queue[object], batch: list[object]) -> None:
    for message in batch:
        queue.put_nowait(message)


# A message for the orchestrator and, for an RPC, the future its answer goes to.
_Request = tuple[Any, "concurrent.futures.Future[Any] | None"]


def _enqueue_all(orchestrator: OrchestratorBase, batch: list[_Request]) -> None:
    for message, reply in batch:
        orchestrator.enqueue(message, reply)
