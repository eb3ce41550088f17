"""PersonaPlex tick rules compared on simulated clients: steps per period, silence, waits.

A discrete-event simulation of the slot table's pacing alone (no model: a step costs a
fixed time that grows with the table, like the tiny model's on this CPU): N real-time
clients at random phases send one 80 ms frame per period, each frame late by an
exponential jitter; an optional 1 s stall (one step that overruns). Three rules, in the
same run on the same arrivals:

- ``grid``: before issue 21. Every live slot steps on a fixed 80 ms grid (anchored; a
  late step does not push later ones back); a slot with no frame gets silence; input
  queues up to 125 frames.
- ``catchup_at_two``: issue 21's first rule. Step when every slot has a frame; step
  every slot with input at once when any holds two; at the deadline (period + 20 ms)
  step all with silence for those without; at most 5 frames queued.
- ``shipped``: ``pacing.TickPacer`` as shipped (catch-up above ``max_backlog_frames`` = 2,
  only for slots holding two or more, until none holds more than one), and the stage's
  rule that a frame whose step went ahead with silence is dropped when it comes.

Reported per rule: steps per 80 ms period, the share of the time spent stepping,
the share of input frames replaced by silence, ``session_steps_per_period`` (a session's
steps per 80 ms of real time: above 1 its output runs ahead and its client's playback
buffer, hence its heard latency, grows for good), a frame's wait from arrival to the
start of its step (p50/p95), and with the stall the p95 wait in the last 10 s against
before.
Run: ``python3 benchmarks/personaplex_pacing.py``; writes
``benchmarks/results/personaplex_pacing.json``. Needs nothing beyond the package.
"""

from __future__ import annotations

import heapq
import json
import os
import platform
import random
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omniduplex.model_executor.models.personaplex.pacing import TickPacer

RESULTS = Path(__file__).parent / "results"
PERIOD = 0.08
GRACE = 0.02
LAG_FRAMES = 5
# Step cost by table size, from benchmarks/personaplex_tiny.py's p50s on this CPU.
STEP_COST_S = {1: 0.008, 8: 0.015, 16: 0.02, 32: 0.043, 64: 0.068}


class Slot:
    def __init__(self) -> None:
        self.queue: deque[float] = deque()  # arrival times
        self.silence_owed = False
        self.steps = 0

    @property
    def ready(self) -> bool:
        return bool(self.queue)

    @property
    def backlog(self) -> int:
        return len(self.queue)


class Rule:
    """A tick rule: which slots step now, and what a step tells it."""

    max_queue = LAG_FRAMES
    drops_late_frames = True

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.pacer = TickPacer(period_s=PERIOD, grace_s=GRACE, max_backlog_frames=2, clock=clock)

    def due(self, live: Sequence[Slot]) -> list[Slot]:
        return self.pacer.due_batch(live)

    def wake(self) -> float | None:
        return self.pacer.wake_after_s()

    def stepped(self, *, started: float, full: bool, starved: bool) -> None:
        self.pacer.stepped(started=started, full=full, starved=starved)


class CatchupAtTwo(Rule):
    drops_late_frames = False

    def due(self, live: Sequence[Slot]) -> list[Slot]:
        if all(s.ready for s in live):
            return list(live)
        if any(s.backlog > 1 for s in live):
            return [s for s in live if s.ready]
        if self.pacer.next_due is not None and self.clock() >= self.pacer.next_due + GRACE:
            return list(live)
        return []


class Grid(Rule):
    max_queue = 125
    drops_late_frames = False

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.next_tick = 0.0

    def due(self, live: Sequence[Slot]) -> list[Slot]:
        return list(live) if self.clock() >= self.next_tick else []

    def wake(self) -> float | None:
        return max(0.0, self.next_tick - self.clock())

    def stepped(self, *, started: float, full: bool, starved: bool) -> None:
        self.next_tick = max(self.next_tick + PERIOD, self.clock())


RULES: dict[str, type[Rule]] = {"grid": Grid, "catchup_at_two": CatchupAtTwo, "shipped": Rule}


