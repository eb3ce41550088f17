"""PersonaPlex-tiny end to end in real time: sessions held over the Realtime socket, against
the stage alone, in one run (issue 21).

Phases, one after the other on this machine:

1. ``stage_only``: ``personaplex_tiny.run_batch`` (the stage model alone, no server): the
   most sessions whose p90 tick fits the 80 ms frame, over the same session counts;
2. ``end_to_end``: for N in 1, 2, 4, 8, 16, 24, 32, 48, 64 (stopping after two levels in a
   row that do not hold), a fresh ``omniduplex serve`` of a deploy YAML written here (the
   shipped ``personaplex-tiny`` with ``slots``, ``max_batch`` and ``max_sessions`` = N, and
   ``listen_hangover_frames`` so high that once the random model first speaks it speaks
   every frame: the output rate then measures the server, not the model's choices), one
   warm-up session until the model's audio comes back, then ``omniduplex bench --scenario
   stream --chunk-ms 80`` with N sessions (24 kHz PCM16 at real-time pace). A level holds
   when every session is held in real time: output >= 95 % of real time and frame latency
   p95 < 200 ms (``omniduplex.bench.timeline`` defines both). The 1-session level gives
   the frame-to-output latency p50/p95;
3. ``stall``: a fresh server with ``--stall-sessions`` sessions streaming; after
   ``--stall-before-s`` the server and its worker processes get SIGSTOP for 1 s, then
   SIGCONT; the sessions stream on for ``--stall-after-s`` (60 s) and the frame latency per
   second is compared before the stall (the floor), just after it and at its end.

4. ``moshi_server``: Kyutai's ``moshi.server`` on the same tiny weights
   (``moshi_server.py``): one process with two sessions, then 1, 2, 4, 6, 8, 12 processes
   with one session each (two failing levels in a row end it), measured the same way.

The end-to-end figure against the stage-only one is the issue's target (end to end >= 75 %
of stage-only); the stall's target is latency back at its floor.

Run: ``flock /tmp/omniduplex-bench.lock python3 benchmarks/personaplex_realtime.py
[--quick] [--out NAME]``; writes ``benchmarks/results/NAME.json`` (default
``personaplex_realtime``) and ``NAME.png`` (needs matplotlib). To measure another source
tree (say, before a fix), put its ``src`` on ``PYTHONPATH``: the server subprocesses and
the stage-only phase run what that path holds. Needs torch and moshi.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

os.environ.setdefault("NO_TORCH_COMPILE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import omniduplex
from moshi_server import MoshiServer, export_tiny, stream_sessions
from omniduplex.bench.runner import BenchConfig, run_bench
from omniduplex.bench.server_stats import fetch_metrics
from omniduplex.bench.timeline import REALTIME_P95_MS, REALTIME_RATE
from personaplex_tiny import run_batch
from reliability import ServedProcess

RESULTS = Path(__file__).parent / "results"
LEVELS = (1, 2, 4, 8, 16, 24, 32, 48, 64)
#: moshi.server processes (one session each) to try, in order.
MOSHI_PROCESSES = (1, 2, 4, 6, 8, 12)
FRAME_MS = 80
STALL_S = 1.0
#: ``/metrics`` counters that say what the server did with late input, by name fragment.
INPUT_COUNTER_WORDS = ("drop", "stale", "starv", "backlog", "catch", "deadline")
#: Of those: input the server dropped (each shifts the bench's frame count one frame late)
#: and silence it stepped for a session whose frame was not there (one frame early).
DROPPED_WORDS = ("drop", "stale")
STARVED_WORDS = ("starv",)
#: Output a session keeps speaking through (frames); far past any run here.
ALWAYS_SPEAKING = 1_000_000


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def stage_counters(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The stage's own ``/metrics`` counters (``omniduplex_stage_*_total``) over a run, and
    the mean time an input frame waited in the stage before it was stepped (the server's
    view of the backlog), when the server exports them."""
    deltas = {
        name: round(value - before.get(name, 0.0), 6)
        for name, value in after.items()
        if name.startswith("omniduplex_stage_") and "_total" in name
    }

    def pick(fragment: str) -> float | None:
        values = [v for name, v in deltas.items() if fragment in name]
        return sum(values) if values else None

    wait_s, frames = pick("_input_wait_seconds_total"), pick("_input_frames_total")
    return {
        "deltas": deltas,
        "input_wait_mean_ms": round(wait_s / frames * 1000.0, 3) if wait_s and frames else None,
    }


