"""The outbound path, before and after, in one run (issue 13's measurements).

Two source trees are measured the same way on the same machine in the same run: a
baseline revision (checked out here as a git worktree) and the working tree. Each is
served by ``omniduplex serve`` in a subprocess running that tree's ``src/``; the clients
are always the working tree's.

For each tree:

- ``serving``: ``benchmarks/serving.py``'s figures: the ``session.heartbeat`` round trip
  (the floor), server CPU per delivered event with sessions talking to ``loopback-fast``,
  and ``response.cancel`` -> ``response.done(cancelled)`` on the paced ``loopback``, with
  the audio of the cancelled response that still arrived;
- ``barge_in``: ``omniduplex bench --scenario barge-in --sessions 50`` on ``loopback``:
  barge-in stop p50/p95/p99 as a ratio to the heartbeat floor measured in that bench run,
  server CPU per delivered event, late audio;
- ``ramp`` (``--ramp-max``, 0 skips it): ``omniduplex bench --ramp --chunk-ms 100`` up to
  that many sessions: the most held with p95 event lag under 50 ms and server CPU there.

Once, a transport floor: a minimal WebSocket server (this file run with
``--floor-server``) that does only the same JSON + base64 traffic as the ``talk`` load
(reads appends, answers each turn with as many 100 ms audio deltas as it received, plus
``response.created`` / ``response.done``), with no engine; each tree's CPU per event is
reported as a multiple of the floor's.

Run: ``python benchmarks/outbound_path.py --baseline REV [--quick] [--ramp-max 500]``;
writes ``benchmarks/results/outbound_path.json`` and prints the comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pybase64
from websockets.asyncio.server import ServerConnection, serve

from serving import (
    Server,
    cancel_round,
    cpu_per_event,
    free_port,
    heartbeat_floor,
    percentile,
    speech,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
DELTA_BYTES = 4800  # 100 ms of 24 kHz PCM16, loopback's unit


# ---- the transport floor ------------------------------------------------------------


async def _floor_connection(ws: ServerConnection) -> None:
    """OpenAI-shaped traffic without an engine: what every server must at least do."""
    await ws.send(orjson.dumps({"type": "session.created", "event_id": "evt_0"}).decode())
    received = 0
    async for raw in ws:
        event = orjson.loads(raw)
        kind = event.get("type")
        if kind == "input_audio_buffer.append":
            received += len(pybase64.b64decode(event["audio"], validate=True))
        elif kind == "response.create":
            response_id = f"resp_{uuid.uuid4().hex[:16]}"
            head = {"type": "response.created", "response": {"id": response_id}}
            await ws.send(orjson.dumps(head).decode())
            unit = pybase64.b64encode(bytes(DELTA_BYTES)).decode()
            for index in range(max(1, received // DELTA_BYTES)):
                delta = {
                    "type": "response.output_audio.delta",
                    "event_id": f"evt_{index}",
                    "response_id": response_id,
                    "item_id": f"item_{response_id}",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": unit,
                }
                await ws.send(orjson.dumps(delta).decode())
            done = {"type": "response.done", "response": {"id": response_id}}
            await ws.send(orjson.dumps(done).decode())
            received = 0
        elif kind == "session.close":
            return


async def _serve_floor(port: int) -> None:
    async with serve(_floor_connection, "127.0.0.1", port, max_size=None, compression=None):
        print("READY", flush=True)
        await asyncio.Future()


class FloorServer:
    """The transport floor in a subprocess (its CPU is measured like a server's)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--floor-server", str(self.port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "READY":
            raise RuntimeError("the floor server did not start")

    def url(self, query: str = "") -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime{query}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# ---- one tree -----------------------------------------------------------------------


def _bench(server: Server, out: Path, *extra: str) -> dict[str, Any]:
    """``omniduplex bench`` (the working tree's) against ``server``; its results JSON."""
    command = [
        sys.executable,
        "-m",
        "omniduplex.entrypoints.cli",
        "bench",
        "--url",
        server.url(),
        "--server-pid",
        str(server.proc.pid),
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run(command, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def _barge_in_figures(bench: dict[str, Any]) -> dict[str, Any]:
    floor = bench["floor"]["floor_ms"]
    stop = bench["aggregate"]["barge_in_stop_ms"] or {}
    cpu_s = bench["server_resources"]["cpu_s"]
    sent = bench["server_metrics"].get("events_sent") or 0
    late = bench["aggregate"]["late_audio_ms"] or {}
    return {
        "floor_ms": floor,
        "floor_basis": bench["floor"].get("basis"),
        "stop_ms": {q: stop.get(q) for q in ("p50", "p95", "p99")},
        "stop_ratio_to_floor": {
            q: (stop[q] / floor if stop.get(q) is not None and floor else None)
            for q in ("p50", "p95", "p99")
        },
        "server_cpu_s": cpu_s,
        "events_sent": sent,
        "cpu_per_event_us": cpu_s / sent * 1e6 if sent else None,
        "late_audio_ms": {q: late.get(q) for q in ("p50", "p99", "max")},
    }


def _ramp_figures(bench: dict[str, Any]) -> dict[str, Any]:
    ramp = bench["ramp"] or {}
    held = ramp.get("max_sessions_held")
    levels = ramp.get("levels") or []
    at = next((level for level in levels if level.get("sessions") == held), None)
    return {"max_sessions_held": held, "at_max": at, "levels": levels}


async def measure_tree(source: Path | None, args: argparse.Namespace, work: Path) -> dict:
    label = "working tree" if source is None or source == ROOT else str(source)
    print(f"-- {label}", file=sys.stderr)
    result: dict[str, Any] = {}
    fast = Server("loopback-fast", source=source)
    try:
        await fast.wait_ready()
        floor = await heartbeat_floor(fast, 100 if args.quick else 500)
        result["heartbeat_rtt_ms"] = {f"p{q}": percentile(floor, q) for q in (50, 95, 99)}
        result["cpu_per_event"] = await cpu_per_event(fast, *((4, 2) if args.quick else (8, 20)))
    finally:
        fast.stop()
    paced = Server("loopback", source=source)
    try:
        await paced.wait_ready()
        rounds = [await cancel_round(paced, speech(3000)) for _ in range(10 if args.quick else 30)]
        latencies = [ms for ms, _ in rounds]
        floor50 = result["heartbeat_rtt_ms"]["p50"]
        result["cancel_to_done_ms"] = {
            **{f"p{q}": percentile(latencies, q) for q in (50, 95, 99)},
            "ratio_p99_to_floor_p50": percentile(latencies, 99) / floor50,
            "audio_deltas_after_cancel_max": max(after for _, after in rounds),
        }
        duration = "10" if args.quick else "30"
        bench = _bench(
            paced,
            work / f"barge-{uuid.uuid4().hex[:6]}.json",
            *("--scenario", "barge-in", "--sessions", str(args.sessions)),
            *("--duration", duration),
        )
        result["barge_in"] = _barge_in_figures(bench)
    finally:
        paced.stop()
    if args.ramp_max:
        ramp_server = Server("loopback", source=source)
        try:
            await ramp_server.wait_ready()
            bench = _bench(
                ramp_server,
                work / f"ramp-{uuid.uuid4().hex[:6]}.json",
                *("--ramp", "--sessions", str(args.ramp_max), "--chunk-ms", "100"),
                *("--duration", "8" if args.quick else "15"),
            )
            result["ramp"] = _ramp_figures(bench)
        finally:
            ramp_server.stop()
    return result


@contextlib.contextmanager
def worktree(revision: str):
    """A throwaway checkout of ``revision`` (the repository's own objects, no network)."""
    folder = Path(tempfile.mkdtemp(prefix="omniduplex-baseline-"))
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), revision],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield folder
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)],
            check=False,
        )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.baseline],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    out: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "baseline": commit,
        "sessions": args.sessions,
    }
    floor = FloorServer()
    try:
        out["transport_floor"] = await cpu_per_event(floor, *((4, 2) if args.quick else (8, 20)))
    finally:
        floor.stop()
    with tempfile.TemporaryDirectory() as scratch, worktree(commit) as baseline:
        work = Path(scratch)
        out["before"] = await measure_tree(baseline, args, work)
        out["after"] = await measure_tree(None, args, work)
    floor_us = out["transport_floor"]["per_event_us"]
    for side in ("before", "after"):
        tree = out[side]
        tree["cpu_per_event_vs_floor"] = tree["cpu_per_event"]["per_event_us"] / floor_us
    return out


