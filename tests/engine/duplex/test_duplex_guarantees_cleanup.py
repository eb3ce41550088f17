"""A closing session keeps its admission slot until its stage cleanup has finished."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from duplex_helpers import (
    EventReader,
    append,
    commit,
    deployment,
    is_type,
    sine_pcm16,
)

from omniduplex.engine.duplex.contracts import SessionStages, StageSubmission
from omniduplex.engine.duplex.errors import DuplexSessionError
from omniduplex.entrypoints.duplex_omni import DuplexOmni


class CleanupFailsOnceStagesDouble(SessionStages):
    """Test double: the real orchestrator port, except that the first ``cleanup`` raises
    (a stage that cannot be reached for a moment). Everything else is delegated."""

    def __init__(self, real: SessionStages) -> None:
        self.real = real
        self.cleanup_calls: list[list[str]] = []
        self.failures = 0

    @property
    def stage_count(self) -> int:
        return self.real.stage_count

    def submit(self, submission: StageSubmission) -> None:
        self.real.submit(submission)

    def abort_requests(self, request_ids: Sequence[str]) -> None:
        self.real.abort_requests(request_ids)

    async def cleanup(self, request_ids: Sequence[str]) -> None:
        self.cleanup_calls.append(list(request_ids))
        if self.failures == 0:
            self.failures += 1
            raise RuntimeError("stage unreachable (simulated)")
        await self.real.cleanup(request_ids)


async def test_a_failed_stage_cleanup_keeps_the_slot_until_the_reaper_retries_it():
    # The reaper's own timer is pushed out of the way: the test drives reap_expired().
    pipeline = deployment("loopback", max_sessions=2, reaper_interval_s=3600)
    async with DuplexOmni(pipeline) as omni:

        def install(orchestrator: Any) -> CleanupFailsOnceStagesDouble:
            double = CleanupFailsOnceStagesDouble(orchestrator.manager.session_stages)
            orchestrator.manager.session_stages = double
            return double

        double = await omni.engine.call(install)
        closing = await omni.open_session()
        other = await omni.open_session()
        reader = EventReader(closing)

        # Close while a paced response streams, so there is a stage request to clean up.
        closing.submit(append(sine_pcm16(2000)))
        closing.submit(commit())
        await reader.until(is_type("response.output_audio.delta"))
        await closing.close()
        rest = await reader.rest()

        # session.closed is emitted even though cleanup failed, and it is the last event.
        # Catches a terminal lost on the failure path (the client would wait forever).
        assert rest[-1].type == "session.closed"
        assert [e.type for e in reader.seen].count("session.closed") == 1
        assert double.failures == 1 and len(double.cleanup_calls) == 1
        assert double.cleanup_calls[0], "the close had a stage request to clean up"

        def slots(orchestrator: Any) -> tuple[int, bool, bool]:
            manager = orchestrator.manager
            return (
                manager.admitted,
                closing.session_id in manager._closing,
                closing.session_id in manager.runners,
            )

        # The slot stays taken: catches a manager that frees the slot before cleanup is
        # done (a new session could then be admitted onto resources still held).
        assert await omni.engine.call(slots) == (2, True, False)
        with pytest.raises(DuplexSessionError) as refused:
            await omni.open_session()
        assert refused.value.code == "resource_exhausted"
        assert refused.value.retryable
        # Refused again on a second try: nothing but the reaper releases it.
        with pytest.raises(DuplexSessionError):
            await omni.open_session()

        async def reap(orchestrator: Any) -> int:
            return await orchestrator.manager.reap_expired()

        # The reaper retries the cleanup; it succeeds and the slot is freed.
        assert await omni.engine.call(reap) == 1
        assert len(double.cleanup_calls) == 2
        assert double.cleanup_calls[1] == double.cleanup_calls[0]
        assert await omni.engine.call(slots) == (1, False, False)

        def held(orchestrator: Any) -> list[str]:
            return [rid for rid in double.cleanup_calls[0] if orchestrator.get_request(rid)]

        assert await omni.engine.call(held) == []

        third = await omni.open_session()
        assert (await EventReader(third).next()).type == "session.created"
        # The session that never closed was untouched by all of this.
        other_reader = EventReader(other)
        assert (await other_reader.next()).type == "session.created"
        other.submit(append(sine_pcm16(200)))
        other.submit(commit())
        done = (await other_reader.until(is_type("response.done")))[-1]
        assert done.response["status"] == "completed"


async def test_a_session_keeps_its_slot_while_its_runner_stops():
    # The window between the runner leaving the running set and its stage cleanup: a new
    # session opened there must be refused (the closing one still holds its resources).
    async with DuplexOmni(deployment("loopback", max_sessions=1)) as omni:
        closing = await omni.open_session()
        reader = EventReader(closing)
        closing.submit(append(sine_pcm16(2000)))
        closing.submit(commit())
        await reader.until(is_type("response.output_audio.delta"))

        async def open_while_closing(orchestrator: Any) -> tuple[list[int], str | None]:
            manager = orchestrator.manager
            task = asyncio.create_task(manager.close(closing.session_id))
            await asyncio.sleep(0)  # the close runs up to its first wait
            refusal = None
            try:
                await manager.open("duplex-probe", {})
            except DuplexSessionError as refused:
                refusal = refused.code
            counts = []
            while not task.done():
                counts.append(manager.admitted)
                await asyncio.sleep(0)
            return counts, refusal

        counts, refusal = await omni.engine.call(open_while_closing)
        assert refusal == "resource_exhausted"
        assert counts and set(counts) == {1}, counts
        assert (await reader.rest())[-1].type == "session.closed"
        reopened = await omni.open_session()
        assert (await EventReader(reopened).next()).type == "session.created"
