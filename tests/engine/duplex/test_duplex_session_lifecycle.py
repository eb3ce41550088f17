"""Session lifecycle edges: cancelled opens, shutdown with open sessions, turn-based use."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from duplex_helpers import TIMEOUT_S, EventReader, deployment

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni


async def admitted(omni: DuplexOmni) -> int:
    return await omni.engine.call(lambda orchestrator: orchestrator.manager.admitted)


async def test_a_cancelled_open_releases_its_admission_slot():
    async with DuplexOmni(deployment("loopback-fast", max_sessions=1)) as omni:
        opening = asyncio.create_task(omni.open_session())
        await asyncio.sleep(0)
        opening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await opening

        # Whether the cancel landed before or after the engine admitted the session, the
        # slot comes back (an open that completed for nobody is closed).
        async def released() -> None:
            while await admitted(omni) != 0:
                await asyncio.sleep(0.005)

        await asyncio.wait_for(released(), TIMEOUT_S)
        handle = await omni.open_session()
        assert (await EventReader(handle).next()).type == "session.created"


async def test_shutdown_closes_open_sessions_and_ends_their_streams():
    omni = DuplexOmni(deployment("loopback-fast"))
    await omni.start()
    handle = await omni.open_session()
    reader = EventReader(handle)
    await omni.shutdown()
    events = await reader.rest()
    assert [e.type for e in events] == ["session.created", "session.closed"]
    assert events[-1].reason == "shutdown"


async def test_a_turn_based_pipeline_is_refused():
    pipeline = load_deploy_config("loopback")
    turn_based = type(pipeline)(name="turn", stages=pipeline.stages)
    omni = DuplexOmni(turn_based)
    with pytest.raises(ValueError, match="not a duplex deployment"):
        await omni.start()
