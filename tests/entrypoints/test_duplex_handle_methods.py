"""Every command has a convenience method on DuplexSessionHandle, validated like the wire."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import DuplexCommandError

TIMEOUT_S = 30.0


def tone(ms: int, rate: int = 16_000) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    return (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2").tobytes()


async def _until(events, wanted: str) -> list:
    seen = []
    while True:
        event = await asyncio.wait_for(anext(events), TIMEOUT_S)
        seen.append(event)
        if event.type == wanted:
            return seen


async def test_each_convenience_method_is_answered() -> None:
    async with DuplexOmni("loopback-fast") as omni:
        handle = await omni.open_session({})
        events = aiter(handle.events())
        await _until(events, "session.created")
        handle.heartbeat()
        await _until(events, "session.heartbeat_ack")
        handle.update_session(instructions=None)
        await _until(events, "session.updated")
        handle.append_audio(tone(400), sample_rate_hz=16_000)
        handle.commit(create_response=False)
        committed = await _until(events, "input_audio_buffer.committed")
        user_item = committed[-1].item_id
        handle.create_response()
        done = await _until(events, "response.done")
        response_id = done[-1].response_id
        handle.ack_playback(100, response_id=response_id)
        await _until(events, "playback.acknowledged")
        handle.truncate_item(f"item_{response_id}", 0)
        await _until(events, "conversation.item.truncated")
        handle.retrieve_item(user_item)
        await _until(events, "conversation.item.retrieved")
        handle.create_item(
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "hello"}],
            }
        )
        await _until(events, "conversation.item.done")
        handle.delete_item(user_item)
        await _until(events, "conversation.item.deleted")
        handle.append_text("echo this")
        await _until(events, "response.done")
        handle.clear_input()
        await _until(events, "input_audio_buffer.cleared")
        handle.cancel_input()
        await _until(events, "input_audio_buffer.cleared")
        handle.barge_in()
        await _until(events, "input_audio_buffer.cleared")
        handle.clear_output()
        await _until(events, "output_audio_buffer.cleared")
        handle.cancel_response()
        error = await _until(events, "error")
        assert error[-1].code == "response_cancel_not_active"
        handle.signal_turn("user_started")
        turn = await _until(events, "turn.event")
        assert turn[-1].turn_state == "user_speaking"
        with pytest.raises(DuplexCommandError) as refused:
            handle.append_audio(tone(10), sample_rate_hz=1000)
        assert refused.value.code == "bad_event"
        await handle.close()
        rest = [event async for event in events]
        assert rest[-1].type == "session.closed"
