"""The floor every latency is compared with, measured in the same run.

* ``heartbeat``: ``session.heartbeat`` -> ``session.heartbeat_ack`` round trips on one
  extra session of the same server, while the bench sessions run (duplex servers);
* ``ws_ping``: WebSocket ping -> pong on that connection (any server);
* ``echo`` (``--floor-echo``): a minimal WebSocket echo server in a subprocess, driven
  with as many connections as bench sessions, each sending one append-sized frame per
  chunk, one in flight at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from typing import Any

import orjson
from websockets.asyncio.client import connect as ws_connect

from .drivers import MAX_FRAME, _headers, plain_url

__all__ = ["EchoServer", "FloorProbe", "echo_floor"]


class FloorProbe:
    """Heartbeat and ping round trips on one extra connection, every ``interval_s``."""

    def __init__(
        self, url: str, *, kind: str, dialect: str, api_key: str | None, interval_s: float = 0.2
    ) -> None:
        self.url = url
        self.kind = kind
        self.dialect = dialect
        self.api_key = api_key
        self.interval_s = interval_s
        self.heartbeat_ms: list[float] = []
        self.ping_ms: list[float] = []
        self.error: str | None = None

    def mark(self) -> tuple[int, int]:
        return len(self.heartbeat_ms), len(self.ping_ms)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            async with ws_connect(
                plain_url(self.url, self.dialect),
                additional_headers=_headers(self.api_key, self.dialect),
                max_size=MAX_FRAME,
                compression=None,
            ) as ws:
                duplex = self.kind == "duplex"
                if duplex:
                    await ws.send('{"type":"session.update","session":{}}')
                    while orjson.loads(await ws.recv()).get("type") != "session.created":
                        pass
                while not stop.is_set():
                    if duplex:
                        started = time.perf_counter()
                        await ws.send('{"type":"session.heartbeat"}')
                        while orjson.loads(await ws.recv()).get("type") != (
                            "session.heartbeat_ack"
                        ):
                            pass
                        self.heartbeat_ms.append((time.perf_counter() - started) * 1000.0)
                    started = time.perf_counter()
                    pong = await ws.ping()
                    await pong
                    self.ping_ms.append((time.perf_counter() - started) * 1000.0)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.interval_s)
                if duplex:
                    with contextlib.suppress(Exception):
                        await ws.send('{"type":"session.close"}')
        except Exception as exc:
            self.error = repr(exc)


class EchoServer:
    """``python -m omniduplex.bench.echo`` as a subprocess on a free port."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "omniduplex.bench.echo", "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            self.stop()
            raise RuntimeError("the echo server did not start")
        self.port = int(line[1])

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def echo_floor(
    connections: int, *, frame_bytes: int, chunk_ms: int, duration_s: float
) -> dict[str, Any]:
    """Round trips of ``frame_bytes`` text frames on ``connections`` echo connections."""
    server = EchoServer()
    rtts: list[float] = []
    payload = orjson.dumps(
        {"type": "input_audio_buffer.append", "audio": "A" * max(0, frame_bytes - 48)}
    ).decode()
    deadline = time.perf_counter() + duration_s

    async def one(index: int) -> None:
        async with ws_connect(server.url, max_size=MAX_FRAME, compression=None) as ws:
            await asyncio.sleep((index % 50) * chunk_ms / 50_000.0)
            next_at = time.perf_counter()
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                await ws.send(payload)
                await ws.recv()
                rtts.append((time.perf_counter() - started) * 1000.0)
                next_at += chunk_ms / 1000.0
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)

    try:
        results = await asyncio.gather(
            *(one(i) for i in range(connections)), return_exceptions=True
        )
    finally:
        server.stop()
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    return {"rtts": rtts, "errors": errors[:5], "connections": connections}
