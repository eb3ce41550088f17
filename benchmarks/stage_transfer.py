"""What crossing into a stage process costs per tick, at 1, 16 and 64 sessions.

A model-native deployment (``personaplex``) steps in a process of its own (``worker:
process``), so every tick's input frames (one 80 ms frame of 24 kHz float32 per session,
7.7 kB) go in and its output frames come back across a process boundary. Two readings,
each with its baseline measured in the same run:

1. **Worker round trip**: the real stage workers around an echo model that steps in
   lockstep like the PersonaPlex table (ready when every session has a frame; one output
   frame per session per step). A tick is: submit one ``UpdateRequest`` per session,
   wait for every output. ``thread`` (``InProcessStageWorker``, no transfer) is the
   baseline; ``process`` (``SubprocessStageWorker``) minus ``thread`` is the transfer.
2. **Transport alone**: a child that echoes N frames as one list of N outputs; the
   inputs go either as one ``multiprocessing.Queue`` message per frame (what the process
   worker did before issue 21) or as one list through a pipe (what it does now).

Run: ``python3 benchmarks/stage_transfer.py [--quick]``; writes
``benchmarks/results/stage_transfer.json``. Needs only numpy.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from omniduplex.engine.stage import (
    AddRequest,
    InProcessStageWorker,
    StageInput,
    StageModel,
    StageModelSpec,
    StageOutput,
    SubprocessStageWorker,
    UpdateRequest,
)

RESULTS = Path(__file__).parent / "results"
SESSIONS = (1, 16, 64)
FRAME_SAMPLES = 1920  # 80 ms at 24 kHz


class LockstepEcho(StageModel):
    """Every open request steps together once each has a frame; echoes it, scaled."""

    def __init__(self) -> None:
        self._frames: dict[str, list[np.ndarray]] = {}

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        self._frames[request_id] = [inputs.data["audio"]]

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        self._frames[request_id].append(inputs.data["audio"])

    def abort(self, request_id: str) -> None:
        self._frames.pop(request_id, None)

    def ready_request_ids(self) -> list[str]:
        if self._frames and all(self._frames.values()):
            return list(self._frames)
        return []

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        return [
            self.output(rid, {"kind": "frame", "audio": 0.5 * self._frames[rid].pop(0)})
            for rid in request_ids
        ]


class _Outputs:
    """Counts outputs; wakes the waiting tick only once all of them are in (as the
    engine's own callback hands a step's outputs to its loop in one wake-up)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.count = 0
        self._target = 0

    def __call__(self, event: object) -> None:
        if isinstance(event, StageOutput):
            with self._cond:
                self.count += 1
                if self.count >= self._target:
                    self._cond.notify_all()

    def wait(self, count: int) -> None:
        with self._cond:
            self._target = count
            if not self._cond.wait_for(lambda: self.count >= count, 30.0):
                raise RuntimeError(f"only {self.count} of {count} outputs came back")


def worker_round_trip(kind: str, sessions: int, ticks: int, warmup: int) -> list[float]:
    """Per-tick round trips (µs) through a real stage worker of ``kind``."""
    spec = StageModelSpec("stage_transfer:LockstepEcho", {})
    outputs = _Outputs()
    worker_cls = InProcessStageWorker if kind == "thread" else SubprocessStageWorker
    worker = worker_cls(0, spec, max_batch=sessions, on_event=outputs, name=f"echo-{kind}")
    worker.start()
    rng = np.random.default_rng(0)
    frames = [rng.standard_normal(FRAME_SAMPLES).astype(np.float32) for _ in range(sessions)]
    ids = [f"s{i}" for i in range(sessions)]
    durations: list[float] = []
    try:
        worker.wait_ready(60)
        for rid, frame in zip(ids, frames, strict=True):
            worker.submit(AddRequest(rid, StageInput({"audio": frame})))
        expected = sessions
        outputs.wait(expected)
        for tick in range(warmup + ticks):
            started = time.perf_counter()
            for rid, frame in zip(ids, frames, strict=True):
                worker.submit(UpdateRequest(rid, StageInput({"audio": frame})))
            expected += sessions
            outputs.wait(expected)
            if tick >= warmup:
                durations.append((time.perf_counter() - started) * 1e6)
    finally:
        worker.stop()
    return durations