def report(out: dict[str, Any]) -> None:
    floor = out["transport_floor"]["per_event_us"]
    print(f"baseline {out['baseline'][:10]} vs working tree; transport floor {floor:.1f} us/event")
    rows = (
        ("heartbeat RTT p50 ms", lambda t: t["heartbeat_rtt_ms"]["p50"]),
        ("CPU per event us (talk)", lambda t: t["cpu_per_event"]["per_event_us"]),
        ("  x transport floor", lambda t: t["cpu_per_event_vs_floor"]),
        ("cancel->done p50 ms", lambda t: t["cancel_to_done_ms"]["p50"]),
        ("cancel->done p99 ms", lambda t: t["cancel_to_done_ms"]["p99"]),
        (
            "audio after cancel (max deltas)",
            lambda t: t["cancel_to_done_ms"]["audio_deltas_after_cancel_max"],
        ),
        ("barge-in stop p50 / floor", lambda t: t["barge_in"]["stop_ratio_to_floor"]["p50"]),
        ("barge-in stop p95 / floor", lambda t: t["barge_in"]["stop_ratio_to_floor"]["p95"]),
        ("barge-in stop p99 / floor", lambda t: t["barge_in"]["stop_ratio_to_floor"]["p99"]),
        ("barge-in CPU per event us", lambda t: t["barge_in"]["cpu_per_event_us"]),
        ("barge-in late audio max ms", lambda t: t["barge_in"]["late_audio_ms"]["max"]),
        ("ramp: sessions held", lambda t: (t.get("ramp") or {}).get("max_sessions_held")),
    )
    print(f"{'':34}{'before':>12}{'after':>12}")
    for name, pick in rows:
        cells = []
        for side in ("before", "after"):
            try:
                value = pick(out[side])
            except (KeyError, TypeError):
                value = None
            cells.append("-" if value is None else f"{value:.2f}")
        print(f"{name:34}{cells[0]:>12}{cells[1]:>12}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="HEAD", help="the revision to compare against")
    parser.add_argument("--sessions", type=int, default=50, help="barge-in sessions")
    parser.add_argument("--ramp-max", type=int, default=500, help="0 skips the ramp")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--floor-server", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server is not None:
        asyncio.run(_serve_floor(args.floor_server))
        sys.exit(0)
    results = asyncio.run(main(args))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "outbound_path.json").write_text(json.dumps(results, indent=2))
    report(results)
    print(f"wrote {RESULTS / 'outbound_path.json'}")
