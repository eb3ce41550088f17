"""A stage worker in a child process: crash isolation and a core of its own.

The child is started with the ``spawn`` context, builds its model from a
``StageModelSpec`` and runs the same scheduler loop as the in-process worker. Requests go
in through a pipe written by a sender thread (so ``submit`` never blocks the orchestrator
loop, even while the child is busy in a long step), which sends everything submitted
since its last write as one list: the inputs that many sessions send during a step cross
as one transfer, not one per session. A step's outputs come back as one list through a
second pipe that a monitor thread watches together with the child's sentinel, so a child
that dies for any reason (a signal, ``os._exit``, a failing constructor) becomes a
``WorkerDied`` event carrying the requests it held.

Because of ``spawn``, a script that starts an engine with process stages must guard its
entry point with ``if __name__ == "__main__":`` (the child re-imports the main module).

The parent decides when its stages stop. A SIGTERM sent to the whole process group
(systemd's default stop, a container stop, ``kill -TERM -PGID``) reaches the child as
well as the server; the child leaves it to the parent, whose shutdown closes the
sessions and then stops each stage in order, so the worker's exit is not a death to
report or to restart. Only a SIGTERM sent by the parent itself (``stop`` past its
timeout, multiprocessing's exit handler), or one that comes once the parent is gone,
ends the child at once.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .messages import (
    AbortRequest,
    AddRequest,
    StageCounters,
    StageOutput,
    StageRequestMessage,
    StopWorker,
    WorkerDied,
)
from .scheduler import StageInbox, StageScheduler, run_scheduler_loop
from .spec import StageModelSpec
from .worker import StageWorker, StageWorkerError, StartupGate, WorkerEventCallback

log = logging.getLogger(__name__)

# How often an idle child checks that its parent still exists, so an engine killed
# without shutdown does not leave stage processes behind.
_PARENT_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class _ChildReady:
    pid: int


@dataclass(frozen=True, slots=True)
class _ChildCounters:
    counters: dict[str, float]


@dataclass(frozen=True, slots=True)
class _ChildFailed:
    """Sent just before the child exits on purpose, so the parent can say why."""

    reason: str


class _BatchSender:
    """Writes what was submitted to the child, everything pending in one ``send``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._pending: list[object] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def put(self, message: object) -> None:
        with self._cond:
            if not self._closed:
                self._pending.append(message)
                self._cond.notify()

    def start(self, conn: multiprocessing.connection.Connection) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(conn,), name=f"omni-{self._name}-sender", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop sending (what is still pending is dropped: the child is gone or stopping)."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(1.0)

    def _run(self, conn: multiprocessing.connection.Connection) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: bool(self._pending) or self._closed)
                    if self._closed:
                        return
                    batch, self._pending = self._pending, []
                conn.send(batch)
        except (OSError, ValueError):
            # The child closed its end (it died or stopped); the monitor reports why.
            log.debug("%s: request pipe closed", self._name)
        finally:
            conn.close()