# ---- the deployment ---------------------------------------------------------------------


def write_deploy(sessions: int, folder: Path) -> Path:
    """The shipped personaplex-tiny YAML (of the omniduplex being imported) sized for
    ``sessions`` and always speaking once it speaks."""
    shipped = Path(omniduplex.__file__).parent / "deploy" / "personaplex-tiny.yaml"
    config = yaml.safe_load(shipped.read_text())
    config["name"] = f"personaplex-tiny-{sessions}"
    # The bench's probe and floor sessions are sessions too (they never send audio, so
    # they take no slot of the stage's table).
    config.setdefault("duplex_session", {})["max_sessions"] = sessions + 2
    stage = config["stages"][0]
    stage["max_batch"] = sessions
    stage["model"]["kwargs"].update(slots=sessions, listen_hangover_frames=ALWAYS_SPEAKING)
    path = folder / f"personaplex-tiny-{sessions}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def process_tree(pid: int) -> list[int]:
    """``pid`` and every descendant (the stage worker processes), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


# ---- the client --------------------------------------------------------------------------


def stream_config(url: str, sessions: int, duration_s: float) -> BenchConfig:
    return BenchConfig(
        url=url,
        sessions=sessions,
        duration_s=duration_s,
        chunk_ms=FRAME_MS,
        scenario="stream",
        progress=False,
    )


async def warm_up(url: str) -> int:
    """One 3 s stream session at a time until the model's audio comes back (the model is
    built and has stepped); how many it took."""
    for attempt in range(1, 11):
        results = await run_bench(stream_config(url, 1, 3.0))
        if results["per_session"][0]["stream"]["output_ms_received"] > 0:
            return attempt
    raise RuntimeError("personaplex-tiny never spoke in 10 warm-up sessions")


def level_point(results: dict[str, Any], sessions: int) -> dict[str, Any]:
    agg = results["aggregate"]
    stream = agg["stream"]

    def q(key: str, p: str) -> float | None:
        dist = stream.get(key)
        return dist[p] if dist else None

    held = stream["sessions_held_realtime"]
    resources = results.get("server_resources") or {}
    return {
        "sessions": sessions,
        "sessions_opened": agg["sessions_opened"],
        "sessions_held_realtime": held,
        "held": held == sessions and agg["errors"] == 0,
        "errors_by_code": agg["errors_by_code"],
        "output_rate_min": q("output_rate", "min"),
        "output_rate_p50": q("output_rate", "p50"),
        "frame_latency_p50_ms": q("frame_latency_ms", "p50"),
        "frame_latency_p95_ms": q("frame_latency_ms", "p95"),
        "frame_latency_p99_ms": q("frame_latency_ms", "p99"),
        "first_output_p50_ms": q("first_output_ms", "p50"),
        "latency_first_window_p50_ms": q("latency_growth_first_p50_ms", "p50"),
        "latency_last_window_p50_ms": q("latency_growth_last_p50_ms", "p50"),
        "latency_slope_ms_per_min_p50": q("latency_slope_ms_per_min", "p50"),
        "frames_ahead_of_input": stream["frames_ahead_of_input"],
        "server_cpu_percent": resources.get("cpu_percent"),
        "client_cpu_percent": results["client"]["cpu_percent"],
        "client_loop_lag_p95_ms": (results["client"]["loop_lag_ms"] or {}).get("p95"),
        "client_send_lag_p95_ms": (agg["send_lag_ms"] or {}).get("p95"),
        "load_average": results["machine"]["loadavg_end"],
    }


# ---- phases ------------------------------------------------------------------------------


def stage_only(levels: tuple[int, ...], quick: bool) -> dict[str, Any]:
    ticks, warmup = (10, 14) if quick else (40, 16)
    per_batch: dict[str, Any] = {}
    failures_in_a_row = 0
    for batch in levels:
        result = run_batch(batch, ticks, warmup)
        per_batch[str(batch)] = {k: round(v, 3) for k, v in result.items()}
        print(f"stage only B={batch:3d}  p50 {result['p50_ms']:7.2f}  p90 {result['p90_ms']:7.2f}")
        # As the end-to-end ramp: two levels in a row over the frame end it.
        failures_in_a_row = failures_in_a_row + 1 if result["p90_ms"] > FRAME_MS else 0
        if failures_in_a_row == 2:
            break
    fitting = [int(b) for b, r in per_batch.items() if r["p90_ms"] <= FRAME_MS]
    return {
        "load_average": load(),
        "ticks": ticks,
        "per_batch": per_batch,
        "max_sessions_within_tick": max(fitting) if fitting else 0,
    }


async def end_to_end(levels: tuple[int, ...], duration_s: float, folder: Path) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    failures_in_a_row = 0
    for sessions in levels:
        server = ServedProcess(str(write_deploy(sessions, folder)))
        try:
            await server.wait_ready()
            url = server.url("")
            attempts = await warm_up(url)
            before = await fetch_metrics(server.http) or {}
            results = await run_bench(stream_config(url, sessions, duration_s))
            counters = stage_counters(before, await fetch_metrics(server.http) or {})
        finally:
            server.stop()
        point = {
            **level_point(results, sessions),
            "warm_up_sessions": attempts,
            "stage_input_wait_mean_ms": counters["input_wait_mean_ms"],
            "stage_counters": counters["deltas"],
        }
        points.append(point)
        print(
            f"end to end N={sessions:3d}  held {point['sessions_held_realtime']:3d}  "
            f"rate min {point['output_rate_min']}  latency p50/p95 "
            f"{point['frame_latency_p50_ms']}/{point['frame_latency_p95_ms']} ms  "
            f"slope {point['latency_slope_ms_per_min_p50']} ms/min  "
            f"stage input wait {point['stage_input_wait_mean_ms']} ms  load {point['load_average']}"
        )
        failures_in_a_row = 0 if point["held"] else failures_in_a_row + 1
        if failures_in_a_row == 2:
            break
    held = [p["sessions"] for p in points if p["held"]]
    return {
        "duration_s": duration_s,
        "levels": points,
        "max_sessions_held": max(held) if held else 0,
        "most_sessions_held_at_any_level": max(p["sessions_held_realtime"] for p in points),
    }


def window(timeline: list[dict[str, Any]], start_s: float, end_s: float) -> dict[str, Any]:
    """The per-second p50 and p95 buckets of ``[start_s, end_s)``: their medians."""
    picked = [b for b in timeline if start_s <= b["t_s"] < end_s]
    if not picked:
        return {"seconds": 0, "p50_ms": None, "p95_ms": None}

    def median(values: list[float]) -> float:
        ordered = sorted(values)
        return round(ordered[len(ordered) // 2], 3)

    return {
        "seconds": len(picked),
        "p50_ms": median([b["p50_ms"] for b in picked]),
        "p95_ms": median([b["p95_ms"] for b in picked]),
    }


async def stall(sessions: int, before_s: float, after_s: float, folder: Path) -> dict[str, Any]:
    server = ServedProcess(str(write_deploy(sessions, folder)))
    stalled_at: dict[str, float] = {}
    counters: dict[str, dict[str, float]] = {}
    try:
        await server.wait_ready()
        url = server.url("")
        await warm_up(url)
        pids = process_tree(server.proc.pid)

        async def induce() -> None:
            await asyncio.sleep(before_s + 1.5)  # the bench's idle floor probe and ramp-in
            counters["before"] = await fetch_metrics(server.http) or {}
            stalled_at["perf_s"] = time.perf_counter()
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(STALL_S)
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

        inducer = asyncio.ensure_future(induce())
        results = await run_bench(stream_config(url, sessions, before_s + STALL_S + after_s))
        await inducer
        counters["after"] = await fetch_metrics(server.http) or {}
    finally:
        server.stop()
    stream = results["aggregate"]["stream"]
    at = stalled_at["perf_s"] - stream["timeline_origin_perf_s"]
    timeline = stream["timeline"]
    end = timeline[-1]["t_s"] + 1 if timeline else 0
    last = window(timeline, end - 10.0, end)
    deltas = {
        name: round(value - counters["before"].get(name, 0.0), 3)
        for name, value in counters["after"].items()
        if any(word in name for word in INPUT_COUNTER_WORDS)
        and not name.endswith("_created")
        and value != counters["before"].get(name, 0.0)
    }

    def total(words: tuple[str, ...]) -> float:
        return sum(v for name, v in deltas.items() if any(word in name for word in words))

    shift = round((total(DROPPED_WORDS) - total(STARVED_WORDS)) / sessions, 3)
    return {
        "sessions": sessions,
        "processes_stopped": len(pids),
        "stall_s": STALL_S,
        "stall_at_s": round(at, 3),
        "before": window(timeline, 1.0, at),
        "first_5s_after": window(timeline, at + STALL_S, at + STALL_S + 5.0),
        "last_10s": last,
        "last_10s_ends_s_after_stall": round(end - at - STALL_S, 1),
        # What the server counted doing with late input from the stall on (any counter
        # of /metrics whose name says drop, starve, backlog or catch-up), if it has any:
        # the bench's frame count reads input the server dropped as latency.
        "server_input_counters": deltas,
        "stage_counters": stage_counters(counters["before"], counters["after"]),
        # The frame count's shift those counters imply, per session (all sessions stalled
        # alike), and the last 10 s read with it removed: an estimate, for servers that
        # drop input on purpose after a stall.
        "count_shift_frames_per_session": shift,
        "last_10s_shift_corrected_p50_ms": (
            round(last["p50_ms"] - shift * FRAME_MS, 3) if last["p50_ms"] is not None else None
        ),
        "timeline": timeline,
        "point": level_point(results, sessions),
    }


async def moshi_phase(duration_s: float, folder: Path) -> dict[str, Any]:
    """``moshi.server`` on the same weights: one process with two sessions (the second
    waits on its lock), then N processes with one session each until two levels in a row
    do not hold every session in real time."""
    paths = export_tiny(folder)

    async def run(processes: int, sessions_per_process: int) -> dict[str, Any]:
        servers = [MoshiServer(paths) for _ in range(processes)]
        try:
            await asyncio.gather(*(server.wait_ready() for server in servers))
            urls = [s.url for s in servers for _ in range(sessions_per_process)]
            result = await stream_sessions(urls, duration_s)
        finally:
            for server in servers:
                server.stop()
        result["processes"] = processes
        result["load_average"] = load()
        print(
            f"moshi.server {processes} process(es) x {sessions_per_process} session(s): "
            f"held {result['sessions_held_realtime']} of {result['sessions']} "
            f"(handshakes {result['handshakes']}), latency p50 "
            f"{(result['frame_latency_p50_ms_median'] or {}).get('p50')} ms, load {load()}"
        )
        return result

    one_process = await run(1, 2)
    levels: list[dict[str, Any]] = []
    failures_in_a_row = 0
    for processes in MOSHI_PROCESSES:
        level = await run(processes, 1)
        levels.append(level)
        held = level["sessions_held_realtime"] == processes
        failures_in_a_row = 0 if held else failures_in_a_row + 1
        if failures_in_a_row == 2:
            break
    held_levels = [
        lv["processes"] for lv in levels if lv["sessions_held_realtime"] == lv["sessions"]
    ]
    one = levels[0]["per_session"][0] if levels and levels[0]["per_session"] else None
    return {
        "duration_s": duration_s,
        "one_process_two_sessions": one_process,
        "processes": levels,
        "max_processes_held": max(held_levels) if held_levels else 0,
        "one_session_frame_latency_ms": one and one["frame_latency_ms"],
    }


# ---- output ------------------------------------------------------------------------------


def plot(out: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, (held_ax, lat_ax, stall_ax) = plt.subplots(1, 3, figsize=(16, 4.5))
    levels = out["end_to_end"]["levels"]
    xs = [p["sessions"] for p in levels]
    held_ax.plot(xs, [p["sessions_held_realtime"] for p in levels], "o-", label="end to end")
    held_ax.plot(xs, xs, ":", color="grey", label="all sessions")
    held_ax.axvline(out["stage_only"]["max_sessions_within_tick"], color="C1", ls="--")
    held_ax.text(out["stage_only"]["max_sessions_within_tick"], 1, " stage-only max", color="C1")
    held_ax.set(xlabel="sessions", ylabel="sessions held in real time", title="Capacity")
    held_ax.legend()
    lat_ax.plot(xs, [p["frame_latency_p50_ms"] for p in levels], "o-", label="p50")
    lat_ax.plot(xs, [p["frame_latency_p95_ms"] for p in levels], "s-", label="p95")
    lat_ax.axhline(REALTIME_P95_MS, color="grey", ls=":")
    lat_ax.set(xlabel="sessions", ylabel="frame latency (ms)", title="Frame -> output latency")
    lat_ax.set_yscale("log")
    lat_ax.legend()
    stall_run = out.get("stall")
    if stall_run:
        timeline = stall_run["timeline"]
        stall_ax.plot([b["t_s"] for b in timeline], [b["p50_ms"] for b in timeline], label="p50")
        stall_ax.plot([b["t_s"] for b in timeline], [b["p95_ms"] for b in timeline], label="p95")
        stall_ax.axvspan(stall_run["stall_at_s"], stall_run["stall_at_s"] + STALL_S, color="red")
        stall_ax.set(
            xlabel="s", ylabel="frame latency (ms)",
            title=f"1 s SIGSTOP, {stall_run['sessions']} sessions",
        )  # fmt: skip
        stall_ax.set_yscale("log")
        stall_ax.legend()
    fig.suptitle(out["label"])
    fig.tight_layout()
    fig.savefig(path, dpi=110)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    levels = tuple(int(n) for n in args.levels.split(","))
    load_start = load()
    started = time.time()
    out: dict[str, Any] = {
        "label": args.label or args.out,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "omniduplex_src": str(Path(omniduplex.__file__).parent),
        "quick": args.quick,
        "criteria": {
            "held_in_real_time": (
                f"output >= {REALTIME_RATE:g} of real time and frame latency p95 < "
                f"{REALTIME_P95_MS:g} ms, every session of the level, no errors"
            ),
            "target_end_to_end_over_stage_only": 0.75,
        },
    }
    out["stage_only"] = stage_only(levels, args.quick)
    with tempfile.TemporaryDirectory(prefix="personaplex-realtime-") as tmp:
        folder = Path(tmp)
        out["end_to_end"] = await end_to_end(levels, args.duration, folder)
        if args.stall_sessions > 0:
            out["stall"] = await stall(
                args.stall_sessions, args.stall_before_s, args.stall_after_s, folder
            )
        if not args.no_moshi:
            out["moshi_server"] = await moshi_phase(args.duration, folder)
    e2e, stage = out["end_to_end"]["max_sessions_held"], out["stage_only"]
    one = next((p for p in out["end_to_end"]["levels"] if p["sessions"] == 1), None)
    out["summary"] = {
        "end_to_end_sessions_held": e2e,
        "stage_only_sessions": stage["max_sessions_within_tick"],
        "end_to_end_over_stage_only": (
            round(e2e / stage["max_sessions_within_tick"], 3)
            if stage["max_sessions_within_tick"]
            else None
        ),
        "one_session_frame_latency_p50_ms": one and one["frame_latency_p50_ms"],
        "one_session_frame_latency_p95_ms": one and one["frame_latency_p95_ms"],
        "stall_latency_before_p50_ms": out.get("stall", {}).get("before", {}).get("p50_ms"),
        "stall_latency_last_10s_p50_ms": out.get("stall", {}).get("last_10s", {}).get("p50_ms"),
    }
    moshi = out.get("moshi_server")
    if moshi:
        one_moshi = moshi["one_session_frame_latency_ms"] or {}
        out["summary"].update(
            moshi_server_one_process_sessions_held=moshi["one_process_two_sessions"][
                "sessions_held_realtime"
            ],
            moshi_server_processes_held=moshi["max_processes_held"],
            moshi_server_one_session_frame_latency_p50_ms=one_moshi.get("p50"),
            moshi_server_one_session_frame_latency_p95_ms=one_moshi.get("p95"),
        )
    out["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_start": load_start,
        "loadavg_end": load(),
    }
    out["wall_s"] = round(time.time() - started, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short levels and stall (smoke)")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--duration", type=float, default=None, help="s per level (20; quick 8)")
    parser.add_argument("--stall-sessions", type=int, default=4, help="0: no stall phase")
    parser.add_argument("--stall-before-s", type=float, default=None, help="15; quick 6")
    parser.add_argument("--stall-after-s", type=float, default=None, help="60; quick 15")
    parser.add_argument("--no-moshi", action="store_true", help="skip the moshi.server phase")
    parser.add_argument("--out", default="personaplex_realtime", help="results file stem")
    parser.add_argument("--label", default=None, help="what this run measures (plot title)")
    args = parser.parse_args()
    if args.duration is None:
        args.duration = 8.0 if args.quick else 20.0
    if args.stall_before_s is None:
        args.stall_before_s = 6.0 if args.quick else 15.0
    if args.stall_after_s is None:
        args.stall_after_s = 15.0 if args.quick else 60.0
    out = asyncio.run(main_async(args))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.out}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    plot(out, RESULTS / f"{args.out}.png")
    print(json.dumps(out["summary"], indent=2))
    print(f"wrote {path} ({out['wall_s']} s, load {out['machine']['loadavg_end']})")


if __name__ == "__main__":
    main()