def _echo_child(mode: str, inbox: Any, requests: Any, replies: Any, sessions: int) -> None:
    while True:
        if mode == "queue_per_message":
            batch = [inbox.get() for _ in range(sessions)]
        else:
            batch = requests.recv()
        if batch[0] is None:
            return
        replies.send([{"kind": "frame", "audio": 0.5 * frame} for frame in batch])


def transport_round_trip(mode: str, sessions: int, ticks: int, warmup: int) -> list[float]:
    """Per-tick round trips (µs) of N frames in and N frames back, transport only."""
    ctx = multiprocessing.get_context("spawn")
    inbox = ctx.Queue()
    requests_in, requests_out = ctx.Pipe(duplex=False)
    replies_in, replies_out = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=_echo_child, args=(mode, inbox, requests_in, replies_out, sessions), daemon=True
    )
    child.start()
    rng = np.random.default_rng(0)
    frames = [rng.standard_normal(FRAME_SAMPLES).astype(np.float32) for _ in range(sessions)]
    durations: list[float] = []
    for tick in range(warmup + ticks):
        started = time.perf_counter()
        if mode == "queue_per_message":
            for frame in frames:
                inbox.put(frame)
        else:
            requests_out.send(frames)
        replies_in.recv()
        if tick >= warmup:
            durations.append((time.perf_counter() - started) * 1e6)
    if mode == "queue_per_message":
        for _ in range(sessions):
            inbox.put(None)
    else:
        requests_out.send([None])
    child.join(10)
    return durations


def summary(durations: list[float]) -> dict[str, float]:
    ordered = sorted(durations)
    return {
        "ticks": len(ordered),
        "p50_us": round(statistics.median(ordered), 1),
        "p90_us": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer ticks (smoke run)")
    args = parser.parse_args()
    ticks, warmup = (40, 10) if args.quick else (300, 30)
    load_before = os.getloadavg()
    workers: dict[str, dict[str, Any]] = {}
    transports: dict[str, dict[str, Any]] = {}
    for sessions in SESSIONS:
        row: dict[str, Any] = {}
        for kind in ("thread", "process"):
            row[kind] = summary(worker_round_trip(kind, sessions, ticks, warmup))
        row["transfer_p50_us"] = round(row["process"]["p50_us"] - row["thread"]["p50_us"], 1)
        workers[str(sessions)] = row
        raw: dict[str, Any] = {}
        for mode in ("queue_per_message", "pipe_one_list"):
            raw[mode] = summary(transport_round_trip(mode, sessions, ticks, warmup))
        transports[str(sessions)] = raw
        print(
            f"N={sessions:3d}  worker thread p50 {row['thread']['p50_us']:8.1f} us  "
            f"process p50 {row['process']['p50_us']:8.1f} us  "
            f"(transfer {row['transfer_p50_us']:8.1f} us/tick)  |  transport: "
            f"queue per message {raw['queue_per_message']['p50_us']:8.1f} us, "
            f"pipe one list {raw['pipe_one_list']['p50_us']:8.1f} us"
        )
    out = {
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        },
        "frame": {"samples": FRAME_SAMPLES, "dtype": "float32", "bytes": FRAME_SAMPLES * 4},
        "ticks_per_point": ticks,
        "worker_round_trip": workers,
        "transport_round_trip": transports,
        "note": (
            "A tick: one 80 ms frame per session in, one out. worker_round_trip.process "
            "minus .thread is what the process boundary costs per tick (pickling both "
            "ways, the pipe, the child's and the monitor's thread hops); the thread "
            "worker is the baseline without it. transport_round_trip compares the inputs "
            "crossing as one Queue message per frame (before) and as one list (now)."
        ),
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "stage_transfer.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
