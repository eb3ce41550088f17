"""DESIGN decision 11: the session's ``idle_timeout_s`` drives its lease, bounded by the
deployment's maximum (``max_idle_timeout_s``), through the real engine and a hand-moved
lease clock (nothing sleeps)."""

from __future__ import annotations

from duplex_helpers import EventReader, command, deployment, is_type

from omniduplex.entrypoints.duplex_omni import DuplexOmni


class ManualClock:
    """The lease clock; moved by hand, never by sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _reap(omni, at: float) -> int:
    async def reap(orchestrator) -> int:
        return await orchestrator.manager.reap_expired(now=at)

    return await omni.engine.call(reap)


async def test_the_sessions_idle_timeout_drives_its_lease():
    # The deployment's own idle TTL is far longer: only the session's value can expire it.
    clock = ManualClock()
    pipeline = deployment("loopback-fast", idle_ttl_s=600, max_idle_timeout_s=3600)
    async with DuplexOmni(pipeline, clock=clock) as omni:
        handle = await omni.open_session({"idle_timeout_s": 20})
        reader = EventReader(handle)
        created = await reader.next()
        assert created.type == "session.created"
        assert created.session["idle_timeout_s"] == 20
        assert await _reap(omni, clock.now + 19) == 0
        assert await _reap(omni, clock.now + 21) == 1
        rest = await reader.rest()
        assert [e.type for e in rest] == ["session.expired"]


async def test_the_sessions_idle_timeout_is_bounded_by_the_deployments_maximum():
    clock = ManualClock()
    pipeline = deployment("loopback-fast", idle_ttl_s=20, max_idle_timeout_s=30)
    async with DuplexOmni(pipeline, clock=clock) as omni:
        handle = await omni.open_session({"idle_timeout_s": 1000})
        reader = EventReader(handle)
        created = await reader.next()
        assert created.session["idle_timeout_s"] == 30
        assert await _reap(omni, clock.now + 29) == 0
        assert await _reap(omni, clock.now + 31) == 1
        rest = await reader.rest()
        assert [e.type for e in rest] == ["session.expired"]


async def test_a_session_update_of_idle_timeout_drives_the_lease_from_then_on():
    clock = ManualClock()
    pipeline = deployment("loopback-fast", idle_ttl_s=600, max_idle_timeout_s=3600)
    async with DuplexOmni(pipeline, clock=clock) as omni:
        handle = await omni.open_session()
        reader = EventReader(handle)
        await reader.next()
        handle.submit(command({"type": "session.update", "session": {"idle_timeout_s": 20}}))
        updated = (await reader.until(is_type("session.updated")))[-1]
        assert updated.session["idle_timeout_s"] == 20
        assert await _reap(omni, clock.now + 19) == 0
        assert await _reap(omni, clock.now + 21) == 1
        rest = await reader.rest()
        assert [e.type for e in rest] == ["session.expired"]


async def test_a_session_update_of_idle_timeout_is_bounded_by_the_deployments_maximum():
    clock = ManualClock()
    pipeline = deployment("loopback-fast", idle_ttl_s=20, max_idle_timeout_s=30)
    async with DuplexOmni(pipeline, clock=clock) as omni:
        handle = await omni.open_session()
        reader = EventReader(handle)
        await reader.next()
        handle.submit(command({"type": "session.update", "session": {"idle_timeout_s": 1000}}))
        updated = (await reader.until(is_type("session.updated")))[-1]
        assert updated.session["idle_timeout_s"] == 30
        assert await _reap(omni, clock.now + 29) == 0
        assert await _reap(omni, clock.now + 31) == 1
        rest = await reader.rest()
        assert [e.type for e in rest] == ["session.expired"]