class SubprocessStageWorker(StageWorker):
    def __init__(
        self,
        stage_index: int,
        spec: StageModelSpec,
        *,
        max_batch: int,
        on_event: WorkerEventCallback,
        generation: int = 0,
        name: str | None = None,
    ) -> None:
        self.stage_index = stage_index
        self.generation = generation
        self.spec = spec
        self.max_batch = max_batch
        self.name = name or f"stage-{stage_index}"
        self._on_event = on_event
        self._ctx = multiprocessing.get_context("spawn")
        # Created now so that messages submitted before start() are kept.
        self._sender = _BatchSender(self.name)
        self._process: Any = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._monitor: threading.Thread | None = None
        self._lock = threading.Lock()
        # Insertion-ordered set of the requests the child holds, for WorkerDied.
        self._in_flight: dict[str, None] = {}
        self._startup = StartupGate()
        self._exit_note: str | None = None
        self._stopping = False
        self._dead = False
        self._inbox_released = False

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def alive(self) -> bool:
        # Our own flags, not process.is_alive(): that reaps the child, and only the
        # monitor thread may reap it or the exit status could be lost.
        return self._process is not None and not self._stopping and not self._dead

    def start(self) -> None:
        if self._process is not None:
            raise StageWorkerError(f"{self.name}: already started")
        reader, writer = self._ctx.Pipe(duplex=False)
        requests_in, requests_out = self._ctx.Pipe(duplex=False)
        self._process = self._ctx.Process(
            target=_child_main,
            args=(self.stage_index, self.spec, self.max_batch, requests_in, writer),
            name=f"omni-{self.name}-g{self.generation}",
            daemon=True,
        )
        self._process.start()
        # Only the child may hold the output's write end, or its death would never read
        # as EOF; only we hold the requests' write end, so ours reads as EOF there.
        writer.close()
        requests_in.close()
        self._conn = reader
        self._sender.start(requests_out)
        self._monitor = threading.Thread(
            target=self._watch_child, name=f"omni-{self.name}-monitor", daemon=True
        )
        self._monitor.start()

    def wait_ready(self, timeout: float | None = None) -> None:
        if self._process is None:
            raise StageWorkerError(f"{self.name}: not started")
        self._startup.wait(self.name, timeout)

    def submit(self, message: StageRequestMessage) -> None:
        if self._dead or self._stopping:
            # The orchestrator fails what it routed here when it handles WorkerDied.
            log.debug("%s: dropping %r, worker is not serving", self.name, message)
            return
        with self._lock:
            if isinstance(message, AddRequest):
                self._in_flight[message.request_id] = None
            elif isinstance(message, AbortRequest):
                self._in_flight.pop(message.request_id, None)
        self._sender.put(message)

    def stop(self, timeout: float = 5.0) -> None:
        if self._stopping:
            return
        self._stopping = True
        process, monitor = self._process, self._monitor
        if process is not None and not self._dead:
            self._sender.put(StopWorker())
        # The monitor thread ends once it has reaped the child, so waiting for it is
        # waiting for the child.
        if monitor is not None and monitor is not threading.current_thread():
            monitor.join(timeout)
            if monitor.is_alive():
                log.warning("%s: child did not stop in %.1f s; terminating", self.name, timeout)
                process.terminate()
                monitor.join(1.0)
            if monitor.is_alive():
                process.kill()
                monitor.join()
        self._release_inbox()

    def _release_inbox(self) -> None:
        with self._lock:
            if self._inbox_released:
                return
            self._inbox_released = True
        self._sender.close()

    # ---- monitor thread -------------------------------------------------------------

    def _watch_child(self) -> None:
        conn, process = self._conn, self._process
        assert conn is not None and process is not None
        while True:
            ready = multiprocessing.connection.wait([conn, process.sentinel])
            if conn not in ready:
                break
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            self._on_child_message(message)
        # The child is gone; it may have sent outputs just before it went.
        try:
            while conn.poll():
                self._on_child_message(conn.recv())
        except (EOFError, OSError):
            pass
        process.join()  # the only place the child is reaped
        conn.close()
        self._dead = True
        if self._stopping:
            # Asked to stop: an expected exit, said once, and never a restart.
            log.info("%s: worker process %s stopped", self.name, process.pid)
            self._startup.open()
            return
        reason = self._exit_note or _describe_exit(process.pid, process.exitcode)
        if not self._startup.settled and self._exit_note is None:
            # It died before reaching our code: spawn's bootstrap (re-importing the
            # parent's main module) or an import failed; the child's stderr has it.
            reason += (
                " before its model was ready (its stderr has any traceback; note that a"
                " script starting an engine needs an `if __name__ == '__main__':` guard)"
            )
        self._startup.fail(reason)
        with self._lock:
            in_flight = tuple(self._in_flight)
            self._in_flight.clear()
        self._release_inbox()
        log.error("%s: worker died: %s (in flight: %d)", self.name, reason, len(in_flight))
        self._on_event(
            WorkerDied(
                stage_index=self.stage_index,
                request_ids_in_flight=in_flight,
                reason=reason,
                worker_generation=self.generation,
            )
        )

    def _on_child_message(self, message: object) -> None:
        if isinstance(message, list):
            for output in message:
                if output.finished:
                    with self._lock:
                        self._in_flight.pop(output.request_id, None)
                self._on_event(output)
        elif isinstance(message, _ChildCounters):
            self._on_event(StageCounters(self.stage_index, message.counters, self.generation))
        elif isinstance(message, _ChildReady):
            self._startup.open()
        elif isinstance(message, _ChildFailed):
            self._exit_note = message.reason
        else:
            log.error("%s: unexpected message from child: %r", self.name, message)


