"""Real-time pacing of the PersonaPlex slot table: catch-up, prompt-time input, tick start.

Needs torch and moshi (skipped without them). A ``Simulation`` runs the worker's own
scheduler loop (drain the inbox, step what is ready, else sleep until the next message
or the model's wake-up) over the real tiny model on a fake clock: a step costs fake time
charged inside the LM step, clients deliver tagged frames at fake times, and every tick
records which client frame each slot was fed (read from the PCM going into Mimi). So
every number below is in the stage's own terms (ticks, step starts, step durations),
never wall-clock time.
"""

from __future__ import annotations

import heapq
import itertools
import os
from dataclasses import dataclass, field

import numpy as np
import pytest

os.environ.setdefault("NO_TORCH_COMPILE", "1")  # before moshi is imported
pytest.importorskip("torch")
pytest.importorskip("moshi")

from omniduplex.engine.duplex.contracts import DuplexFence, stage_request_id
from omniduplex.engine.stage import AddRequest, StageInput, StageScheduler, UpdateRequest
from omniduplex.model_executor.models.personaplex.options import FRAME_SAMPLES
from omniduplex.model_executor.models.personaplex.stage import PersonaPlexStageModel

PERIOD = 0.08
GRACE = 0.02  # tick_grace_ms default
PROMPT_FRAMES = 12  # 6 + 6 silence frames, no voice, no persona
EPS = 1e-9


def rid(code: int) -> str:
    return stage_request_id(DuplexFence(f"client-{code}", 0), "stage0")


def tagged_frame(code: int, k: int) -> np.ndarray:
    """A frame whose first two samples say who sent it and which it is (exact floats)."""
    samples = 0.05 * np.random.default_rng(code * 10_000 + k).standard_normal(FRAME_SAMPLES)
    samples[0], samples[1] = code / 64, k / 8192
    return samples.astype(np.float32)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Tick:
    start: float
    end: float = 0.0
    fed: set[tuple[int, int]] = field(default_factory=set)  # (client, frame index)
    batch: int = 0
    backlog_after: int = 0  # the most input frames any session still held after it


