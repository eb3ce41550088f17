"""Reliability campaign: ``omniduplex serve`` against hostile and broken clients.

Starts the server as a subprocess (its stderr kept, to count tracebacks) and runs, each
against a fresh server:

- fuzz: ``--frames`` frames from several sockets (random text, random JSON, known event
  types with random fields, binary frames, invalid UTF-8), while a control session talks
  turn after turn; counts server crashes and the control session's events lost,
  duplicated or out of order (``server_event_seq``) and its turns answered;
- flood: ``--flood`` sockets opened at once against ``max_sessions``; counts accepted,
  refused with a typed error, and failed, and ``/health``'s latency meanwhile against its
  latency before the flood (same run);
- churn: ``--churn`` sessions opened, spoken to and closed; server RSS before and after;
- cuts: ``--cuts`` socket cuts (TCP abort) in the middle of a streaming reply, each
  followed by a resume from the last event received; events lost or duplicated across
  the cut and replies that completed;
- kills: the loopback stage in a worker process, killed ``max_restarts`` times (each
  survived: a new session is still answered), then once more (``/health`` must turn 503
  with the reason, and a live session must be told);
- slow readers: ``benchmarks/slow_readers.py``'s measurement (RSS per non-reading
  session and after they drain).

Every phase also counts the tracebacks the server logged. Run:
``python benchmarks/reliability.py [--quick]``; writes ``benchmarks/results/reliability.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import websockets
from websockets.asyncio.client import ClientConnection, connect

sys.path.insert(0, str(Path(__file__).parent))
from serving import free_port

RESULTS = Path(__file__).parent / "results"
RATE = 24_000
# Frames a fuzzing client sends before it waits for them to be answered.
FUZZ_WINDOW = 200
HANG_GUARD_S = 60.0


# ---- the server ------------------------------------------------------------------------


class ServedProcess:
    """``omniduplex serve DEPLOYMENT`` in a subprocess with its log in a file."""

    def __init__(self, deployment: str, *extra: str) -> None:
        self.port = free_port()
        descriptor, name = tempfile.mkstemp(prefix="omniduplex-", suffix=".log")
        self.log = Path(name)
        command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve", deployment]
        self.proc = subprocess.Popen(
            [*command, "--port", str(self.port), "--log-level", "warning", *extra],
            stdout=descriptor,
            stderr=subprocess.STDOUT,
        )
        os.close(descriptor)

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, query: str = "?model=loopback") -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime{query}"

    async def wait_ready(self) -> None:
        async with httpx.AsyncClient() as client:
            for _ in range(600):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited {self.proc.returncode}: {self.log_text()}")
                try:
                    if (await client.get(self.http + "/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("server did not start")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def tracebacks(self) -> int:
        return self.log_text().count("Traceback (most recent call last)")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.unlink(missing_ok=True)


def speech_chunks(ms: int, freq: float = 300.0) -> list[str]:
    """A loud tone (the loopback model echoes it) as 100 ms base64 pcm16 pieces."""
    t = np.arange(RATE * ms // 1000) / RATE
    pcm = (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2").tobytes()
    step = RATE // 10 * 2
    return [base64.b64encode(pcm[i : i + step]).decode() for i in range(0, len(pcm), step)]


class SeqCheck:
    """The ``server_event_seq`` of one session's events as received, maybe over several
    sockets: gaps (lost), repeats (duplicated) and steps back (out of order)."""

    def __init__(self) -> None:
        self.last = 0
        self.seen: set[int] = set()
        self.lost = self.duplicated = self.out_of_order = 0

    def add(self, event: dict[str, Any]) -> None:
        seq = event.get("server_event_seq")
        if not isinstance(seq, int):
            return
        if seq in self.seen:
            self.duplicated += 1
            return
        self.seen.add(seq)
        if seq < self.last:
            self.out_of_order += 1
        elif seq > self.last + 1:
            self.lost += seq - self.last - 1
        self.last = max(self.last, seq)


async def talk_turn(ws: ClientConnection, chunks: list[str], seqs: SeqCheck) -> dict[str, Any]:
    """One spoken turn, committed and answered: the ``response.done`` event."""
    for chunk in chunks:
        await ws.send(orjson.dumps({"type": "input_audio_buffer.append", "audio": chunk}).decode())
    await ws.send('{"type":"input_audio_buffer.commit"}')
    await ws.send('{"type":"response.create"}')
    while True:
        event = orjson.loads(await asyncio.wait_for(ws.recv(), HANG_GUARD_S))
        seqs.add(event)
        if event["type"] == "response.done":
            return event


async def open_session(url: str, **kwargs: Any) -> tuple[ClientConnection, dict[str, Any]]:
    ws = await connect(url, max_size=None, open_timeout=HANG_GUARD_S, **kwargs)
    first = orjson.loads(await asyncio.wait_for(ws.recv(), HANG_GUARD_S))
    return ws, first


# ---- fuzz ------------------------------------------------------------------------------

EVENT_TYPES = (
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.truncate",
    "conversation.item.delete",
    "conversation.item.retrieve",
    "response.create",
    "response.cancel",
    "output_audio_buffer.clear",
    "playback.ack",
    "barge_in",
    "transcription_session.update",
)


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**63, -(2**64), rng.randrange(-(10**6), 10**6)])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e308, float(rng.random())])
    if kind == 4:
        return "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(12)))
    if kind in (5, 6):
        keys = ["type", "session", "item", "audio", "event_id", "response", "content"]
        return {
            rng.choice(keys) if rng.random() < 0.6 else random_json(rng, 3).__repr__()[:8]: (
                random_json(rng, depth + 1)
            )
            for _ in range(rng.randrange(5))
        }
    return [random_json(rng, depth + 1) for _ in range(rng.randrange(5))]


def fuzz_frame(rng: random.Random) -> str | bytes:
    """One hostile frame; invalid UTF-8 is sent as text by ``send_raw_text``."""
    kind = rng.randrange(10)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))  # binary
    if kind == 1:
        return "".join(chr(rng.randrange(1, 0x7F)) for _ in range(rng.randrange(80)))
    if kind == 2:
        return json.dumps(random_json(rng))
    event: dict[str, Any] = {"type": rng.choice(EVENT_TYPES)}
    for key in ("session", "item", "audio", "response", "item_id", "content_index"):
        if rng.random() < 0.4:
            event[key] = random_json(rng, 1)
    if rng.random() < 0.5:
        event["event_id"] = f"fz_{rng.randrange(10**6)}"
    if event["type"] == "input_audio_buffer.append" and rng.random() < 0.5:
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        event["audio"] = base64.b64encode(raw).decode()[: rng.randrange(1, 600)]
    return json.dumps(event)


async def fuzz_socket(server: ServedProcess, frames: int, seed: int, tally: Counter) -> None:
    """``frames`` hostile frames over as many connections as the invalid UTF-8 among them
    close. Every ``FUZZ_WINDOW`` frames the sender waits for a heartbeat's ack, so it is
    a client that reads what it is sent (one that does not is let go by design)."""
    rng = random.Random(seed)
    sent = 0
    while sent < frames:
        try:
            ws, _ = await open_session(server.url("?model=loopback&duplex=1"))
        except (OSError, websockets.WebSocketException, TimeoutError):
            tally["connect_failed"] += 1
            await asyncio.sleep(0.05)
            continue
        acks = asyncio.Queue[None]()

        async def read(ws: ClientConnection = ws, acks: asyncio.Queue[None] = acks) -> None:
            with contextlib.suppress(websockets.ConnectionClosed):
                async for message in ws:
                    event = orjson.loads(message)
                    tally["events"] += 1
                    if event.get("type") == "error":
                        tally["error:" + str(event["error"].get("type"))] += 1
                    elif event.get("type") == "session.heartbeat_ack":
                        acks.put_nowait(None)

        async def answered(ws: ClientConnection = ws, acks: asyncio.Queue[None] = acks) -> None:
            """Everything sent before a heartbeat is answered before its ack (one the
            rate limit refused is sent again)."""
            for _ in range(int(HANG_GUARD_S)):
                await ws.send('{"type":"session.heartbeat"}')
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(acks.get(), 1.0)
                    return
            raise TimeoutError("no heartbeat ack")

        reader = asyncio.create_task(read())
        try:
            while sent < frames:
                sent += 1
                tally["frames"] += 1
                if rng.random() < 0.0005:
                    await ws.send(b"\xff\xfe{", text=True)  # not UTF-8: closes 1007
                    tally["invalid_utf8"] += 1
                    await asyncio.wait_for(reader, HANG_GUARD_S)
                    break
                await ws.send(fuzz_frame(rng))
                if sent % FUZZ_WINDOW == 0:
                    await answered()
            else:
                await answered()
        except websockets.ConnectionClosed:
            pass
        finally:
            if ws.close_code is not None:
                tally[f"closed:{ws.close_code}"] += 1
            await ws.close()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def control_session(server: ServedProcess, stop: asyncio.Event) -> dict[str, Any]:
    seqs = SeqCheck()
    turns = answered = 0
    ws, first = await open_session(server.url())
    seqs.add(first)
    chunks = speech_chunks(300)
    async with ws:
        while not stop.is_set():
            done = await talk_turn(ws, chunks, seqs)
            turns += 1
            answered += done["response"]["status"] == "completed"
    return {
        "turns": turns,
        "answered": answered,
        "events": len(seqs.seen),
        "lost": seqs.lost,
        "duplicated": seqs.duplicated,
        "out_of_order": seqs.out_of_order,
    }


async def phase_fuzz(frames: int, sockets: int) -> dict[str, Any]:
    server = ServedProcess("loopback-fast")
    try:
        await server.wait_ready()
        tally: Counter = Counter()
        stop = asyncio.Event()
        control = asyncio.create_task(control_session(server, stop))
        started = time.perf_counter()
        per = frames // sockets
        await asyncio.gather(*(fuzz_socket(server, per, seed, tally) for seed in range(sockets)))
        elapsed = time.perf_counter() - started
        stop.set()
        report = await asyncio.wait_for(control, HANG_GUARD_S)
        return {
            "frames": per * sockets,
            "seconds": round(elapsed, 1),
            "server_alive": server.alive,
            "crashes": 0 if server.alive else 1,
            "tracebacks": server.tracebacks(),
            "replies": dict(tally),
            "control": report,
        }
    finally:
        server.stop()


# ---- flood -----------------------------------------------------------------------------


async def health_latencies(server: ServedProcess, stop: asyncio.Event) -> list[float]:
    """``/health`` asked every 50 ms until ``stop``, each probe timed on its own (a slow
    answer does not delay the next probe)."""
    out: list[float] = []

    async def probe(client: httpx.AsyncClient) -> None:
        started = time.perf_counter()
        try:
            ok = (await client.get(server.http + "/health")).status_code == 200
        except httpx.HTTPError:
            ok = False
        out.append((time.perf_counter() - started) * 1000 if ok else float("inf"))

    async with httpx.AsyncClient(timeout=HANG_GUARD_S) as client:
        probes = []
        while not stop.is_set():
            probes.append(asyncio.create_task(probe(client)))
            await asyncio.sleep(0.05)
        await asyncio.gather(*probes)
    return out


async def one_flood_socket(server: ServedProcess, tally: Counter, hold: asyncio.Event) -> None:
    try:
        ws, first = await open_session(server.url())
    except (OSError, websockets.WebSocketException, TimeoutError) as exc:
        tally[f"failed:{type(exc).__name__}"] += 1
        return
    async with ws:
        if first.get("type") == "session.created":
            tally["accepted"] += 1
            await hold.wait()
        elif first.get("type") == "error":
            tally["refused:" + str(first["error"].get("code"))] += 1
        else:
            tally["other:" + str(first.get("type"))] += 1


def summary_ms(values: list[float]) -> dict[str, float]:
    finite = [v for v in values if v != float("inf")]
    if not finite:
        return {"samples": 0}
    return {
        "samples": len(values),
        "failed": len(values) - len(finite),
        "p50_ms": round(statistics.median(finite), 2),
        "p95_ms": round(float(np.percentile(finite, 95)), 2),
        "max_ms": round(max(finite), 2),
    }


async def phase_flood(sockets: int) -> dict[str, Any]:
    server = ServedProcess("loopback")
    try:
        await server.wait_ready()
        stop = asyncio.Event()
        baseline_task = asyncio.create_task(health_latencies(server, stop))
        await asyncio.sleep(2)
        stop.set()
        baseline = await baseline_task
        tally: Counter = Counter()
        hold = asyncio.Event()
        stop = asyncio.Event()
        during_task = asyncio.create_task(health_latencies(server, stop))
        flood = [asyncio.create_task(one_flood_socket(server, tally, hold)) for _ in range(sockets)]
        while sum(tally.values()) < sockets:
            await asyncio.sleep(0.05)
        stop.set()
        during = await during_task
        hold.set()
        await asyncio.gather(*flood)
        refused = sum(n for key, n in tally.items() if key.startswith("refused:"))
        return {
            "sockets": sockets,
            "accepted": tally["accepted"],
            "refused_typed": refused,
            "outcomes": dict(tally),
            "health_before": summary_ms(baseline),
            "health_during": summary_ms(during),
            "server_alive": server.alive,
            "tracebacks": server.tracebacks(),
        }
    finally:
        server.stop()


# ---- churn -----------------------------------------------------------------------------


async def phase_churn(sessions: int, concurrency: int = 16) -> dict[str, Any]:
    server = ServedProcess("loopback-fast")
    try:
        await server.wait_ready()
        warm, _ = await open_session(server.url())
        await warm.close()
        rss_before = server.rss_mb()
        chunks = speech_chunks(300)
        completed = Counter()
        gate = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with gate:
                while True:
                    ws, first = await open_session(server.url())
                    if first["type"] == "session.created":
                        break
                    # A session just closed keeps its slot until its cleanup has run.
                    completed["refused:" + str(first["error"].get("code"))] += 1
                    await ws.close()
                    await asyncio.sleep(0.05)
                seqs = SeqCheck()
                seqs.add(first)
                async with ws:
                    done = await talk_turn(ws, chunks, seqs)
                    completed[done["response"]["status"]] += 1

        rounds = []
        for _ in range(2):  # the second round shows growth past the first one's warm-up
            await asyncio.gather(*(one() for _ in range(sessions)))
            await asyncio.sleep(1)  # the server ends the closed sessions
            rounds.append(round(server.rss_mb(), 1))
        return {
            "sessions_per_round": sessions,
            "replies": dict(completed),
            "rss_before_mb": round(rss_before, 1),
            "rss_after_round_mb": rounds,
            "tracebacks": server.tracebacks(),
        }
    finally:
        server.stop()


# ---- cuts ------------------------------------------------------------------------------


async def cut_and_resume(server: ServedProcess, cuts: int, seed: int) -> Counter:
    """One session whose socket is aborted ``cuts`` times mid-reply, resumed each time."""
    rng = random.Random(seed)
    tally: Counter = Counter()
    seqs = SeqCheck()
    ws, first = await open_session(server.url("?model=loopback&duplex=1"))
    seqs.add(first)
    session_id, token = first["session"]["id"], first["resume_token"]
    chunks = speech_chunks(800)
    for _ in range(cuts):
        for chunk in chunks:
            await ws.send(
                orjson.dumps({"type": "input_audio_buffer.append", "audio": chunk}).decode()
            )
        await ws.send('{"type":"input_audio_buffer.commit"}')
        await ws.send('{"type":"response.create"}')
        # Cut after a random number of the reply's events.
        for _ in range(rng.randrange(3, 12)):
            event = orjson.loads(await asyncio.wait_for(ws.recv(), HANG_GUARD_S))
            seqs.add(event)
        ws.transport.abort()
        await ws.wait_closed()
        tally["cuts"] += 1
        ws = await connect(server.url("?resume=1"), max_size=None, open_timeout=HANG_GUARD_S)
        resume = {
            "type": "session.resume",
            "session_id": session_id,
            "resume_token": token,
            "last_received_server_event_seq": seqs.last,
        }
        await ws.send(json.dumps(resume))
        while True:
            event = orjson.loads(await asyncio.wait_for(ws.recv(), HANG_GUARD_S))
            if event["type"] == "session.resumed":
                token = event.get("resume_token") or token
                seqs.add(event)
                continue
            if event["type"] == "error":
                tally["resume_refused:" + str(event["error"].get("code"))] += 1
                return tally
            seqs.add(event)
            if event["type"] == "response.done":
                tally["replies_" + event["response"]["status"]] += 1
                break
    await ws.close()
    tally["lost"] += seqs.lost
    tally["duplicated"] += seqs.duplicated
    tally["out_of_order"] += seqs.out_of_order
    return tally


async def phase_cuts(cuts: int, per_session: int = 5, concurrency: int = 8) -> dict[str, Any]:
    server = ServedProcess("loopback")
    try:
        await server.wait_ready()
        gate = asyncio.Semaphore(concurrency)
        total: Counter = Counter()

        async def one(seed: int) -> None:
            async with gate:
                total.update(await cut_and_resume(server, per_session, seed))

        await asyncio.gather(*(one(seed) for seed in range(max(1, cuts // per_session))))
        return {**dict(total), "tracebacks": server.tracebacks()}
    finally:
        server.stop()


# ---- stage-worker kills ----------------------------------------------------------------


def worker_pids(parent: int) -> list[int]:
    """The stage workers ``parent`` spawned (not multiprocessing's resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


async def kill_workers(server: ServedProcess) -> int:
    """SIGKILL the server's stage workers once they are up; how many were killed."""
    for _ in range(600):
        pids = worker_pids(server.proc.pid)
        if pids:
            for pid in pids:
                os.kill(pid, 9)
            return len(pids)
        await asyncio.sleep(0.05)
    return 0


async def phase_kills(max_restarts: int = 3) -> dict[str, Any]:
    """The loopback stage in a worker process: every kill within the restart budget is
    survived (a new session is answered); one more leaves the engine dead, said by
    ``/health`` and to the live session."""
    descriptor, name = tempfile.mkstemp(suffix=".yaml")
    os.close(descriptor)
    deploy = Path(name)
    deploy.write_text(
        "name: loopback\nserved_model_name: loopback\nsession_mode: duplex\n"
        "duplex_plugin: omniduplex.model_executor.models.loopback.plugin:LoopbackDuplexPlugin\n"
        "duplex_session:\n  max_sessions: 16\n"
        "stages:\n  - name: loopback\n    worker: process\n"
        f"    max_restarts: {max_restarts}\n    model:\n"
        "      factory: omniduplex.model_executor.models.loopback.stage:LoopbackStageModel\n"
        "      kwargs: {unit_ms: 100, realtime: false, server_vad_by_default: false}\n"
    )
    server = ServedProcess(str(deploy), "--no-exit-on-engine-failure")
    chunks = speech_chunks(300)
    survived = 0
    try:
        await server.wait_ready()
        for _ in range(max_restarts):
            await kill_workers(server)
            try:
                ws, _ = await open_session(server.url())
                async with ws:
                    done = await talk_turn(ws, chunks, SeqCheck())
                survived += done["response"]["status"] == "completed"
            except (OSError, websockets.WebSocketException, TimeoutError):
                pass
        live, _ = await open_session(server.url("?model=loopback&duplex=1"))
        await kill_workers(server)
        told: list[str] = []
        try:
            async with asyncio.timeout(HANG_GUARD_S), live:
                async for message in live:
                    event = orjson.loads(message)
                    if event["type"] in ("error", "session.closed"):
                        told.append(str(event.get("error", {}).get("code") or event["type"]))
        except websockets.ConnectionClosed:
            pass
        async with httpx.AsyncClient() as client:
            health = await client.get(server.http + "/health")
        return {
            "kills_within_budget": max_restarts,
            "kills_survived": survived,
            "after_budget_health": health.status_code,
            "after_budget_reason": health.json().get("reason"),
            "after_budget_live_session_told": told,
            "tracebacks": server.tracebacks(),
        }
    finally:
        server.stop()
        deploy.unlink()


# ---- slow readers ----------------------------------------------------------------------


async def phase_slow_readers(quick: bool) -> dict[str, Any]:
    """``benchmarks/slow_readers.py`` (its own server, baseline and two slow rounds), run
    as it is and read back from its JSON."""
    script = Path(__file__).parent / "slow_readers.py"
    descriptor, name = tempfile.mkstemp(suffix=".json")
    os.close(descriptor)
    out = Path(name)
    command = [sys.executable, str(script), "--out", str(out)]
    if quick:
        command += ["--sessions", "4", "--turns", "2"]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, stderr = await process.communicate()
    try:
        if process.returncode != 0:
            return {"failed": process.returncode, "stderr": stderr.decode()[-2000:]}
        return json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)


