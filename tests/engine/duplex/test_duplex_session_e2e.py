"""One duplex session end to end: DuplexOmni over the real engine and loopback plugin."""

from __future__ import annotations

import pytest
from duplex_helpers import EventReader, append, commit, deployment, response_done, sine_pcm16

from omniduplex.engine.duplex.session.runner import DuplexSessionRunner
from omniduplex.entrypoints.duplex_omni import DuplexOmni, DuplexSessionHandle


def index_of(types: list[str], wanted: str, start: int = 0) -> int:
    assert wanted in types[start:], f"{wanted} missing after position {start}: {types}"
    return types.index(wanted, start)


async def test_one_turn_streams_every_event_in_order_and_close_is_last():
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session({"output_modalities": ["audio"]})
        assert isinstance(handle, DuplexSessionHandle)
        sid = handle.session_id
        assert sid.startswith("duplex-") and len(sid) == len("duplex-") + 32
        assert omni.get_session(sid) is handle
        reader = EventReader(handle)

        handle.submit(append(sine_pcm16(500)))
        handle.submit(commit(create_response=True))
        events = await reader.until(response_done())
        types = [e.type for e in events]

        assert types[0] == "session.created"
        assert events[0].session["id"] == sid
        started = index_of(types, "input_audio_buffer.speech_started")
        stopped = index_of(types, "input_audio_buffer.speech_stopped", started)
        added = index_of(types, "conversation.item.added", stopped)
        committed = index_of(types, "input_audio_buffer.committed", added)
        created = index_of(types, "response.created", committed)
        first_delta = index_of(types, "response.output_audio.delta", created)
        assert types[-1] == "response.done"
        assert first_delta < len(types) - 1

        user_item = events[added].item
        assert user_item["role"] == "user"
        assert events[committed].item_id == user_item["id"]

        response_id = events[created].response_id
        done = events[-1]
        assert done.response_id == response_id
        assert done.response["status"] == "completed"
        deltas = [e for e in events if e.type == "response.output_audio.delta"]
        assert deltas and all(e.response_id == response_id for e in deltas)
        assert all(e.session_id == sid and e.epoch == 0 for e in events)

        await handle.close()
        rest = await reader.rest()
        assert rest[-1].type == "session.closed"
        assert [e.type for e in rest].count("session.closed") == 1
        assert omni.get_session(sid) is None


async def test_context_manager_closes_the_session_on_exit():
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        async with await omni.open_session() as handle:
            reader = EventReader(handle)
            assert (await reader.next()).type == "session.created"
        rest = await reader.rest()
        assert [e.type for e in rest] == ["session.closed"]
        assert rest[0].reason == "client_close"

        def sessions(orchestrator) -> dict[str, DuplexSessionRunner]:
            return dict(orchestrator.manager.runners)

        assert await omni.engine.call(sessions) == {}


async def test_a_closed_handle_refuses_commands():
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session()
        reader = EventReader(handle)
        await handle.close()
        await reader.rest()
        with pytest.raises(Exception, match="closed"):
            handle.submit(commit())
