"""The bench process's own health while it measures."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from typing import Any

__all__ = ["ClientHealth"]


class ClientHealth:
    """The bench process's own stalls: event-loop lag (a 50 ms ticker's overshoot) and
    garbage-collector pauses. Large values mean the numbers measure the client."""

    def __init__(self) -> None:
        self.loop_lag_ms: list[float] = []
        self.gc_pause_ms: list[float] = []
        self._gc_started = 0.0

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            self.gc_pause_ms.append((time.perf_counter() - self._gc_started) * 1000.0)

    async def run(self, stop: asyncio.Event) -> None:
        gc.callbacks.append(self._on_gc)
        try:
            while not stop.is_set():
                due = time.perf_counter() + 0.05
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.05)
                self.loop_lag_ms.append(max(0.0, (time.perf_counter() - due) * 1000.0))
        finally:
            gc.callbacks.remove(self._on_gc)
