"""Giving freed memory back to the system after sessions end (issue 17, defect 4). How
much comes back is measured by ``benchmarks/slow_readers.py``, not here."""

from __future__ import annotations

import asyncio
import ctypes.util

import pytest

from omniduplex.entrypoints.heap import HeapTrimmer, release_free_memory

GLIBC = ctypes.util.find_library("c") == "libc.so.6"


def test_release_free_memory_answers_on_any_libc() -> None:
    assert isinstance(release_free_memory(), bool)


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
async def test_sessions_ending_together_share_one_trim_and_none_follows_close() -> None:
    trimmer = HeapTrimmer(delay_s=0.01)
    trimmer.soon()
    first = trimmer._pending
    trimmer.soon()
    assert trimmer._pending is first  # one trim for both
    assert first is not None
    await asyncio.wait_for(first, 10)  # a hang guard only
    trimmer.soon()  # a later end gets a trim of its own
    second = trimmer._pending
    assert second is not None and second is not first
    trimmer.close()  # the pending trim is cancelled, and no later end schedules one
    trimmer.soon()
    assert trimmer._pending is second
    with pytest.raises(asyncio.CancelledError):
        await second
