"""Small stage models for the engine tests, importable as ``stage_models:<Class>``.

``UpperChunker`` and ``StepRecorder`` are real (tiny) models; classes whose name ends in
``Double`` exist only to simulate failures.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from omniduplex.engine.stage import StageInput, StageModel, StageOutput


class _Observed:
    """Thread-safe record of aborts, so a test on another thread can wait for one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.aborted: list[str] = []

    def record_abort(self, request_id: str) -> None:
        with self._cond:
            self.aborted.append(request_id)
            self._cond.notify_all()

    def wait_aborted(self, request_id: str, timeout: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: request_id in self.aborted, timeout)


@dataclass
class _Chunking:
    buffer: str
    final: bool


class UpperChunker(StageModel):
    """Upper-cases text and emits it ``chunk_size`` characters per step.

    Resumable: updates append text; the request finishes once a final input is drained.
    Text containing ``poison_word`` makes ``step`` raise before advancing anything.
    """

    def __init__(self, chunk_size: int = 4, poison_word: str | None = None) -> None:
        self.chunk_size = chunk_size
        self.poison_word = poison_word
        self._requests: dict[str, _Chunking] = {}
        self.observed = _Observed()

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        self._requests[request_id] = _Chunking(str(inputs.data.get("text", "")), inputs.final)

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        state = self._requests[request_id]
        state.buffer += str(inputs.data.get("text", ""))
        state.final = state.final or inputs.final

    def abort(self, request_id: str) -> None:
        self._requests.pop(request_id, None)
        self.observed.record_abort(request_id)

    def ready_request_ids(self) -> list[str]:
        return [rid for rid, s in self._requests.items() if s.buffer or s.final]

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        if self.poison_word is not None:
            for rid in request_ids:
                if self.poison_word in self._requests[rid].buffer:
                    raise ValueError(f"poisoned input in {rid}")
        outputs = []
        for rid in request_ids:
            state = self._requests[rid]
            chunk, state.buffer = state.buffer[: self.chunk_size], state.buffer[self.chunk_size :]
            finished = state.final and not state.buffer
            if finished:
                del self._requests[rid]
            outputs.append(self.output(rid, {"text": chunk.upper()}, finished=finished))
        return outputs


@dataclass
class _Recording:
    pending: deque[dict[str, Any]]
    final: bool
    wait_for_peers: int
    updates: int = 0
    emitted: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class StepRecorder(StageModel):
    """Pass-through stage that counts ``step`` calls and records batch sizes.

    Each input becomes one output: its data plus ``input_index`` (0 for the add, k for
    the k-th update), ``batch_size``, ``step_call`` and ``updates`` (update_request calls
    received so far). A request whose first input carries
    ``wait_for_peers: N`` is not ready until N requests are open at once, which makes a
    batch of N deterministic. Text containing ``poison_word`` makes ``step`` raise before it
    advances anything.
    """

    def __init__(self, poison_word: str | None = None) -> None:
        self.poison_word = poison_word
        self._requests: dict[str, _Recording] = {}
        self._lock = threading.Lock()
        self.batch_sizes: list[int] = []
        self.step_calls = 0
        self.observed = _Observed()

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        data = dict(inputs.data)
        peers = int(data.pop("wait_for_peers", 0))
        data["input_index"] = 0
        self._requests[request_id] = _Recording(deque([data]), inputs.final, peers)

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        state = self._requests[request_id]
        state.updates += 1
        state.pending.append({**inputs.data, "input_index": state.updates})
        state.final = state.final or inputs.final

    def abort(self, request_id: str) -> None:
        self._requests.pop(request_id, None)
        self.observed.record_abort(request_id)

    def ready_request_ids(self) -> list[str]:
        open_count = len(self._requests)
        ready = []
        for rid, s in self._requests.items():
            # Latched: once its peers were all open together, a request stays released.
            if open_count >= s.wait_for_peers:
                s.wait_for_peers = 0
            if (s.pending or s.final) and s.wait_for_peers == 0:
                ready.append(rid)
        return ready

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        with self._lock:
            self.step_calls += 1
            self.batch_sizes.append(len(request_ids))
            step_call = self.step_calls
        if self.poison_word is not None:
            for rid in request_ids:
                pending = self._requests[rid].pending
                if any(self.poison_word in str(d.get("text", "")) for d in pending):
                    raise ValueError(f"poisoned input in {rid}")
        outputs = []
        for rid in request_ids:
            state = self._requests[rid]
            data = state.pending.popleft() if state.pending else {}
            finished = state.final and not state.pending
            if finished:
                del self._requests[rid]
            out = {**data, "batch_size": len(request_ids), "step_call": step_call}
            out["updates"] = state.updates
            outputs.append(self.output(rid, out, finished=finished))
        return outputs