# ---- main ------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8192)), hard))
    results: dict[str, Any] = {"machine": {"cores": os.cpu_count()}}
    phases = {
        "fuzz": lambda: phase_fuzz(args.frames, args.fuzz_sockets),
        "flood": lambda: phase_flood(args.flood),
        "churn": lambda: phase_churn(args.churn),
        "cuts": lambda: phase_cuts(args.cuts),
        "kills": phase_kills,
        "slow_readers": lambda: phase_slow_readers(args.quick),
    }
    for name, run in phases.items():
        if args.only and name not in args.only:
            continue
        started = time.perf_counter()
        results[name] = await run()
        results[name]["phase_seconds"] = round(time.perf_counter() - started, 1)
        print(name, json.dumps(results[name], indent=1), flush=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller campaign")
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--fuzz-sockets", type=int, default=4)
    parser.add_argument("--flood", type=int, default=1000)
    parser.add_argument("--churn", type=int, default=500)
    parser.add_argument("--cuts", type=int, default=500)
    parser.add_argument("--only", nargs="*", help="run only these phases")
    parser.add_argument("--out", type=Path, default=RESULTS / "reliability.json")
    options = parser.parse_args()
    if options.quick:
        options.frames, options.flood, options.churn, options.cuts = 5_000, 200, 50, 50
    report = asyncio.run(main(options))
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {options.out}")
