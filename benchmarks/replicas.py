"""One process, ``omniduplex serve --replicas N`` and ``--ray``, on the same machine, in one run.

Each mode is ``omniduplex serve`` in a subprocess: one process; ``--replicas N``; and
``--ray auto`` with N replicas (a local Ray cluster the server starts, its replicas taking
no CPU reservation), also from ``--ray-before SRC``, a source tree of an earlier data
plane, for before/after. Every CPU figure is the whole server's: the front door and its
replica processes together, with Ray's own daemons and workers for ``--ray`` (read from
``/proc``); the load generator's own CPU is reported beside it (it shares the machine).
For each mode:

- ``heartbeat_rtt_ms``: ``session.heartbeat`` -> ack on ``loopback-fast`` (the floor);
- ``cpu_per_event``: server CPU per event a client receives, sessions talking to
  ``loopback-fast`` (unpaced);
- ``barge_in``: ``omniduplex bench --scenario barge-in --sessions 50`` on ``loopback``:
  barge-in stop p99 as a multiple of the heartbeat p50 that bench run measured;
- ``ramp``: ``omniduplex bench --ramp --chunk-ms 100`` on ``loopback``: the most sessions
  held with p95 event lag under 50 ms (not for ``--ray-before``).

This machine's CPU figures swing by half from one run to the next, so every mode runs
``--repeats`` trials, interleaved, and each headline figure is the median of its trials
(``median``; every trial is kept under ``trials``). Then a 16-core estimate for
``--replicas``: the events per second 16 cores sustain at its median CPU per event, and
its sessions held scaled from this machine's cores to 16 (one process cannot scale so:
it runs on about one core).

Run: ``python benchmarks/replicas.py [--replicas 2] [--repeats 3] [--quick] [--ramp-max
400] [--no-ray] [--ray-before SRC]``; writes ``benchmarks/results/replicas.json`` and
prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from outbound_path import _ramp_figures
from serving import Server, heartbeat_floor, percentile, speech, talk

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_cpu_seconds(root: int) -> float:
    """CPU (user + system) of ``root`` and every live process below it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat(int(entry.name))[1])
            except (OSError, IndexError):
                continue
    tree, grew = {root}, True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in tree} - tree
        grew = bool(below)
        tree |= below
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in tree:
        try:
            fields = _stat(pid)
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _bench(server: Server, out: Path, *extra: str) -> dict[str, Any]:
    """``omniduplex bench`` against ``server``: its JSON, with the server tree's CPU and
    the load generator's over the run."""
    command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "bench"]
    command += ["--url", server.url(), "--out", str(out), "--quiet", *extra]
    before, client_before = tree_cpu_seconds(server.proc.pid), _children_cpu()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    result["server_tree_cpu_s"] = tree_cpu_seconds(server.proc.pid) - before
    result["load_generator_cpu_s"] = _children_cpu() - client_before
    return result


async def _cpu_per_event(server: Server, sessions: int, turns: int) -> dict[str, Any]:
    chunks = speech(2000)
    before = tree_cpu_seconds(server.proc.pid)
    started = time.process_time()
    counts = await asyncio.gather(*(talk(server, turns, chunks) for _ in range(sessions)))
    spent = tree_cpu_seconds(server.proc.pid) - before
    events = sum(counts)
    return {
        "events": events,
        "server_cpu_s": round(spent, 2),
        "per_event_us": round(spent / events * 1e6),
        "load_generator_cpu_s": round(time.process_time() - started, 2),
    }


@dataclass(frozen=True)
class Mode:
    """How the server runs: ``serve`` arguments, a source tree, and with ``ray_replicas``
    the deployment as a Ray cluster of that many replicas."""

    label: str
    extra: tuple[str, ...] = ()
    source: Path | None = None
    ray_replicas: int = 0
    ramp: bool = True

    def server(self, base: str, work: Path) -> Server:
        if not self.ray_replicas:
            return Server(base, extra=self.extra, source=self.source)
        deploy = work / f"{base}-ray-{uuid.uuid4().hex[:6]}.yaml"
        deploy.write_text(
            f"base_config: {base}\n"
            f"cluster: {{replicas: {self.ray_replicas}, resources_per_replica: {{num_cpus: 0}},"
            f" namespace: bench-{uuid.uuid4().hex[:8]}}}\n"
        )
        return Server(str(deploy), extra=(*self.extra, "--ray", "auto"), source=self.source)