def _describe_exit(pid: int | None, exitcode: int | None) -> str:
    if exitcode is None:
        return f"worker process {pid} vanished"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"worker process {pid} was killed by {name}"
    return f"worker process {pid} exited with code {exitcode}"


# ---- child process --------------------------------------------------------------------


class _PipeInbox(StageInbox):
    """The child's end of the request pipe: each read is a list of messages."""

    def __init__(
        self, conn: multiprocessing.connection.Connection, parent_alive: Callable[[], bool]
    ) -> None:
        self._conn = conn
        self._parent_alive = parent_alive

    def get_many(self, *, block: bool, timeout: float | None = None) -> list[object]:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while block:
                wait = _PARENT_POLL_S
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        return []
                if self._conn.poll(wait):
                    break
                if not self._parent_alive():
                    return [StopWorker()]
            items: list[object] = []
            while self._conn.poll(0):
                items.extend(self._conn.recv())
            return items
        except (EOFError, OSError):
            return [StopWorker()]  # the parent closed its end: it is gone


def _child_main(
    stage_index: int,
    spec: StageModelSpec,
    max_batch: int,
    requests: multiprocessing.connection.Connection,
    conn: multiprocessing.connection.Connection,
) -> None:
    # The parent decides when stages stop; a terminal Ctrl-C must not kill them first,
    # nor a SIGTERM sent to the whole process group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    _leave_group_sigterm_to_parent(os.getppid(), parent)
    try:
        model = spec.build()
    except BaseException as exc:
        conn.send(_ChildFailed(f"model construction failed: {type(exc).__name__}: {exc}"))
        conn.close()
        sys.exit(1)
    conn.send(_ChildReady(multiprocessing.current_process().pid or 0))

    def emit(outputs: list[StageOutput]) -> None:
        conn.send(outputs)

    def report(counters: dict[str, float]) -> None:
        conn.send(_ChildCounters(counters))

    scheduler = StageScheduler(
        model, stage_index=stage_index, max_batch=max_batch, emit=emit, report=report
    )
    parent_alive = parent.is_alive if parent is not None else (lambda: True)
    try:
        run_scheduler_loop(scheduler, _PipeInbox(requests, parent_alive))
    except BaseException as exc:
        with contextlib.suppress(OSError):  # the parent may be gone already
            conn.send(_ChildFailed(f"scheduler crashed: {type(exc).__name__}: {exc}"))
        sys.exit(1)
    finally:
        try:
            model.close()
        except Exception:
            log.exception("stage %d: model.close() raised", stage_index)
    conn.close()


def _leave_group_sigterm_to_parent(parent_pid: int, parent: Any) -> None:
    """Make a SIGTERM from anyone but the parent wait for the parent's ``StopWorker``.

    SIGTERM is blocked in every thread (it must be, before the model starts any, for they
    inherit the mask) and taken by one thread with ``sigwaitinfo``, which says who sent
    it. The parent's own SIGTERM, or any once the parent is gone, is let through with its
    default action: the child ends as ``terminate()`` expects. Where ``sigwaitinfo`` is
    missing (macOS), SIGTERM keeps its default action."""
    if not hasattr(signal, "sigwaitinfo") or not hasattr(signal, "pthread_sigmask"):
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait_for_the_parents_sigterm() -> None:
        while True:
            sent = signal.sigwaitinfo({signal.SIGTERM})
            if sent.si_pid == parent_pid or (parent is not None and not parent.is_alive()):
                break
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    threading.Thread(target=wait_for_the_parents_sigterm, name="sigterm", daemon=True).start()