class Simulation:
    def __init__(self, *, slots: int, step_cost_s: float, **options: object) -> None:
        self.clock = FakeClock()
        self.model = PersonaPlexStageModel(
            torch_threads=1, slots=slots, realtime=True, clock=self.clock, **options
        )
        self.scheduler = StageScheduler(
            self.model, stage_index=0, max_batch=slots, emit=lambda outputs: None, clock=self.clock
        )
        self.step_cost_s = step_cost_s
        self._stall_s: float | None = None
        self.ticks: list[Tick] = []
        self.arrived: dict[tuple[int, int], float] = {}
        # client -> (arrival time, its input backlog just after the frame was queued)
        self.backlogs: dict[int, list[tuple[float, int]]] = {}
        self._inbox: list[tuple[float, int, int, int, object]] = []
        self._seq = itertools.count()
        self._instrument()

    def _instrument(self) -> None:
        model = self.model
        step_slots, encode, step = model.lm_gen.step_slots, model.models.mimi.encode, model.step

        def costly_step_slots(*args, **kwargs):
            cost = self.step_cost_s if self._stall_s is None else self._stall_s
            self._stall_s = None
            self.clock.now += cost
            return step_slots(*args, **kwargs)

        def reading_encode(pcm):
            tick = self.ticks[-1]
            for row in pcm[:, 0, :2].numpy():
                code, k = round(float(row[0]) * 64), round(float(row[1]) * 8192)
                if code:
                    tick.fed.add((code, k))
            return encode(pcm)

        def recorded_step(request_ids):
            self.ticks.append(Tick(start=self.clock.now, batch=len(request_ids)))
            outputs = step(request_ids)
            self.ticks[-1].end = self.clock.now
            self.ticks[-1].backlog_after = max(
                (model.input_backlog(r) for r in model.live_request_ids), default=0
            )
            return outputs

        model.lm_gen.step_slots = costly_step_slots
        model.models.mimi.encode = reading_encode
        model.step = recorded_step

    # ---- clients ------------------------------------------------------------------

    def client(self, code: int, *, start: float, frames: int, every_s: float = PERIOD) -> None:
        self.deliver(code, [start + k * every_s for k in range(frames)])

    def deliver(self, code: int, times: list[float], first: int = 0) -> None:
        for k, at in enumerate(times, start=first):
            data: dict[str, object] = {"audio": tagged_frame(code, k)}
            if k == 0:
                data["config"] = {"seed": code}
                message: object = AddRequest(rid(code), StageInput(data))
            else:
                message = UpdateRequest(rid(code), StageInput(data))
            heapq.heappush(self._inbox, (at, next(self._seq), code, k, message))

    def stall_next_step(self, seconds: float) -> None:
        self._stall_s = seconds

    # ---- the worker loop ----------------------------------------------------------

    def run_until(self, end: float) -> None:
        while self.clock.now < end:
            while self._inbox and self._inbox[0][0] <= self.clock.now:
                _, _, code, k, message = heapq.heappop(self._inbox)
                self.scheduler.handle(message)
                self.arrived[(code, k)] = self.clock.now
                backlog = self.model.input_backlog(rid(code))
                self.backlogs.setdefault(code, []).append((self.clock.now, backlog))
            if self.scheduler.tick():
                continue
            wake = self.scheduler.idle_timeout()
            candidates = [end]
            if self._inbox:
                candidates.append(self._inbox[0][0])
            if wake is not None:
                candidates.append(self.clock.now + max(wake, 1e-6))
            upcoming = min(candidates)
            if upcoming >= end:
                self.clock.now = max(self.clock.now, end)
                return
            self.clock.now = max(self.clock.now, upcoming)

    # ---- readings -----------------------------------------------------------------

    def waits(self, code: int, since: float = 0.0, until: float = float("inf")) -> list[float]:
        """Arrival -> start of the step that fed it, for the client's frames fed between."""
        return [
            tick.start - self.arrived[(c, k)]
            for tick in self.ticks
            for c, k in tick.fed
            if c == code and since <= tick.start < until
        ]

    def backlog_after(self, code: int, since: float) -> list[int]:
        return [b for at, b in self.backlogs[code] if at >= since]


LAG_FRAMES = 5  # max_input_lag_ms 400 / 80


@pytest.mark.parametrize("disturbance", ["slow-step", "burst"])
def test_after_a_stall_every_session_is_back_at_its_floor_within_a_few_ticks(disturbance) -> None:
    sim = Simulation(slots=4, step_cost_s=0.01)
    clients = (1, 2, 3, 4)
    for code, phase in zip(clients, (0.0, 0.02, 0.04, 0.06), strict=True):
        sim.client(code, start=phase, frames=110)
    if disturbance == "slow-step":
        sim.run_until(3.0)
        sim.stall_next_step(1.0)  # 12.5 frames of every client arrive meanwhile
    else:
        # Client 4's network holds 12 frames (0.96 s) back, then delivers them at once.
        held = [e for e in sim._inbox if e[2] == 4 and 38 <= e[3] < 50]
        sim._inbox = [e for e in sim._inbox if e not in held]
        heapq.heapify(sim._inbox)
        sim.deliver(4, [50 * PERIOD + 0.059] * 12, first=38)
        sim.run_until(50 * PERIOD + 0.059)
    landed = sim.clock.now
    floor = max(max(sim.waits(code, since=1.5, until=landed)) for code in clients)
    assert floor <= PERIOD + GRACE
    first = len(sim.ticks)
    sim.run_until(8.5)

    # Never more than the lag bound queued: older input was dropped, and counted.
    assert max(b for code in clients for _, b in sim.backlogs[code]) == LAG_FRAMES
    assert sim.model.stats.stale_frames > 0
    # Catch-up: from the disturbance, steps follow each other at once (not at the next
    # period boundary) until no session holds more than one frame (its next) ...
    after = sim.ticks[first:]
    # (the first step's own backlog is read before the frames that came during it land)
    recovered = next(i for i in range(1, len(after)) if after[i].backlog_after <= 1)
    for previous, tick in itertools.pairwise(after[: recovered + 1]):
        assert tick.start == pytest.approx(previous.end)
    # ... a bounded number of them (the disturbed step, one per frame within the lag) ...
    assert recovered + 1 <= 1 + LAG_FRAMES
    # ... and from then on every frame is back within the floor the tick rule keeps
    # (before the disturbance too): at most one period plus the grace.
    back = after[recovered].end
    assert max(b for code in clients for at, b in sim.backlogs[code] if at >= back) <= 2
    assert all(t.backlog_after <= 1 for t in after[recovered:])
    for code in clients:
        assert max(sim.waits(code, since=back + PERIOD)) <= PERIOD + GRACE + EPS
    if disturbance == "burst":
        assert sim.model.stats.catchup_ticks >= LAG_FRAMES - 1  # client 4 alone


