"""Duplex engine benchmark: engine overhead and cancel latency as sessions grow.

Runs ``DuplexOmni`` in-process on the loopback model ("loopback-fast": unpaced replies;
"loopback": replies paced at real time) with 1, 10, 50, 100 and 200 concurrent sessions.
Every session streams 100 ms chunks of 16 kHz pcm16 in real time (one append every
100 ms on an absolute schedule, phases staggered across sessions), in two phases:

- listen: speak 1 s, commit without a response, repeat. Measures engine CPU per append
  and the append's effect latency: submit of the first speech chunk of a turn ->
  ``input_audio_buffer.speech_started`` received (decode + resample in the offload pool,
  the session mailbox, the event pump to the caller's loop).
- converse: speak 0.8 s, commit with a response, append silence while the reply streams;
  every other turn is cancelled as soon as its first audio delta arrives. Measures engine
  CPU per emitted event and cancel latency: ``response.cancel`` submit ->
  ``response.done`` (cancelled) received.

Engine CPU is the CPU time (``/proc/self/task/*/schedstat``) of every thread except the
benchmark's own (the caller's loop that builds commands and reads events): the
orchestrator loop, the stage worker and the offload pool. Process CPU is reported too.
Latencies are end to end inside one process, on a machine whose cores the caller shares.

Run: ``python benchmarks/engine.py [--quick] [--sessions 1,10,50] [--listen-s 4]
[--converse-s 8]``; writes ``benchmarks/results/engine.json`` and ``engine.png``
(matplotlib, if installed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import os
import platform
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from omniduplex.config.pipeline import PipelineConfig, load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import command_from_realtime

RESULTS = Path(__file__).resolve().parent / "results"
CHUNK_MS = 100
RATE = 16_000


# ---- audio and commands ---------------------------------------------------------------


def _pcm16(ms: int, amp: float) -> bytes:
    t = np.arange(RATE * ms // 1000) / RATE
    return (amp * np.sin(2 * np.pi * 440.0 * t) * 32767).astype("<i2").tobytes()


SPEECH_B64 = base64.b64encode(_pcm16(CHUNK_MS, 0.3)).decode()
SILENCE_B64 = base64.b64encode(bytes(2 * RATE * CHUNK_MS // 1000)).decode()


def append_cmd(speech: bool) -> Any:
    return command_from_realtime(
        {
            "type": "input_audio_buffer.append",
            "audio": SPEECH_B64 if speech else SILENCE_B64,
            "format": {"type": "audio/pcm", "rate": RATE},
        }
    )


def commit_cmd(create_response: bool) -> Any:
    return command_from_realtime(
        {"type": "input_audio_buffer.commit", "create_response": create_response}
    )


CANCEL = {"type": "response.cancel"}


# ---- CPU accounting ---------------------------------------------------------------------


def thread_cpu_ns() -> dict[int, int]:
    """CPU ns of every thread of this process, by native thread id."""
    out: dict[int, int] = {}
    base = f"/proc/{os.getpid()}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def cpu_delta(before: dict[int, int], after: dict[int, int]) -> dict[int, int]:
    return {tid: ns - before.get(tid, 0) for tid, ns in after.items()}


# ---- one session ------------------------------------------------------------------------


@dataclasses.dataclass
class SessionStats:
    events: int = 0
    appends: int = 0
    speech_started_ms: list[float] = dataclasses.field(default_factory=list)
    cancel_ms: list[float] = dataclasses.field(default_factory=list)
    cancels_sent: int = 0
    cancels_missed: int = 0
    responses_done: int = 0


class SessionDriver:
    def __init__(self, handle: Any, *, phase_s: float) -> None:
        self.handle = handle
        self.phase_s = phase_s
        self.stats = SessionStats()
        self.counting = False
        self._speech_submit: float | None = None
        self._cancel_submit: dict[str, float] = {}
        self._want_cancel = False
        self._cancel_sent_for: str | None = None
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self.handle.events():
            now = time.perf_counter()
            stats = self.stats  # replaced at the start of each phase
            kind = event.type
            if self.counting:
                stats.events += 1
            if kind == "input_audio_buffer.speech_started":
                if self._speech_submit is not None and self.counting:
                    stats.speech_started_ms.append((now - self._speech_submit) * 1000.0)
                self._speech_submit = None
            elif kind == "response.output_audio.delta":
                rid = event.response_id
                if self._want_cancel and self._cancel_sent_for != rid:
                    self._cancel_sent_for = rid
                    self._want_cancel = False
                    self._cancel_submit[rid] = time.perf_counter()
                    self.handle.submit(command_from_realtime(CANCEL))
                    if self.counting:
                        stats.cancels_sent += 1
            elif kind == "response.done":
                started = self._cancel_submit.pop(event.response_id, None)
                if self.counting:
                    stats.responses_done += 1
                if started is not None and event.response.get("status") == "cancelled":
                    if self.counting:
                        stats.cancel_ms.append((now - started) * 1000.0)
                elif started is not None and self.counting:
                    stats.cancels_missed += 1
            elif (
                kind == "error"
                and getattr(event, "code", "") == "response_cancel_not_active"
                and self.counting
            ):
                stats.cancels_missed += 1

    def _append(self, speech: bool) -> None:
        if speech and self._speech_submit is None:
            self._speech_submit = time.perf_counter()
        self.handle.submit(append_cmd(speech))
        if self.counting:
            self.stats.appends += 1

    async def run(self, start: float, mode: str, stop_at: float, offset: int) -> None:
        """Append one chunk every 100 ms from ``start`` (absolute schedule) until
        ``stop_at``; ``mode`` is "listen" or "converse". ``offset`` (in chunks) shifts
        where in its turn cycle the session starts, so sessions do not commit (and
        cancel) in lockstep."""
        tick = start
        period = 10 if mode == "listen" else 20  # chunks per turn
        speech_chunks = 10 if mode == "listen" else 8
        index = offset % period
        turn = 0
        while True:
            delay = tick - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if time.perf_counter() >= stop_at:
                return
            position = index % period
            self._append(position < speech_chunks)
            if position == speech_chunks - 1:
                if mode == "listen":
                    self.handle.submit(commit_cmd(False))
                else:
                    self._want_cancel = turn % 2 == 1
                    self.handle.submit(commit_cmd(True))
                turn += 1
                self._speech_submit = None
            index += 1
            tick += CHUNK_MS / 1000.0


# ---- one level ----------------------------------------------------------------------------


def pipeline_for(name: str, sessions: int) -> PipelineConfig:
    pipeline = load_deploy_config(name)
    duplex = {
        **pipeline.duplex_session,
        "max_sessions": max(sessions, 1) + 8,
        "max_outbox_events_per_session": 8192,
    }
    return dataclasses.replace(pipeline, duplex_session=duplex)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[k]


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "p99": pct(values, 99),
        "mean": statistics.fmean(values) if values else None,
    }


async def measure_idle(seconds: float, main_tid: int) -> float:
    """Engine-thread CPU ns per second with the sessions open and nothing sent."""
    cpu0, wall0 = thread_cpu_ns(), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu1, wall1 = thread_cpu_ns(), time.perf_counter()
    delta = cpu_delta(cpu0, cpu1)
    return sum(ns for tid, ns in delta.items() if tid != main_tid) / (wall1 - wall0)


async def run_phase(
    drivers: list[SessionDriver],
    mode: str,
    seconds: float,
    main_tid: int,
    idle_engine_ns_per_s: float,
) -> dict[str, Any]:
    for driver in drivers:
        driver.stats = SessionStats()
    rng = random.Random(len(drivers))
    now = time.perf_counter()
    start = now + 0.2
    stop_at = start + seconds
    # Staggered phases, so appends spread across the 100 ms tick as real clients do.
    tasks = [
        asyncio.create_task(
            d.run(start + rng.random() * CHUNK_MS / 1000.0, mode, stop_at, rng.randrange(20))
        )
        for d in drivers
    ]
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    for d in drivers:
        d.counting = True
    cpu0, proc0, wall0 = thread_cpu_ns(), time.process_time(), time.perf_counter()
    await asyncio.gather(*tasks)
    cpu1, proc1, wall1 = thread_cpu_ns(), time.process_time(), time.perf_counter()
    for d in drivers:
        d.counting = False
    delta = cpu_delta(cpu0, cpu1)
    engine_ns = sum(ns for tid, ns in delta.items() if tid != main_tid)
    wall = wall1 - wall0
    names = {t.native_id: t.name for t in threading.enumerate()}
    by_thread: dict[str, float] = {}
    for tid, ns in delta.items():
        name = "caller" if tid == main_tid else names.get(tid, "other")
        name = "offload-pool" if name.startswith("duplex-session") else name
        by_thread[name] = by_thread.get(name, 0.0) + ns / 1e9
    # The engine's own idle cost (timers, the paced stage's wake-ups) over this window.
    engine_ns = max(0.0, engine_ns - idle_engine_ns_per_s * wall)
    caller_ns = delta.get(main_tid, 0)
    stats = [d.stats for d in drivers]
    appends = sum(s.appends for s in stats)
    events = sum(s.events for s in stats)
    return {
        "wall_s": wall,
        "appends": appends,
        "events": events,
        "engine_cpu_s": engine_ns / 1e9,  # net of the idle baseline
        "caller_cpu_s": caller_ns / 1e9,
        "process_cpu_s": proc1 - proc0,
        "cpu_s_by_thread": by_thread,
        "engine_cpu_util": engine_ns / 1e9 / wall,
        "engine_us_per_append": engine_ns / 1e3 / appends if appends else None,
        "engine_us_per_event": engine_ns / 1e3 / events if events else None,
        "process_us_per_event": (proc1 - proc0) * 1e6 / events if events else None,
        "speech_started_latency_ms": summary([x for s in stats for x in s.speech_started_ms]),
        "cancel_latency_ms": summary([x for s in stats for x in s.cancel_ms]),
        "cancels_sent": sum(s.cancels_sent for s in stats),
        "cancels_missed": sum(s.cancels_missed for s in stats),
        "responses_done": sum(s.responses_done for s in stats),
    }


async def run_level(deploy: str, sessions: int, listen_s: float, converse_s: float) -> dict:
    main_tid = threading.get_native_id()
    load_before = os.getloadavg()[0]
    async with DuplexOmni(pipeline_for(deploy, sessions)) as omni:
        handles = [await omni.open_session() for _ in range(sessions)]
        drivers = [SessionDriver(h, phase_s=listen_s) for h in handles]
        await asyncio.sleep(0.2)
        idle = await measure_idle(1.0, main_tid)
        listen = await run_phase(drivers, "listen", listen_s, main_tid, idle)
        converse = await run_phase(drivers, "converse", converse_s, main_tid, idle)
        for handle in handles:
            await handle.close()
        await asyncio.wait_for(asyncio.gather(*(d.reader for d in drivers)), 60)
    net = None
    if converse["events"] and listen["engine_us_per_append"] is not None:
        # Engine CPU of the converse phase net of its appends (at the listen phase's cost).
        spent = (
            converse["engine_cpu_s"] * 1e6 - converse["appends"] * listen["engine_us_per_append"]
        )
        net = max(0.0, spent) / converse["events"]
    return {
        "deploy": deploy,
        "sessions": sessions,
        "idle_engine_cpu_ms_per_s": idle / 1e6,
        # The machine's 1-minute load average around this level: other processes on a
        # shared machine inflate latency tails (the CPU-per-operation figures much less).
        "loadavg_1m": [load_before, os.getloadavg()[0]],
        "listen": listen,
        "converse": converse,
        "engine_us_per_append": listen["engine_us_per_append"],
        "engine_us_per_event": converse["engine_us_per_event"],
        "engine_us_per_event_net_of_appends": net,
    }


# ---- report ---------------------------------------------------------------------------------


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'deploy':<14}{'sess':>5}{'us/app':>8}{'us/evt':>8}{'net':>7}{'eng%':>6}"
        f"{'app p50':>9}{'p95':>7}{'p99':>7}{'cancel p50':>11}{'p95':>7}{'p99':>7}"
        f"{'n':>5}{'miss':>5}{'load':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        app = r["listen"]["speech_started_latency_ms"]
        can = r["converse"]["cancel_latency_ms"]
        util = r["converse"]["engine_cpu_util"] * 100
        print(
            f"{r['deploy']:<14}{r['sessions']:>5}{fmt(r['engine_us_per_append']):>8}"
            f"{fmt(r['engine_us_per_event']):>8}{fmt(r['engine_us_per_event_net_of_appends']):>7}"
            f"{fmt(util, 0):>6}{fmt(app['p50']):>9}{fmt(app['p95']):>7}{fmt(app['p99']):>7}"
            f"{fmt(can['p50']):>11}{fmt(can['p95']):>7}{fmt(can['p99']):>7}"
            f"{can['n']:>5}{r['converse']['cancels_missed']:>5}{fmt(r['loadavg_1m'][1]):>6}"
        )
    print(
        "us/app: engine CPU per append (listen phase); us/evt: engine CPU per emitted event "
        "(converse phase); net: us/evt without the appends' share; eng%: engine CPU / wall "
        "(converse, of 1 core); app: append submit -> speech_started (ms); cancel: "
        "response.cancel submit -> response.done(cancelled) (ms); miss: cancels that found "
        "the response already done; load: 1-min load average after the level."
    )


def plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for deploy in dict.fromkeys(r["deploy"] for r in rows):
        mine = [r for r in rows if r["deploy"] == deploy]
        xs = [r["sessions"] for r in mine]
        for q, style in (("p50", "-o"), ("p99", "--x")):
            ys = [r["listen"]["speech_started_latency_ms"][q] for r in mine]
            axes[0].plot(xs, ys, style, label=f"{deploy} {q}")
            cancel = [
                (x, r["converse"]["cancel_latency_ms"][q]) for x, r in zip(xs, mine, strict=True)
            ]
            cancel = [(x, y) for x, y in cancel if y is not None]
            if cancel:
                axes[1].plot(*zip(*cancel, strict=True), style, label=f"{deploy} {q}")
        axes[2].plot(xs, [r["engine_us_per_append"] for r in mine], "-o", label=f"{deploy} /append")
        axes[2].plot(xs, [r["engine_us_per_event"] for r in mine], "--s", label=f"{deploy} /event")
    axes[0].set_title("append -> speech_started (ms)")
    axes[1].set_title("response.cancel -> response.done(cancelled) (ms)")
    axes[2].set_title("engine CPU (us)")
    for ax in axes:
        ax.set_xlabel("concurrent sessions")
        ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
    }


async def main_async(args: argparse.Namespace) -> dict:
    levels = [int(x) for x in args.sessions.split(",")]
    deploys = args.deploy.split(",")
    rows = []
    started = time.perf_counter()
    for deploy in deploys:
        for n in levels:
            row = await run_level(deploy, n, args.listen_s, args.converse_s)
            rows.append(row)
            appends = row["listen"]["appends"] + row["converse"]["appends"]
            print(
                f"  {deploy} x{n}: {appends} appends, {row['converse']['events']} events",
                file=sys.stderr,
                flush=True,
            )
    total = time.perf_counter() - started
    print_table(rows)
    print(f"total {total:.0f} s")
    return {
        "benchmark": "engine",
        "description": (__doc__ or "").strip().splitlines()[0],
        "units": {
            "engine_us_per_append": "engine-thread CPU microseconds per append (listen phase)",
            "engine_us_per_event": "engine-thread CPU microseconds per event (converse phase)",
            "latency": "milliseconds, end to end in one process",
        },
        "config": {
            "chunk_ms": CHUNK_MS,
            "listen_s": args.listen_s,
            "converse_s": args.converse_s,
            "sessions": levels,
            "deploys": deploys,
            "switch_interval_ms": sys.getswitchinterval() * 1000.0,
        },
        "environment": environment(),
        "total_runtime_s": total,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="1,10,50,100,200")
    parser.add_argument("--deploy", default="loopback-fast,loopback")
    parser.add_argument("--listen-s", type=float, default=4.0)
    parser.add_argument("--converse-s", type=float, default=8.0)
    parser.add_argument("--quick", action="store_true", help="1,10 sessions, short phases")
    parser.add_argument("--out", default=str(RESULTS / "engine.json"))
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=None,
        help="sys.setswitchinterval for the run (GIL hand-off; Python's default is 5 ms)",
    )
    args = parser.parse_args()
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000.0)
    if args.quick:
        args.sessions, args.listen_s, args.converse_s = "1,10", 2.0, 3.0
    result = asyncio.run(main_async(args))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    png = out.with_suffix(".png")
    if plot(result["rows"], png):
        print(f"wrote {out} and {png}")
    else:
        print(f"wrote {out} (matplotlib not installed: no plot)")


if __name__ == "__main__":
    main()
