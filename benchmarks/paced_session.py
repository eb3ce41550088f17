"""One Realtime session for the cascade benchmarks: audio out in real time, events in
with their arrival times."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import orjson

RATE = 24_000  # the wire's default pcm16 rate
CHUNK_MS = 32


class PacedSession:
    """Chunk k of ``send_pcm`` leaves at ``t0 + k * CHUNK_MS``; ``events`` holds every
    received event as ``(perf_counter seconds, event)``."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                self.events.append((time.perf_counter(), orjson.loads(raw)))
        except Exception:
            pass  # the socket ended: the events so far are what the run measured

    async def send_pcm(self, pcm: bytes) -> float:
        """Send pcm16 at ``RATE`` in real time; returns when its first chunk left."""
        step = RATE * 2 * CHUNK_MS // 1000
        t0 = time.perf_counter()
        for k, i in enumerate(range(0, len(pcm), step)):
            delay = t0 + k * CHUNK_MS / 1000 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            chunk = base64.b64encode(pcm[i : i + step]).decode()
            message = {"type": "input_audio_buffer.append", "audio": chunk}
            await self.ws.send(orjson.dumps(message).decode())
        return t0

    async def wait_for(
        self, kind: str, after: int, timeout_s: float = 30.0
    ) -> tuple[float, dict[str, Any]]:
        """The first ``kind`` event at index ``after`` or later, waiting for it."""
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            found = self.first(kind, after)
            if found is not None:
                return found
            await asyncio.sleep(0.002)
        raise TimeoutError(kind)

    def first(self, kind: str, after: int) -> tuple[float, dict[str, Any]] | None:
        return next(((t, e) for t, e in self.events[after:] if e["type"] == kind), None)
