"""Server memory with clients that stop reading, against clients that read (issue 17).

Starts ``omniduplex serve DEPLOYMENT`` in a subprocess and samples its resident set size
(``/proc/<pid>/statm``, every 50 ms) through three phases, one after the other on the same
server:

- ``baseline``: N clients that read everything. Each talks ``--turns`` turns of
  ``--turn-ms`` of audio (append, commit, ``response.create``, read to ``response.done``),
  then sends ``session.close``;
- ``slow_1`` and ``slow_2``: N clients that talk the same kind of turns but stop reading
  after ``session.created`` (a small ``SO_RCVBUF`` and a client queue of one message, so
  the kernel and the client library hold little). Each keeps talking (a turn every half
  second) until the server drops its socket, or ``--detach-timeout-s`` passes. Then each
  resumes
  its session on a fresh connection (``last_received_server_event_seq``: 1, all it read),
  reads the replay and closes the session; a resume the journal cannot serve exactly
  (``session.resync_required``) leaves the session to its disconnect grace.

For every phase: RSS at its start, its peak, and after the load drained (every session
ended, as ``/metrics`` says, or ``--drain-timeout-s`` passed, then ``--settle-s``); the
peak and the after-drain growth per session; for slow readers, how many were dropped by
the server, how many resumed, and the server log lines saying a client stopped reading.

Run: ``python benchmarks/slow_readers.py [--sessions 8] [--deployment loopback-fast]``;
writes ``benchmarks/results/slow_readers.json`` and prints the table. To measure another
source tree (say, before a fix), put its ``src`` on ``PYTHONPATH`` and pass ``--out``: the
server subprocess runs what that path holds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from reliability import ServedProcess
from serving import speech

RESULTS = Path(__file__).parent / "results"
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024
STOPPED_READING = "client stopped reading"
# A resume that has not closed its session by then is reported as timed out.
RESUME_TIMEOUT_S = 60.0


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


class Server(ServedProcess):
    """``omniduplex serve`` (the reliability campaign's ``ServedProcess``) with room for
    every phase's sessions, and what the phases read of it."""

    def __init__(self, deployment: str, sessions: int) -> None:
        super().__init__(deployment, "--max-sessions", str(max(16, 2 * sessions)))

    def sessions_active(self) -> float:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("omniduplex_sessions_active "):
                    return float(line.split()[1])
        return float("nan")

    def log_lines(self, needle: str) -> int:
        return sum(needle in line for line in self.log_text().splitlines())


class Sampler:
    """The server's RSS every 50 ms; ``peak`` since the last ``reset``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_bytes(self.pid))
            await asyncio.sleep(0.05)

    def reset(self) -> int:
        self.peak = now = rss_bytes(self.pid)
        return now

    def stop(self) -> None:
        self._task.cancel()


def _event(kind: str, **fields: Any) -> str:
    return orjson.dumps({"type": kind, **fields}).decode()


async def _turn(ws: ClientConnection, chunks: list[str]) -> None:
    for chunk in chunks:
        await ws.send(_event("input_audio_buffer.append", audio=chunk))
    await ws.send(_event("input_audio_buffer.commit"))
    await ws.send(_event("response.create"))


async def reading_client(server: Server, turns: int, chunks: list[str]) -> int:
    """Talk ``turns`` turns, reading everything; then close. Returns events read."""
    events = 0
    async with connect(server.url("?model=loopback&duplex=1"), max_size=None) as ws:
        await ws.recv()
        await ws.send(_event("session.update", session={"turn_detection": None}))
        for _ in range(turns):
            await _turn(ws, chunks)
            while orjson.loads(await ws.recv())["type"] != "response.done":
                events += 1
        await ws.send(_event("session.close"))
        async for _ in ws:
            events += 1
    return events


async def slow_client(server: Server, chunks: list[str], detach_timeout_s: float) -> dict[str, Any]:
    """Stop reading after ``session.created``; keep sending until the server drops the
    socket; then resume on a fresh connection and close the session."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    sock.setblocking(False)
    ws = await connect(
        server.url("?model=loopback&duplex=1"), sock=sock, max_queue=1, max_size=None
    )
    created = orjson.loads(await ws.recv())
    await ws.send(_event("session.update", session={"turn_detection": None}))
    start = time.monotonic()
    dropped_after_s: float | None = None
    turns = 0
    try:
        # A server that neither reads nor drops the socket blocks a send: the timeout
        # covers that too.
        async with asyncio.timeout(detach_timeout_s):
            while True:
                await _turn(ws, chunks)
                turns += 1
                await asyncio.sleep(0.5)
    except ConnectionClosed:
        dropped_after_s = time.monotonic() - start
    except TimeoutError:
        pass
    finally:
        ws.transport.abort()
    result: dict[str, Any] = {"dropped_after_s": dropped_after_s, "turns": turns}
    result["resumed"] = False
    try:
        async with asyncio.timeout(RESUME_TIMEOUT_S):
            await _resume_and_close(server, created, result)
    except TimeoutError:
        result["resume_answer"] = result.get("resume_answer", "") + " (then timed out)"
    except ConnectionClosed:
        result["resume_answer"] = result.get("resume_answer", "") + " (then dropped)"
        result["resumed"] = False
    return result


async def _resume_and_close(server: Server, created: dict[str, Any], result: dict) -> None:
    session_id, token = created["session"]["id"], created["resume_token"]
    async with connect(server.url("?resume=1&duplex=1"), max_size=None) as again:
        await again.send(
            _event(
                "session.resume",
                session_id=session_id,
                resume_token=token,
                last_received_server_event_seq=created["server_event_seq"],
            )
        )
        first = orjson.loads(await again.recv())
        result["resume_answer"] = first["type"]
        if first["type"] != "session.resumed":
            return
        result["resumed"] = True
        await again.send(_event("session.close"))
        replayed = 0
        async for raw in again:
            replayed += 1
            if orjson.loads(raw)["type"] == "session.closed":
                break
        result["events_after_resume"] = replayed


async def drain(server: Server, timeout_s: float, settle_s: float) -> tuple[float, float]:
    """Wait until no session is open (or ``timeout_s``), then ``settle_s`` more (the
    server gives freed memory back a second after a session ends); seconds waited until
    none was open, sessions left."""
    start = time.monotonic()
    left = await asyncio.to_thread(server.sessions_active)
    while left > 0 and time.monotonic() - start < timeout_s:
        await asyncio.sleep(0.25)
        left = await asyncio.to_thread(server.sessions_active)
    waited = time.monotonic() - start
    await asyncio.sleep(settle_s)
    return waited, left


async def phase(
    name: str, server: Server, sampler: Sampler, args: argparse.Namespace, chunks: list[str]
) -> dict[str, Any]:
    n = args.sessions
    start = sampler.reset()
    lines_before = server.log_lines(STOPPED_READING)
    if name == "baseline":
        counts = await asyncio.gather(
            *(reading_client(server, args.turns, chunks) for _ in range(n))
        )
        clients: dict[str, Any] = {"events_read": sum(counts)}
    else:
        results = await asyncio.gather(
            *(slow_client(server, chunks, args.detach_timeout_s) for _ in range(n))
        )
        dropped = [r["dropped_after_s"] for r in results if r["dropped_after_s"] is not None]
        clients = {
            "dropped_by_server": len(dropped),
            "dropped_after_s_max": max(dropped) if dropped else None,
            "turns_sent": sum(r["turns"] for r in results),
            "resumed": sum(r["resumed"] for r in results),
            "resume_answers": sorted({r.get("resume_answer", "") for r in results}),
        }
    peak = sampler.peak
    waited, left = await drain(server, args.drain_timeout_s, args.settle_s)
    after = rss_bytes(server.proc.pid)
    return {
        "phase": name,
        "sessions": n,
        "rss_start_mib": start / MIB,
        "rss_peak_mib": peak / MIB,
        "rss_after_drain_mib": after / MIB,
        "peak_growth_per_session_mib": (peak - start) / n / MIB,
        "after_drain_growth_per_session_mib": (after - start) / n / MIB,
        "drain_waited_s": waited,
        "sessions_left_after_drain": left,
        "stopped_reading_log_lines": server.log_lines(STOPPED_READING) - lines_before,
        **clients,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = Server(args.deployment, args.sessions)
    try:
        await server.wait_ready()
        sampler = Sampler(server.proc.pid)
        chunks = speech(args.turn_ms)
        initial = rss_bytes(server.proc.pid)
        phases = [
            await phase(name, server, sampler, args, chunks)
            for name in ("baseline", "slow_1", "slow_2")
        ]
        sampler.stop()
        return {
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
            "deployment": args.deployment,
            "turns": args.turns,
            "turn_ms": args.turn_ms,
            "rss_initial_mib": initial / MIB,
            "phases": phases,
        }
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--deployment", default="loopback-fast")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--turn-ms", type=int, default=10_000)
    parser.add_argument("--detach-timeout-s", type=float, default=30.0)
    parser.add_argument("--drain-timeout-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "slow_readers.json")
    args = parser.parse_args()
    out = asyncio.run(main(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"RSS at start {out['rss_initial_mib']:.0f} MiB ({out['deployment']})")
    for p in out["phases"]:
        print(
            f"{p['phase']:9} start {p['rss_start_mib']:6.0f}  peak {p['rss_peak_mib']:6.0f}  "
            f"after drain {p['rss_after_drain_mib']:6.0f} MiB  "
            f"(+{p['peak_growth_per_session_mib']:.1f} peak, "
            f"+{p['after_drain_growth_per_session_mib']:.1f} after, MiB/session; "
            f"{p['sessions_left_after_drain']:.0f} sessions left after "
            f"{p['drain_waited_s']:.0f} s)"
        )
        if p["phase"] != "baseline":
            print(
                f"          dropped by server {p['dropped_by_server']}/{p['sessions']}  "
                f"resumed {p['resumed']}  log lines {p['stopped_reading_log_lines']}"
            )
    print(f"wrote {args.out}")
