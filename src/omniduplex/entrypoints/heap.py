"""Giving the memory a session freed back to the system (issue 17, defect 4).

A session's buffers (its input audio, the frames queued for its socket, its replay
journal, the model's per-session state) are mostly allocations below glibc's mmap
threshold, spread over the arenas of the threads that made them (the event loop, the
engine's, the stage workers'). When the session ends they are freed to those arenas,
but glibc returns an arena's memory to the system only from its top, so after a load
the process keeps its peak: eight clients that stopped reading raised RSS by about
450 MB and none of it came back, with the Python heap flat.

``malloc_trim(0)`` gives back the free pages of every arena. ``HeapTrimmer.soon()`` asks
for one trim ``delay_s`` from now: sessions that end together share it, and by then the
engine's threads have freed their part of the session too. It runs in a worker thread,
so the event loop never waits on the arenas' locks. Where the C library has no
``malloc_trim`` (musl, macOS) it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def release_free_memory() -> bool:
    """Return the C heap's free pages to the system; whether anything was returned
    (False where there is no ``malloc_trim``)."""
    return _MALLOC_TRIM is not None and bool(_MALLOC_TRIM(0))


class HeapTrimmer:
    """At most one pending ``release_free_memory`` per ``delay_s`` (see the module
    docstring)."""

    def __init__(self, delay_s: float = 1.0) -> None:
        self.delay_s = delay_s
        self._pending: asyncio.Task[None] | None = None
        self._closed = False

    def soon(self) -> None:
        """Trim once ``delay_s`` from now, unless a trim is already due."""
        if self._closed or _MALLOC_TRIM is None:
            return
        if self._pending is not None and not self._pending.done():
            return
        self._pending = asyncio.get_running_loop().create_task(self._trim_later())

    async def _trim_later(self) -> None:
        await asyncio.sleep(self.delay_s)
        try:
            await asyncio.to_thread(release_free_memory)
        except Exception:  # never let housekeeping fail a caller
            log.debug("malloc_trim failed", exc_info=True)

    def close(self) -> None:
        """No more trims (the server is shutting down): a pending one is cancelled."""
        self._closed = True
        if self._pending is not None:
            self._pending.cancel()
