"""Admission, backpressure, lease expiry and the bounded outbox, over the real engine."""

from __future__ import annotations

import dataclasses

import pytest
from duplex_helpers import (
    EventReader,
    append,
    commit,
    deployment,
    dispatch_together,
    is_type,
    response_done,
    sine_pcm16,
    wait_until,
)

from omniduplex.engine.duplex.capabilities import DuplexCapabilities
from omniduplex.engine.duplex.errors import DuplexSessionError
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.loopback.plugin import LoopbackDuplexPlugin


class ManualClock:
    """The lease clock; moved by hand, never by sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_admission_refuses_the_session_over_max_sessions():
    async with DuplexOmni(deployment("loopback-fast", max_sessions=2)) as omni:
        first = await omni.open_session()
        await omni.open_session()
        with pytest.raises(DuplexSessionError) as refused:
            await omni.open_session()
        assert refused.value.code == "resource_exhausted"
        assert refused.value.retryable

        # Closing one frees its slot once its stage cleanup is done.
        await first.close()
        third = await omni.open_session()
        assert (await EventReader(third).next()).type == "session.created"


async def test_an_append_over_the_pending_input_bound_is_refused_with_backpressure():
    pcm = sine_pcm16(500)  # 16 000 bytes
    async with (
        DuplexOmni(
            deployment("loopback-fast", max_pending_input_bytes_per_session=len(pcm) + 100)
        ) as omni,
        await omni.open_session() as handle,
    ):
        reader = EventReader(handle)
        # Both are admitted before either is decoded: the second exceeds the bound.
        await dispatch_together(
            omni, handle, append(pcm, event_id="evt_ok"), append(pcm, event_id="evt_over")
        )
        error = (await reader.until(is_type("error")))[-1]
        assert error.code == "input_backpressure"
        assert error.client_event_id == "evt_over"

        # The admitted append was kept and is answered.
        handle.submit(commit())
        done = (await reader.until(response_done()))[-1]
        assert done.response["status"] == "completed"


async def test_idle_lease_expiry_ends_the_session_with_session_expired():
    clock = ManualClock()
    async with DuplexOmni(deployment("loopback-fast", idle_ttl_s=60), clock=clock) as omni:
        handle = await omni.open_session()
        reader = EventReader(handle)
        assert (await reader.next()).type == "session.created"

        async def reap(orchestrator, now: float) -> int:
            return await orchestrator.manager.reap_expired(now=now)

        assert await omni.engine.call(lambda o: reap(o, clock.now + 59)) == 0
        assert await omni.engine.call(lambda o: reap(o, clock.now + 61)) == 1
        rest = await reader.rest()
        assert [e.type for e in rest] == ["session.expired"]
        assert rest[0].reason == "idle_ttl_expired"
        assert omni.get_session(handle.session_id) is None
        with pytest.raises(DuplexSessionError) as gone:
            await omni.resume_session(handle.session_id, handle.lease_generation)
        assert gone.value.code == "unknown_session"


async def test_detached_session_expires_after_its_disconnect_grace_unless_resumed():
    clock = ManualClock()
    async with DuplexOmni(deployment("loopback-fast", disconnect_grace_s=10), clock=clock) as omni:
        handle = await omni.open_session()
        reader = EventReader(handle)
        await reader.next()

        async def reap(orchestrator, now: float) -> int:
            return await orchestrator.manager.reap_expired(now=now)

        # Detach, then resume within the grace: the session lives on.
        generation = await omni.detach_session(handle.session_id)
        resumed = await omni.resume_session(handle.session_id, generation)
        assert resumed is handle and handle.lease_generation == generation + 1
        assert await omni.engine.call(lambda o: reap(o, clock.now + 11)) == 0

        # A stale generation loses the compare-and-swap.
        with pytest.raises(DuplexSessionError) as conflict:
            await omni.resume_session(handle.session_id, generation)
        assert conflict.value.code == "session_resume_conflict"

        await omni.detach_session(handle.session_id)
        assert await omni.engine.call(lambda o: reap(o, clock.now + 11)) == 1
        rest = await reader.rest()
        assert rest[-1].type == "session.expired"
        assert rest[-1].reason == "disconnect_grace_expired"


async def test_a_late_detach_of_an_old_lease_cannot_put_a_resumed_session_in_grace():
    # Connection A drops; before its handler gets to detach, connection B resumes. A's
    # detach names the lease it held and is refused: B's session never starts a grace.
    clock = ManualClock()
    async with DuplexOmni(deployment("loopback-fast", disconnect_grace_s=10), clock=clock) as omni:
        handle = await omni.open_session()
        reader = EventReader(handle)
        await reader.next()
        held_by_a = handle.lease_generation
        await omni.resume_session(handle.session_id, held_by_a)  # B takes lease + 1
        with pytest.raises(DuplexSessionError) as stale:
            await omni.detach_session(handle.session_id, held_by_a)
        assert stale.value.code == "session_resume_conflict"
        assert handle.attached and handle.lease_generation == held_by_a + 1

        async def reap(orchestrator, now: float) -> int:
            return await orchestrator.manager.reap_expired(now=now)

        assert await omni.engine.call(lambda o: reap(o, clock.now + 11)) == 0
        # The current lease's own detach still works, and its grace runs out as before.
        await omni.detach_session(handle.session_id, held_by_a + 1)
        assert await omni.engine.call(lambda o: reap(o, clock.now + 11)) == 1


async def test_a_consumer_that_stops_reading_is_detached_and_memory_stays_bounded():
    # A 3 s turn yields about 90 events, a 0.5 s turn under 40: the first overflows an
    # unread outbox, the second fits even if the reader falls behind a burst.
    bound = 48
    async with DuplexOmni(deployment("loopback-fast", max_outbox_events_per_session=bound)) as omni:
        handle = await omni.open_session()
        sid = handle.session_id
        # Nobody reads.
        handle.submit(append(sine_pcm16(3000)))
        handle.submit(commit())

        await wait_until(lambda: handle.overflowed)
        assert not handle.attached

        def engine_view(orchestrator) -> tuple[bool, bool]:
            session = orchestrator.manager.runners[sid].session
            return session.lease.detached, session.response is None

        # The detach reaches the engine, and the response runs to its end meanwhile.
        for _ in range(10_000):
            if await omni.engine.call(engine_view) == (True, True):
                break
        assert await omni.engine.call(engine_view) == (True, True)
        assert handle.pending_events <= bound
        assert handle.dropped_events > 0

        # The session survived: resume it, and it is served again.
        await omni.resume_session(sid, handle.lease_generation)
        assert handle.attached and not handle.overflowed
        reader = EventReader(handle)
        backlog = [await reader.next() for _ in range(handle.pending_events)]
        assert backlog[0].type == "session.created"
        # The gap is announced after what the outbox still held.
        assert backlog[-1].type == "session.resync_required"
        assert backlog[-1].reason == "outbox_overflow"
        assert "session.resync_required" not in [e.type for e in backlog[:-1]]
        handle.submit(append(sine_pcm16(500)))
        handle.submit(commit())
        done = (await reader.until(response_done()))[-1]
        assert done.response["status"] == "completed"
        await handle.close()
        rest = await reader.rest()
        assert rest[-1].type == "session.closed"


class NonResumableLoopbackTestPlugin(LoopbackDuplexPlugin):
    """Test plugin: loopback, declaring that its sessions cannot be resumed (as a model
    whose state lives only in a live stream, such as personaplex, does)."""

    plugin_id = "non-resumable-loopback-test"

    def capabilities(self, *, max_sessions: int) -> DuplexCapabilities:
        caps = super().capabilities(max_sessions=max_sessions)
        return dataclasses.replace(caps, supports_session_resume=False)


async def test_a_non_resumable_session_whose_consumer_stops_reading_is_closed():
    bound = 48
    pipeline = dataclasses.replace(
        deployment("loopback-fast", max_outbox_events_per_session=bound),
        duplex_plugin=f"{__name__}:{NonResumableLoopbackTestPlugin.__name__}",
    )
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session()
        sid = handle.session_id
        handle.submit(append(sine_pcm16(3000)))  # nobody reads
        handle.submit(commit())
        await wait_until(lambda: handle.overflowed)
        assert not handle.attached

        def gone(orchestrator) -> bool:
            return sid not in orchestrator.manager.runners

        for _ in range(10_000):
            if await omni.engine.call(gone):
                break
        assert await omni.engine.call(gone), "the session was not closed"
        assert handle.pending_events <= bound + 1  # the bound, and its session.closed
        reader = EventReader(handle)
        rest = await reader.rest()
        assert rest[-1].type == "session.closed"
        assert rest[-1].reason == "outbox_overflow"
        with pytest.raises(DuplexSessionError):
            await omni.resume_session(sid, handle.lease_generation)
