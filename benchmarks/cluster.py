"""Cluster benchmark: what going through Ray costs, and resume through another front end.

Starts a local Ray cluster (``--cpus``, default 2), two engine replicas of the paced
loopback model and two front ends (``build_cluster_app``, each served in a thread), plus
one single-process server of the same deployment as the baseline. From real sockets:

- ``heartbeat``: ``session.heartbeat`` -> ``session.heartbeat_ack``: a command through the
  engine session and its event back (the event lag floor);
- ``first_audio``: ``response.create`` -> the reply's first ``output_audio.delta``;
- ``cancel``: ``response.cancel`` sent mid-reply -> ``response.done`` (cancelled);

each through one process and through a front end and Ray, with the ratio of medians;
and ``resume_other_front_end``: ``--cuts`` times, the socket is dropped and the session
resumed through the other front end (``session.resume`` sent -> ``session.resumed``
received, and -> the replay's end), p50 / p95; ``ray_call``: what one async actor call
costs here (CPU on the caller and on the actor, 32 calls in flight), what the control
plane pays per placement, lookup or report (a few per session opened or resumed; no
client frame crosses Ray); and ``cpu_per_event``: CPU per event a client receives,
several sessions talking to the unpaced model, for ``omniduplex serve`` alone against
``omniduplex serve --ray`` (the front end's process plus the replicas'; Ray's own
daemons are not counted here, ``replicas.py`` counts them).

Run: ``python benchmarks/cluster.py [--quick]``; writes ``benchmarks/results/cluster.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import ray
import uvicorn
from websockets.asyncio.client import connect

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.cli import uvicorn_config
from omniduplex.entrypoints.cluster.app import build_cluster_app
from omniduplex.entrypoints.cluster.ray_backend import RayCluster
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.entrypoints.openai.api_server import build_app

RESULTS = Path(__file__).parent / "results"
TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        server.should_exit = True
        thread.join(TIMEOUT_S)


def pcm(ms: int, rate: int = 24_000) -> str:
    t = np.arange(rate * ms // 1000) / rate
    return base64.b64encode(
        (0.3 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()
    ).decode()


class Client:
    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, obj: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps(obj).decode())

    async def recv(self) -> dict[str, Any]:
        return orjson.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT_S))

    async def until(self, wanted: str) -> dict[str, Any]:
        while True:
            event = await self.recv()
            if event["type"] == wanted:
                return event


async def _open(url: str) -> tuple[Any, Client, dict[str, Any]]:
    ws = await connect(url + "?duplex=1", max_size=None)
    client = Client(ws)
    await client.send(
        {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}
    )
    return ws, client, await client.recv()


async def latencies(url: str, samples: int) -> dict[str, list[float]]:
    ws, client, _ = await _open(url)
    out: dict[str, list[float]] = {"heartbeat": [], "first_audio": [], "cancel": []}
    try:
        for _ in range(samples):
            t = time.perf_counter()
            await client.send({"type": "session.heartbeat"})
            await client.until("session.heartbeat_ack")
            out["heartbeat"].append(time.perf_counter() - t)
        for _ in range(samples):
            await client.send({"type": "input_audio_buffer.append", "audio": pcm(1500)})
            await client.send({"type": "input_audio_buffer.commit"})
            t = time.perf_counter()
            await client.send({"type": "response.create"})
            await client.until("response.output_audio.delta")
            out["first_audio"].append(time.perf_counter() - t)
            t = time.perf_counter()
            await client.send({"type": "response.cancel"})
            done = await client.until("response.done")
            assert done["response"]["status"] == "cancelled", done
            out["cancel"].append(time.perf_counter() - t)
    finally:
        await ws.close()
    return out


async def resume_cuts(urls: list[str], cuts: int) -> dict[str, list[float]]:
    ws, client, created = await _open(urls[0])
    session_id, token = created["session"]["id"], created["resume_token"]
    last = created["server_event_seq"]
    resumed_s: list[float] = []
    replayed_s: list[float] = []
    for i in range(cuts):
        # Something to replay: a heartbeat's ack the client will not read before the cut.
        await client.send({"type": "session.heartbeat"})
        await asyncio.sleep(0.005)
        ws.transport.abort()  # the socket dies without a close handshake
        url = urls[(i + 1) % len(urls)]
        ws = await connect(url + "?resume=1&duplex=1", max_size=None)
        client = Client(ws)
        t = time.perf_counter()
        await client.send(
            {
                "type": "session.resume",
                "session_id": session_id,
                "resume_token": token,
                "last_received_server_event_seq": last,
            }
        )
        resumed = await client.recv()
        assert resumed["type"] == "session.resumed", resumed
        resumed_s.append(time.perf_counter() - t)
        token = resumed["resume_token"]
        event = await client.until("session.heartbeat_ack")
        replayed_s.append(time.perf_counter() - t)
        last = event["server_event_seq"]
    await client.send({"type": "session.close"})
    await client.until("session.closed")
    await ws.close()
    return {"resumed": resumed_s, "replayed": replayed_s}


@ray.remote
class _Echo:
    async def call(self, payload: bytes) -> None:
        return None

    def cpu(self) -> float:
        return time.process_time()


async def ray_call_cost(calls: int = 3000, in_flight: int = 32) -> dict[str, float]:
    echo = _Echo.remote()  # type: ignore[attr-defined]
    await echo.call.remote(b"")
    actor_before, before, t = await echo.cpu.remote(), time.process_time(), time.perf_counter()

    async def caller() -> None:
        for _ in range(calls // in_flight):
            await echo.call.remote(b"x" * 256)

    await asyncio.gather(*(caller() for _ in range(in_flight)))
    wall, after, actor_after = time.perf_counter() - t, time.process_time(), await echo.cpu.remote()
    ray.kill(echo)
    done = calls // in_flight * in_flight
    return {
        "calls_per_s": round(done / wall),
        "caller_cpu_us_per_call": round(1e6 * (after - before) / done),
        "actor_cpu_us_per_call": round(1e6 * (actor_after - actor_before) / done),
    }


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def serve_process(deploy: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``omniduplex serve`` in a subprocess (its CPU is measured from ``/proc``)."""
    port = free_port()
    command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve", str(deploy)]
    process = subprocess.Popen([*command, "--port", str(port), "--log-level", "warning", *extra])
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "server did not start"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.2)
        yield process, f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        process.terminate()
        process.wait(30)


