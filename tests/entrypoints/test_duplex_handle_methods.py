"""Every command reaches a DuplexOmni session through the in-process client (InlineDuplexClient
over the session's handle), validated like the wire, and is answered."""

from __future__ import annotations

import asyncio

import numpy as np

from omniduplex.clients import InlineDuplexClient
from omniduplex.entrypoints.duplex_omni import DuplexOmni

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


async def test_each_command_sent_through_the_client_is_answered() -> None:
    async with DuplexOmni("loopback-fast") as omni:
        handle = await omni.open_session({})
        client = InlineDuplexClient.attach(handle, session={})
        events = client.events()  # subscribed before the reader ran: from session.created
        await _until(events, "session.created")
        await client.send({"type": "session.heartbeat"})
        await _until(events, "session.heartbeat_ack")
        await client.update_session(instructions=None)
        await _until(events, "session.updated")
        await client.append_audio(tone(400), sample_rate_hz=16_000)
        await client.commit(create_response=False)
        committed = await _until(events, "input_audio_buffer.committed")
        user_item = committed[-1].item_id
        await client.create_response()
        done = await _until(events, "response.done")
        response_id = done[-1].response_id
        await client.ack_playback(response_id, 100)
        await _until(events, "playback.acknowledged")
        await client.send(
            {
                "type": "conversation.item.truncate",
                "item_id": f"item_{response_id}",
                "content_index": 0,
                "audio_end_ms": 0,
            }
        )
        await _until(events, "conversation.item.truncated")
        await client.send({"type": "conversation.item.retrieve", "item_id": user_item})
        await _until(events, "conversation.item.retrieved")
        await client.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "hello"}],
                },
            }
        )
        await _until(events, "conversation.item.done")
        await client.send({"type": "conversation.item.delete", "item_id": user_item})
        await _until(events, "conversation.item.deleted")
        await client.send({"type": "input.text.append", "text": "echo this"})
        await _until(events, "response.done")
        await client.clear_input()
        await _until(events, "input_audio_buffer.cleared")
        await client.send({"type": "input.cancel"})
        await _until(events, "input_audio_buffer.cleared")
        await client.barge_in()
        await _until(events, "input_audio_buffer.cleared")
        await client.send({"type": "output_audio_buffer.clear"})
        await _until(events, "output_audio_buffer.cleared")
        await client.cancel_response()
        error = await _until(events, "error")
        assert error[-1].code == "response_cancel_not_active"
        await client.send({"type": "turn.signal", "event": "user_started", "payload": {}})
        turn = await _until(events, "turn.event")
        assert turn[-1].turn_state == "user_speaking"
        # Refused by the decoder (as on the wire), answered with a local error event.
        await client.append_audio(tone(10), sample_rate_hz=1000)
        refused = await _until(events, "error")
        assert refused[-1].code == "bad_event"
        await client.close(TIMEOUT_S)
        rest = [event async for event in events]
        assert rest[-1].type == "session.closed"
