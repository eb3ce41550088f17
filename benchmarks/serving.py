"""Serving benchmark: transport floor, server CPU per event, cancel latency over WebSocket.

Starts ``omniduplex serve`` as a subprocess on a free loopback port, then measures from
real sockets:

- the round trip of ``session.heartbeat`` -> ``session.heartbeat_ack`` (the floor);
- server CPU time per event delivered (``/proc/<pid>/stat``), with several sessions
  talking to the as-fast-as-possible loopback model;
- ``response.cancel`` sent -> ``response.done(cancelled)`` received while the paced
  loopback model streams audio, and audio deltas of the cancelled response received
  after the cancel was sent; reported also as a ratio to the floor.

Run: ``python benchmarks/serving.py [--quick]``; writes ``benchmarks/results/serving.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from websockets.asyncio.client import connect

RESULTS = Path(__file__).parent / "results"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


class Server:
    """``omniduplex serve DEPLOYMENT`` in a subprocess; ``source``: the source tree whose
    ``src/`` it runs (default: the installed package), for before/after comparisons;
    ``extra``: more ``serve`` arguments (``--replicas 2``)."""

    def __init__(
        self, deployment: str, *, source: Path | None = None, extra: tuple[str, ...] = ()
    ) -> None:
        self.port = free_port()
        env = dict(os.environ)
        if source is not None:
            env["PYTHONPATH"] = str(source / "src")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "omniduplex.entrypoints.cli",
                "serve",
                deployment,
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--max-sessions",
                "600",
                *extra,
            ],
            env=env,
            cwd=source,
        )

    async def wait_ready(self) -> None:
        for _ in range(1200):  # one that starts Ray takes longer
            try:
                async with connect(self.url("?model=loopback")) as ws:
                    await ws.recv()
                    return
            except OSError:
                await asyncio.sleep(0.1)
        raise RuntimeError("server did not start")

    def url(self, query: str = "") -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime{query}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)  # a server that started Ray stops it first
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def speech(ms: int) -> list[str]:
    t = np.arange(24_000 * ms // 1000) / 24_000
    pcm = (0.3 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()
    return [base64.b64encode(pcm[i : i + 4800]).decode() for i in range(0, len(pcm), 4800)]


async def heartbeat_floor(server: Server, rounds: int) -> list[float]:
    out = []
    async with connect(server.url("?model=loopback")) as ws:
        await ws.recv()
        for _ in range(rounds):
            start = time.perf_counter()
            await ws.send('{"type":"session.heartbeat"}')
            while orjson.loads(await ws.recv())["type"] != "session.heartbeat_ack":
                pass
            out.append((time.perf_counter() - start) * 1000)
    return out


async def talk(server: Server, turns: int, chunks: list[str]) -> int:
    events = 0
    async with connect(server.url("?model=loopback"), max_size=None) as ws:
        await ws.recv()
        for _ in range(turns):
            for chunk in chunks:
                await ws.send(
                    orjson.dumps({"type": "input_audio_buffer.append", "audio": chunk}).decode()
                )
            await ws.send('{"type":"input_audio_buffer.commit"}')
            await ws.send('{"type":"response.create"}')
            while True:
                event = orjson.loads(await ws.recv())
                events += 1
                if event["type"] == "response.done":
                    break
        await ws.send('{"type":"session.close"}')
    return events


async def cpu_per_event(server: Any, sessions: int, turns: int) -> dict[str, Any]:
    """Server CPU per event delivered, ``sessions`` clients talking ``turns`` turns each
    (``server`` is anything with ``proc`` and ``url``, our server or a transport floor)."""
    chunks = speech(2000)
    before = cpu_seconds(server.proc.pid)
    counts = await asyncio.gather(*(talk(server, turns, chunks) for _ in range(sessions)))
    spent = cpu_seconds(server.proc.pid) - before
    events = sum(counts)
    return {
        "events": events,
        "server_cpu_s": spent,
        "per_event_us": spent / events * 1e6,
        "sessions": sessions,
    }


async def cancel_round(server: Server, chunks: list[str]) -> tuple[float, int]:
    async with connect(server.url("?model=loopback"), max_size=None) as ws:
        await ws.recv()
        # The client takes turns, whatever the deployment's default turn detection.
        update = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
        await ws.send(orjson.dumps({"type": "session.update", "session": update}).decode())
        while orjson.loads(await ws.recv())["type"] != "session.updated":
            pass
        for chunk in chunks:
            await ws.send(
                orjson.dumps({"type": "input_audio_buffer.append", "audio": chunk}).decode()
            )
        await ws.send('{"type":"input_audio_buffer.commit"}')
        await ws.send('{"type":"response.create"}')
        deltas = 0
        while deltas < 3:
            if orjson.loads(await ws.recv())["type"] == "response.output_audio.delta":
                deltas += 1
        sent = time.perf_counter()
        await ws.send('{"type":"response.cancel"}')
        late_audio = 0
        while True:
            event = orjson.loads(await ws.recv())
            if event["type"] == "response.output_audio.delta":
                late_audio += 1
            if event["type"] == "response.done":
                assert event["response"]["status"] == "cancelled", event["response"]["status"]
                return (time.perf_counter() - sent) * 1000, late_audio


async def main(quick: bool) -> dict:
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    fast = Server("loopback-fast")
    try:
        await fast.wait_ready()
        floor = await heartbeat_floor(fast, 100 if quick else 500)
        results["heartbeat_rtt_ms"] = {
            "p50": percentile(floor, 50),
            "p95": percentile(floor, 95),
            "p99": percentile(floor, 99),
        }
        results["cpu_per_event_us"] = await cpu_per_event(fast, *((4, 2) if quick else (8, 5)))
    finally:
        fast.stop()
    paced = Server("loopback")
    try:
        await paced.wait_ready()
        latencies, late = [], []
        for _ in range(10 if quick else 30):
            ms, after = await cancel_round(paced, speech(3000))
            latencies.append(ms)
            late.append(after)
        floor50 = results["heartbeat_rtt_ms"]["p50"]
        results["cancel_to_done_ms"] = {
            "p50": percentile(latencies, 50),
            "p95": percentile(latencies, 95),
            "p99": percentile(latencies, 99),
            "ratio_p50_to_floor_p50": percentile(latencies, 50) / floor50,
            "ratio_p99_to_floor_p50": percentile(latencies, 99) / floor50,
            "audio_deltas_after_cancel_max": max(late),
            "audio_deltas_after_cancel_mean": statistics.mean(late),
        }
    finally:
        paced.stop()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = asyncio.run(main(args.quick))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serving.json").write_text(json.dumps(out, indent=2))
    hb, cpu, cancel = out["heartbeat_rtt_ms"], out["cpu_per_event_us"], out["cancel_to_done_ms"]
    print(f"heartbeat RTT (floor)      p50 {hb['p50']:.3f} ms  p95 {hb['p95']:.3f} ms")
    print(f"server CPU per event       {cpu['per_event_us']:.1f} us  ({cpu['events']} events)")
    print(
        f"cancel -> done(cancelled)  p50 {cancel['p50']:.3f} ms  p99 {cancel['p99']:.3f} ms  "
        f"(x{cancel['ratio_p50_to_floor_p50']:.2f} / x{cancel['ratio_p99_to_floor_p50']:.2f} floor)"
    )
    print(f"audio deltas after cancel  max {cancel['audio_deltas_after_cancel_max']}")
    print(f"wrote {RESULTS / 'serving.json'}")