def test_a_client_streaming_from_its_first_frame_has_no_prompt_backlog() -> None:
    sim = Simulation(slots=2, step_cost_s=0.01)
    sim.client(1, start=0.0, frames=70)
    sim.client(2, start=1.03, frames=45)  # joins while 1 is live; streams from frame 0
    sim.run_until(1.0)
    dropped_before = sim.model.stats.prompt_frames_dropped  # client 1's own prompt's
    sim.run_until(5.5)
    fed_two = sorted((tick.start, k) for tick in sim.ticks for c, k in tick.fed if c == 2)
    first_live_at, first_live = fed_two[0]
    # Its prompt took 12 ticks at client 1's pace; what it sent meanwhile was dropped,
    # and the first frame after the prompt was stepped at the next tick.
    prompt_ticks = [t for t in sim.ticks if 1.03 <= t.start < first_live_at]
    assert len(prompt_ticks) == PROMPT_FRAMES
    assert sim.model.stats.prompt_frames_dropped - dropped_before == first_live
    assert first_live_at - sim.arrived[(2, first_live)] <= PERIOD + GRACE
    # From then on no session holds a frame after a step: nothing piled up behind the
    # prompt, and every frame of client 2 waits at most one period plus the grace.
    assert all(t.backlog_after == 0 for t in sim.ticks if t.start >= first_live_at)
    assert max(sim.waits(2)) <= PERIOD + GRACE


def test_a_lone_client_streaming_from_its_first_frame_has_no_prompt_backlog() -> None:
    sim = Simulation(slots=2, step_cost_s=0.01)
    sim.client(1, start=0.0, frames=40)
    sim.run_until(3.5)
    # Alone, the prompt's frames are ready at once: 12 steps back to back, then live.
    assert [round(t.start, 6) for t in sim.ticks[:PROMPT_FRAMES]] == [
        round(i * 0.01, 6) for i in range(PROMPT_FRAMES)
    ]
    assert all(b <= 1 for b in sim.backlog_after(1, 0.0))
    assert max(sim.waits(1)) == 0.0  # every live frame stepped the moment it came


def test_one_sessions_frame_is_stepped_within_one_step_plus_the_grace_of_arriving() -> None:
    sim = Simulation(slots=4, step_cost_s=0.008)
    sim.client(1, start=0.037, frames=50)  # off any 80 ms grid the stage might keep
    sim.run_until(4.5)
    live = [t for t in sim.ticks if t.fed]
    # Alone, its prompt ran back to back; the frames sent meanwhile were dropped.
    assert len(live) == 50 - sim.model.stats.prompt_frames_dropped >= 50 - 2
    for tick in live:
        ((_, k),) = tick.fed
        step_s = tick.end - tick.start
        assert step_s == pytest.approx(0.008)
        # frame -> output: its step's end, at most one step plus the grace after it came
        assert tick.end - sim.arrived[(1, k)] <= step_s + GRACE + EPS
    stats = sim.model.stats
    assert stats.input_wait_s_max <= GRACE + EPS
    assert stats.last_step_s == pytest.approx(0.008)
    counters = sim.model.counters()  # what /metrics exports, in the same terms
    assert counters["step_seconds"] == pytest.approx(0.008 * counters["ticks"])
    assert counters["input_wait_seconds"] <= GRACE * counters["input_frames"] + EPS