@dataclass
class _Ticking:
    remaining: int
    next_due: float
    sent: int = 0


class PacedTicker(StageModel):
    """Emits ``ticks`` outputs per request, one every ``interval_s`` of wall time.

    Becomes ready by the clock alone (no input arrives between ticks), like a model that
    plays out audio at real-time pace.
    """

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self._requests: dict[str, _Ticking] = {}

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        now = time.monotonic()
        self._requests[request_id] = _Ticking(int(inputs.data["ticks"]), now + self.interval_s)

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        self._requests[request_id].remaining += int(inputs.data.get("ticks", 0))

    def abort(self, request_id: str) -> None:
        self._requests.pop(request_id, None)

    def ready_request_ids(self) -> list[str]:
        now = time.monotonic()
        return [rid for rid, s in self._requests.items() if s.next_due <= now]

    def wake_after_s(self) -> float | None:
        if not self._requests:
            return None
        return min(s.next_due for s in self._requests.values()) - time.monotonic()

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        outputs = []
        for rid in request_ids:
            state = self._requests[rid]
            state.remaining -= 1
            state.sent += 1
            state.next_due += self.interval_s
            finished = state.remaining <= 0
            if finished:
                del self._requests[rid]
            outputs.append(self.output(rid, {"tick": state.sent}, finished=finished))
        return outputs


@dataclass
class _Holding:
    data: dict[str, Any]
    final: bool
    acked: bool = False
    updated: bool = False


class HoldThenEchoDouble(StageModel):
    """Test double that keeps requests in flight on demand.

    An input with ``hold: True`` gets one output (its data plus ``held_by``, the stages
    that acknowledged it) and then waits, not ready, until an update arrives, which is
    echoed (finishing on a final update). Any other input is echoed and finished in one
    step. ``exit: code`` makes ``step`` end the process with ``os._exit(code)``, the way
    a crashing native extension would.
    """

    def __init__(self) -> None:
        self._requests: dict[str, _Holding] = {}
        self.observed = _Observed()

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        self._requests[request_id] = _Holding(dict(inputs.data), inputs.final)

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        state = self._requests[request_id]
        state.data = dict(inputs.data)
        state.final = state.final or inputs.final
        state.updated = True

    def abort(self, request_id: str) -> None:
        self._requests.pop(request_id, None)
        self.observed.record_abort(request_id)

    def ready_request_ids(self) -> list[str]:
        return [
            rid
            for rid, s in self._requests.items()
            if not s.data.get("hold") or not s.acked or s.updated
        ]

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        outputs = []
        for rid in request_ids:
            state = self._requests[rid]
            if "exit" in state.data:
                os._exit(int(state.data["exit"]))
            if state.data.get("hold") and not state.acked:
                state.acked = True
                held_by = [*state.data.get("held_by", []), self.stage_index]
                outputs.append(self.output(rid, {**state.data, "held_by": held_by}))
                continue
            state.updated = False
            finished = state.final or not state.data.get("hold")
            if finished:
                del self._requests[rid]
            outputs.append(self.output(rid, dict(state.data), finished=finished))
        return outputs


class BrokenReadinessDouble(StepRecorder):
    """Test double: ``ready_request_ids`` raises, a bug no single request can own."""

    def ready_request_ids(self) -> list[str]:
        if self._requests:
            raise RuntimeError("readiness bookkeeping is corrupt")
        return []


class ExitInConstructorDouble(StageModel):
    """Test double: dies while being built, like a model whose native init aborts."""

    def __init__(self, code: int = 7) -> None:
        os._exit(code)

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        raise AssertionError("unreachable")

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        raise AssertionError("unreachable")

    def abort(self, request_id: str) -> None:
        raise AssertionError("unreachable")

    def ready_request_ids(self) -> list[str]:
        return []

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        return []


class RaiseInConstructorDouble(ExitInConstructorDouble):
    """Test double: its constructor raises, like a model whose weights are missing."""

    def __init__(self, message: str = "weights not found") -> None:
        raise FileNotFoundError(message)


class ShoutTaskChunker(UpperChunker):
    """``UpperChunker`` offering the standalone stage task ``shout``."""

    tasks = frozenset({"shout"})
