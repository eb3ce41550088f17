"""``LoopbackStageModel``: the loopback model as one batched, optionally paced stage.

One request is one response. Its input (``audio`` at the input rate, optional ``text``,
``response_id``) may arrive in one piece or in several (audio accumulates); the reply is
planned as soon as an input carries ``response_id`` or ``final``, then handed out one unit
per request per ``step``. The request finishes with its last unit (or its one ``listen``
or ``error`` output).

Pacing. ``realtime: false`` makes every request with units left ready at once.
``realtime: true`` makes unit *k* due ``k * unit_ms`` after the reply started (anchored to
the start, so a late step does not push every later unit back). The scheduler learns when
the next unit is due from ``wake_after_s()`` and sleeps until then. ``pace_in_step``
instead keeps the soonest request ready and sleeps inside ``step`` until it is due, like a
forward pass that runs at real-time speed (for schedulers without deadlines).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from omniduplex.engine.stage import StageInput, StageModel, StageOutput

from .options import LoopbackOptions
from .reply import FloatArray, Reply, as_mono_float32, plan_reply

BAD_INPUT = "loopback_bad_input"


@dataclass(slots=True)
class LoopbackStats:
    """What tests and benchmarks read to check batching."""

    forward_calls: int = 0
    units_emitted: int = 0
    last_batch_size: int = 0
    max_batch_size: int = 0
    # batch size -> number of steps of that size (bounded by max_batch, unlike a list).
    batch_sizes: Counter[int] = field(default_factory=Counter)


@dataclass(slots=True)
class _Request:
    audio: list[FloatArray] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    response_id: str | None = None
    with_audio: bool = True
    reply: Reply | None = None
    error: str | None = None
    next_unit: int = 0
    started_at: float = 0.0

    @property
    def planned(self) -> bool:
        return self.reply is not None or self.error is not None


class LoopbackStageModel(StageModel):
    """Deterministic reply model; every option of ``LoopbackOptions`` is a keyword.

    ``clock`` and ``sleep`` are injectable so pacing is testable without wall time.
    Only one thread (the stage worker's) calls a model, so it takes no locks.
    """

    def __init__(
        self,
        options: LoopbackOptions | Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        pace_in_step: bool | None = None,
        **settings: Any,
    ) -> None:
        if isinstance(options, LoopbackOptions):
            if settings:
                raise TypeError("pass either a LoopbackOptions or option keywords, not both")
            self.options = options
        else:
            self.options = LoopbackOptions.from_mapping({**(options or {}), **settings})
        self._clock = clock
        self._sleep = sleep
        self.pace_in_step = False if pace_in_step is None else pace_in_step
        self._requests: dict[str, _Request] = {}
        self.stats = LoopbackStats()

    # ---- request lifecycle ----------------------------------------------------------

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        self._requests[request_id] = _Request()
        self._ingest(request_id, inputs)

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        if request_id not in self._requests:
            raise KeyError(f"unknown loopback request {request_id!r}")
        self._ingest(request_id, inputs)

    def abort(self, request_id: str) -> None:
        self._requests.pop(request_id, None)

    def close(self) -> None:
        self._requests.clear()

    @property
    def request_ids(self) -> tuple[str, ...]:
        """Requests the model holds (open, planned or replying)."""
        return tuple(self._requests)

    def _ingest(self, request_id: str, inputs: StageInput) -> None:
        request = self._requests[request_id]
        if request.planned:
            # One request is one response; a second one needs its own request id.
            raise ValueError(f"loopback request {request_id!r} is already answering")
        data = inputs.data
        try:
            if data.get("audio") is not None:
                request.audio.append(as_mono_float32(data["audio"]))
        except (TypeError, ValueError) as exc:
            # Reported as this request's error output, with a code the data plane keeps.
            request.error = str(exc)
        if data.get("text"):
            request.text.append(str(data["text"]))
        if "with_audio" in data:
            request.with_audio = bool(data["with_audio"])
        if data.get("response_id") is not None:
            request.response_id = str(data["response_id"])
        if request.error is None and (inputs.final or data.get("response_id") is not None):
            self._plan(request)
        if request.planned:
            request.started_at = self._clock()

    def _plan(self, request: _Request) -> None:
        audio = np.concatenate(request.audio) if request.audio else None
        text = " ".join(request.text) or None
        request.audio.clear()
        try:
            request.reply = plan_reply(audio, text, self.options, with_audio=request.with_audio)
        except (TypeError, ValueError) as exc:
            request.error = str(exc)

    # ---- readiness ------------------------------------------------------------------

    def _due_at(self, request: _Request) -> float:
        if not self.options.realtime:
            return request.started_at
        return request.started_at + request.next_unit * self.options.unit_s

    def _pending(self) -> list[tuple[str, _Request]]:
        return [(rid, r) for rid, r in self._requests.items() if r.planned]

    def ready_request_ids(self) -> list[str]:
        pending = self._pending()
        if not pending:
            return []
        now = self._clock()
        due = [rid for rid, r in pending if self._due_at(r) <= now]
        if due or not self.pace_in_step:
            return due
        # Nothing due, and the scheduler would not wake up for a deadline: offer the
        # soonest request(s) and wait for them in ``step``.
        soonest = min(self._due_at(r) for _, r in pending)
        return [rid for rid, r in pending if self._due_at(r) <= soonest]

    def wake_after_s(self) -> float | None:
        """Seconds until some request becomes ready; 0 if one is; None if none will be."""
        pending = self._pending()
        if not pending:
            return None
        soonest = min(self._due_at(r) for _, r in pending)
        return max(0.0, soonest - self._clock())

    # ---- stepping -------------------------------------------------------------------

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        batch = [(rid, self._requests[rid]) for rid in request_ids if rid in self._requests]
        batch = [(rid, r) for rid, r in batch if r.planned]
        if self.pace_in_step and batch:
            wait = max(self._due_at(r) for _, r in batch) - self._clock()
            if wait > 0:
                self._sleep(min(wait, self.options.unit_s))
        now = self._clock()
        outputs = [self._advance(rid, r) for rid, r in batch if self._due_at(r) <= now]
        if outputs:
            self.stats.forward_calls += 1
            self.stats.last_batch_size = len(outputs)
            self.stats.max_batch_size = max(self.stats.max_batch_size, len(outputs))
            self.stats.batch_sizes[len(outputs)] += 1
        return outputs

    def _advance(self, request_id: str, request: _Request) -> StageOutput:
        """One unit (or the one listen/error output) of one request."""
        base: dict[str, Any] = {"response_id": request.response_id}
        if request.error is not None:
            del self._requests[request_id]
            data = {**base, "kind": "error", "code": BAD_INPUT, "message": request.error}
            return self.output(request_id, data, finished=True, error=request.error)
        reply = request.reply
        assert reply is not None  # planned and no error
        if not reply.units:
            del self._requests[request_id]
            data = {**base, "kind": "listen", "reason": reply.listen_reason}
            return self.output(request_id, data, finished=True)
        index = request.next_unit
        unit = reply.units[index]
        last = index == len(reply.units) - 1
        request.next_unit += 1
        self.stats.units_emitted += 1
        data = {**base, "unit_index": index, "text": unit.text, "end_of_turn": last}
        if unit.audio is None:
            data["kind"] = "text"
        else:
            data["kind"] = "audio"
            data["audio"] = unit.audio
        if last:
            del self._requests[request_id]
        return self.output(request_id, data, finished=last)