def test_a_silent_client_is_paced_in_real_time_without_holding_its_neighbour() -> None:
    sim = Simulation(slots=2, step_cost_s=0.01)
    sim.client(1, start=0.0, frames=60)
    sim.client(2, start=0.05, frames=1)  # one frame, then nothing
    sim.run_until(4.8)
    in_window = [t for t in sim.ticks if 2.0 <= t.start < 4.0]
    assert len(in_window) == pytest.approx(2.0 / PERIOD, abs=1)  # real time, 12.5/s
    assert sim.model.stats.starved_frames >= len(in_window)
    assert max(sim.waits(1, since=1.5)) <= PERIOD + GRACE + EPS


def test_a_stage_that_cannot_keep_up_drops_input_older_than_the_bound() -> None:
    sim = Simulation(slots=1, step_cost_s=0.1)  # slower than real time
    sim.client(1, start=0.0, frames=60)
    sim.run_until(6.0)
    assert sim.model.stats.stale_frames > 0
    assert max(sim.backlog_after(1, 0.0)) == LAG_FRAMES
    # A frame waits for the frames queued before it, each a step: bounded by the lag.
    assert max(sim.waits(1)) <= LAG_FRAMES * 0.1 + EPS


def test_out_of_phase_jittery_clients_share_one_step_per_period_without_silence() -> None:
    sim = Simulation(slots=8, step_cost_s=0.02)
    for code in range(1, 9):
        phase = (code - 1) * 0.01
        # Each frame 0-14 ms late, differently per client: never past the 20 ms grace.
        late = [((k * 7 + code * 5) % 15) / 1000 for k in range(80)]
        sim.deliver(code, [phase + k * PERIOD + late[k] for k in range(80)])
    sim.run_until(2.0)  # every client joined and past its prompt
    starved_before = sim.model.stats.starved_frames
    sim.run_until(6.0)
    steady = [t for t in sim.ticks if t.start >= 2.0]
    # A client holding its next frame while the step waits for a late neighbour is not
    # stepped alone (a whole table step each) nor, in the next step, fed silence.
    assert len(steady) <= 4.0 / PERIOD + 1
    assert sim.model.stats.starved_frames == starved_before
    assert all(t.batch == 8 for t in steady)


def test_a_frame_later_than_the_grace_is_dropped_so_steps_keep_real_time() -> None:
    sim = Simulation(slots=2, step_cost_s=0.01)
    # Every fifth frame comes 35 ms late, past the 20 ms grace: its step goes ahead with
    # silence, and stepping the frame too would put the session a frame ahead for good.
    sim.deliver(1, [k * PERIOD + (0.035 if k % 5 == 4 else 0.0) for k in range(60)])
    sim.run_until(1.0)
    steps_before, stats = len(sim.ticks), sim.model.stats
    starved_before, late_before = stats.starved_frames, stats.late_frames_dropped
    sim.run_until(4.2)
    assert len(sim.ticks) - steps_before == pytest.approx(3.2 / PERIOD, abs=1)
    starved = stats.starved_frames - starved_before
    assert starved >= 7  # the late frames' steps were silence ...
    assert stats.late_frames_dropped - late_before == starved  # ... and they were dropped
    assert all(b <= 1 for b in sim.backlog_after(1, 1.0))


def test_a_client_resuming_off_the_tables_phase_is_heard_again_after_one_frame() -> None:
    sim = Simulation(slots=2, step_cost_s=0.01)
    # 20 frames, a pause of 0.56 s (silence is stepped), then frames landing 50 ms past
    # where the table's deadline grid was: past the grace, every one of them.
    times = [k * PERIOD for k in range(20)] + [2.21 + k * PERIOD for k in range(30)]
    sim.deliver(1, times)
    sim.run_until(4.8)
    fed = {k for tick in sim.ticks for c, k in tick.fed if c == 1 and k >= 20}
    # At most the first frame after the pause is dropped (its step had gone ahead with
    # silence); then the deadline follows the client's phase and every frame is heard.
    assert set(range(21, 50)) <= fed
    assert sim.model.stats.late_frames_dropped <= 1