def arrivals(sessions: int, seconds: float, jitter_ms: float, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    events = []
    for slot in range(sessions):
        phase = rng.uniform(0.0, PERIOD)
        for k in range(int(seconds / PERIOD)):
            late = rng.expovariate(1000.0 / jitter_ms) if jitter_ms else 0.0
            events.append((0.5 + k * PERIOD + phase + late, slot))
    heapq.heapify(events)
    return events


def simulate(
    rule_name: str, sessions: int, jitter_ms: float, seconds: float, stall_at: float | None
) -> dict[str, Any]:
    now = [0.0]
    rule = RULES[rule_name](lambda: now[0])
    rule.pacer.start()
    slots = [Slot() for _ in range(sessions)]
    events = arrivals(sessions, seconds, jitter_ms, seed=sessions)
    cost = STEP_COST_S[sessions]
    steps: list[float] = []
    waits: list[tuple[float, float]] = []
    silence = 0
    stalled = False
    end = seconds + 0.5
    while now[0] < end:
        while events and events[0][0] <= now[0]:
            _, index = heapq.heappop(events)
            if slots[index].silence_owed and rule.drops_late_frames:
                slots[index].silence_owed = False
                rule.pacer.late_frame(now[0])
                continue
            queue = slots[index].queue
            queue.append(now[0])
            while len(queue) > rule.max_queue:
                queue.popleft()
        batch = rule.due(slots)
        if batch:
            started = now[0]
            starved = False
            for slot in batch:
                slot.steps += started >= 5.0 and started < seconds
                if slot.queue:
                    waits.append((started, started - slot.queue.popleft()))
                else:
                    starved = True
                    silence += 1
                    slot.silence_owed = True
            if stall_at is not None and not stalled and started >= stall_at:
                stalled = True
                now[0] += 1.0
            else:
                now[0] += cost
            rule.stepped(started=started, full=len(batch) == sessions, starved=starved)
            steps.append(started)
            continue
        upcoming = [end]
        if events:
            upcoming.append(events[0][0])
        wake = rule.wake()
        if wake is not None:
            upcoming.append(now[0] + max(wake, 1e-6))
        now[0] = max(now[0], min(upcoming))

    def p(values: list[float], q: float) -> float | None:
        values = sorted(values)
        return round(values[int(q * (len(values) - 1))] * 1000, 1) if values else None

    window = [t for t in steps if 5.0 <= t < seconds]
    steady = [w for t, w in waits if t >= 5.0]
    result: dict[str, Any] = {
        "steps_per_period": round(len(window) / ((seconds - 5.0) / PERIOD), 2),
        "busy_share": round(len(window) * cost / (seconds - 5.0), 2),
        "silence_pct": round(100 * silence / (sessions * seconds / PERIOD), 1),
        "session_steps_per_period": round(
            sum(s.steps for s in slots) / sessions / ((seconds - 5.0) / PERIOD), 3
        ),
        "wait_p50_ms": p(steady, 0.5),
        "wait_p95_ms": p(steady, 0.95),
    }
    if stall_at is not None:
        result["wait_p95_before_stall_ms"] = p([w for t, w in waits if 5 <= t < stall_at], 0.95)
        result["wait_p95_last_10s_ms"] = p([w for t, w in waits if t >= seconds - 10], 0.95)
    return result


def main() -> None:
    load_before = os.getloadavg()
    jitter = {}
    for sessions in (1, 8, 16, 32, 64):
        for jitter_ms in (0, 5, 20):
            key = f"{sessions}_sessions_{jitter_ms}ms_jitter"
            jitter[key] = {r: simulate(r, sessions, jitter_ms, 30.0, None) for r in RULES}
            line = "  ".join(
                f"{r}: {v['steps_per_period']} steps/period {v['silence_pct']}% silence "
                f"{v['session_steps_per_period']} per session, wait p95 {v['wait_p95_ms']} ms"
                for r, v in jitter[key].items()
            )
            print(f"{key:28s} {line}")
    stall = {}
    for sessions in (16, 32):
        key = f"{sessions}_sessions_5ms_jitter_1s_stall_at_15s"
        stall[key] = {r: simulate(r, sessions, 5, 40.0, 15.0) for r in RULES}
        line = "  ".join(
            f"{r}: p95 {v['wait_p95_before_stall_ms']} -> {v['wait_p95_last_10s_ms']} ms"
            for r, v in stall[key].items()
        )
        print(f"{key:40s} {line}")
    out = {
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_before": [round(x, 2) for x in load_before],
        },
        "step_cost_s": STEP_COST_S,
        "period_s": PERIOD,
        "grace_s": GRACE,
        "note": (
            "Simulated time: no wall clock is measured, so load does not change these "
            "figures. wait = arrival at the stage -> start of the step that takes it; "
            "silence = input frames a step had to replace with silence."
        ),
        "jitter": jitter,
        "stall": stall,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "personaplex_pacing.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