async def talk(url: str, turns: int) -> int:
    ws, client, _ = await _open(url)
    await client.send({"type": "session.update", "session": {"output_audio_pacing": "none"}})
    chunks = [pcm(200) for _ in range(10)]
    events = 0
    try:
        for _ in range(turns):
            for chunk in chunks:
                await client.send({"type": "input_audio_buffer.append", "audio": chunk})
            await client.send({"type": "input_audio_buffer.commit"})
            await client.send({"type": "response.create"})
            while (await client.recv())["type"] != "response.done":
                events += 1
            events += 1
        await client.send({"type": "session.close"})
        await client.until("session.closed")
    finally:
        await ws.close()
    return events


async def cpu_per_event(url: str, pids: list[int], sessions: int, turns: int) -> dict[str, Any]:
    before = sum(cpu_seconds(pid) for pid in pids)
    counts = await asyncio.gather(*(talk(url, turns) for _ in range(sessions)))
    spent = sum(cpu_seconds(pid) for pid in pids) - before
    events = sum(counts)
    return {"events": events, "cpu_s": round(spent, 2), "per_event_us": round(spent / events * 1e6)}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p95_ms": round(pct(values, 0.95), 2),
        "n": len(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--cuts", type=int, default=200)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "cluster.json")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.cuts, args.turns = 8, 20, 3
    namespace = f"omniduplex-bench-{uuid.uuid4().hex[:8]}"
    ray.init(num_cpus=args.cpus, include_dashboard=False, namespace=namespace, log_to_driver=False)
    tmp = tempfile.TemporaryDirectory()
    deploy = Path(tmp.name) / "cluster.yaml"
    deploy.write_text(
        "base_config: loopback\n"
        "cluster: {replicas: 2, resources_per_replica: {num_cpus: 0}, "
        f"namespace: {namespace}}}\n"
    )
    pipeline = load_deploy_config(deploy)
    backends = [RayCluster.connect(None, pipeline) for _ in range(2)]
    results: dict[str, Any] = {
        "machine": f"{platform.machine()}, {args.cpus} CPUs for Ray (shared with the clients)",
        "deployment": "loopback (paced), 2 replicas, 2 front ends",
    }
    try:
        with (
            serve(build_app(DuplexOmni(pipeline), model_name="loopback")) as single,
            serve(build_cluster_app(backends[0], model_name="loopback")) as one,
            serve(build_cluster_app(backends[1], model_name="loopback")) as two,
        ):
            local = asyncio.run(latencies(single, args.samples))
            remote = asyncio.run(latencies(one, args.samples))
            for key in local:
                results[key] = {
                    "one_process": summary(local[key]),
                    "through_ray": summary(remote[key]),
                    "ratio_p50": round(
                        statistics.median(remote[key]) / statistics.median(local[key]), 2
                    ),
                }
            results["ray_call"] = asyncio.run(ray_call_cost())
            cuts = asyncio.run(resume_cuts([one, two], args.cuts))
            results["resume_other_front_end"] = {
                "resumed": summary(cuts["resumed"]),
                "replay_done": summary(cuts["replayed"]),
            }
        results["cpu_per_event"] = {"sessions": args.sessions, "turns": args.turns}
        with serve_process(deploy) as (process, url):
            results["cpu_per_event"]["one_process"] = asyncio.run(
                cpu_per_event(url, [process.pid], args.sessions, args.turns)
            )
        address = ray.get_runtime_context().gcs_address
        replica_pids = [
            ray.get(handle.__ray_call__.remote(lambda _actor: os.getpid()))
            for handle in backends[0].replicas.values()
        ]
        with serve_process(deploy, "--ray", address) as (process, url):
            results["cpu_per_event"]["through_ray"] = asyncio.run(
                cpu_per_event(url, [process.pid, *replica_pids], args.sessions, args.turns)
            )
    finally:
        backends[0].stop(replicas=True)
        ray.shutdown()
        tmp.cleanup()
    print(json.dumps(results, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