async def measure(mode: Mode, args: argparse.Namespace, work: Path) -> dict:
    """One trial of ``mode``: each figure once."""
    print(f"-- {mode.label}", file=sys.stderr)
    result: dict[str, Any] = {}
    fast = mode.server("loopback-fast", work)
    try:
        await fast.wait_ready()
        floor = await heartbeat_floor(fast, 100 if args.quick else 400)
        result["heartbeat_rtt_ms"] = {f"p{q}": percentile(floor, q) for q in (50, 95, 99)}
        sessions, turns = (4, 2) if args.quick else (8, 20)
        result["cpu_per_event"] = await _cpu_per_event(fast, sessions, turns)
    finally:
        fast.stop()
    paced = mode.server("loopback", work)
    try:
        await paced.wait_ready()
        bench = _bench(
            paced,
            work / f"barge-{uuid.uuid4().hex[:6]}.json",
            *("--scenario", "barge-in", "--sessions", "50"),
            *("--duration", "10" if args.quick else "30"),
        )
        floor_ms = bench["floor"]["floor_ms"]
        stop = bench["aggregate"]["barge_in_stop_ms"] or {}
        result["barge_in"] = {
            "floor_ms": floor_ms,
            "stop_ms": {q: stop.get(q) for q in ("p50", "p95", "p99")},
            "stop_p99_to_floor": stop["p99"] / floor_ms if stop.get("p99") and floor_ms else None,
            "server_cpu_s": round(bench["server_tree_cpu_s"], 2),
            "load_generator_cpu_s": round(bench["load_generator_cpu_s"], 2),
        }
        if args.ramp_max and mode.ramp:
            bench = _bench(
                paced,
                work / f"ramp-{uuid.uuid4().hex[:6]}.json",
                *("--ramp", "--sessions", str(args.ramp_max), "--chunk-ms", "100"),
                *("--duration", "6" if args.quick else "12"),
            )
            result["ramp"] = {
                **_ramp_figures(bench),
                "server_cpu_s": round(bench["server_tree_cpu_s"], 2),
                "load_generator_cpu_s": round(bench["load_generator_cpu_s"], 2),
                "wall_s": bench.get("wall_s"),
            }
    finally:
        paced.stop()
    return result


def estimate_16_cores(mode: dict[str, Any], cpus: int) -> dict[str, Any]:
    """What 16 cores would serve at a mode's median costs (no model running)."""
    held = mode.get("sessions_held")
    return {
        "events_per_s": round(16e6 / mode["cpu_per_event_us"]),
        "sessions_held": round(held * 16 / cpus) if held else None,
        "basis": f"16 cores / CPU per event; sessions held on {cpus} cores x 16 / {cpus}",
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "trials_per_mode": args.repeats,
    }
    key = f"replicas_{args.replicas}"
    modes = {
        "one_process": Mode("one process"),
        key: Mode(f"--replicas {args.replicas}", ("--replicas", str(args.replicas))),
    }
    if args.ray:
        modes["ray"] = Mode(f"--ray, {args.replicas} replicas", ray_replicas=args.replicas)
    if args.ray_before is not None:
        modes["ray_before"] = Mode(
            f"--ray, {args.replicas} replicas, from {args.ray_before}",
            source=args.ray_before,
            ray_replicas=args.replicas,
            ramp=False,
        )
    trials: dict[str, list[dict[str, Any]]] = {name: [] for name in modes}
    with tempfile.TemporaryDirectory() as tmp:
        # Interleaved, so a slow stretch of this shared machine falls on every mode alike.
        for _ in range(args.repeats):
            for name, mode in modes.items():
                trials[name].append(await measure(mode, args, Path(tmp)))
    for name, runs in trials.items():
        out[name] = {"median": _medians(runs), "trials": runs}
    one, many = out["one_process"]["median"], out[key]["median"]
    held_one, held_many = one.get("sessions_held"), many.get("sessions_held")
    out["compared"] = {
        **_against(many, one),
        "sessions_held_ratio": held_many / held_one if held_one and held_many else None,
        # One process uses about one core however many there are: only the replicas
        # scale with the cores (one replica per core, the front door beside them).
        "estimate_16_cores": estimate_16_cores(many, os.cpu_count() or 1),
    }
    for name in ("ray", "ray_before"):
        if name in out:
            out["compared"][name] = _against(out[name]["median"], one)
    return out


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over a mode's trials of each headline figure."""

    def median(read: Any) -> float | None:
        values = [v for v in (read(run) for run in runs) if v is not None]
        return statistics.median(values) if values else None

    return {
        "heartbeat_p50_ms": median(lambda r: r["heartbeat_rtt_ms"]["p50"]),
        "heartbeat_p99_ms": median(lambda r: r["heartbeat_rtt_ms"]["p99"]),
        "cpu_per_event_us": median(lambda r: r["cpu_per_event"]["per_event_us"]),
        "barge_in_stop_p99_ms": median(lambda r: r["barge_in"]["stop_ms"]["p99"]),
        "barge_in_floor_ms": median(lambda r: r["barge_in"]["floor_ms"]),
        "barge_in_p99_to_floor": median(lambda r: r["barge_in"]["stop_p99_to_floor"]),
        "sessions_held": median(lambda r: (r.get("ramp") or {}).get("max_sessions_held")),
        "ramp_server_cpu_s": median(lambda r: (r.get("ramp") or {}).get("server_cpu_s")),
        "ramp_load_generator_cpu_s": median(
            lambda r: (r.get("ramp") or {}).get("load_generator_cpu_s")
        ),
    }


def _against(mode: dict[str, Any], one: dict[str, Any]) -> dict[str, Any]:
    """``mode``'s median CPU per event and heartbeat p50 as multiples of one process's."""
    return {
        "cpu_per_event_ratio": mode["cpu_per_event_us"] / one["cpu_per_event_us"],
        "heartbeat_p50_ratio": mode["heartbeat_p50_ms"] / one["heartbeat_p50_ms"],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="trials per mode, interleaved")
    parser.add_argument("--ramp-max", type=int, default=400, help="0 skips the ramp")
    parser.add_argument("--no-ray", dest="ray", action="store_false", help="skip --ray")
    parser.add_argument("--ray-before", type=Path, help="a source tree to measure --ray from")
    parser.add_argument("--out", type=Path, default=RESULTS / "replicas.json")
    args = parser.parse_args()
    result = asyncio.run(main(args))
    text = json.dumps(result, indent=2, default=float)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
