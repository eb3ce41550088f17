"""``playback.ack`` with ``truncate: true`` cuts the stored assistant item exactly where
the client says it stopped playing: ``committed_ms`` in ``playback.acknowledged`` and
the transcript that ``conversation.item.retrieve`` reads back, at positions well inside
the reply, on unit boundaries and past what was generated.

The reply is loopback's, unpaced, so it is whole and stored before the first ack; each
ack truncates from the full transcript, so one item serves every position.
"""

from __future__ import annotations

import pytest
from duplex_helpers import EventReader, append, command, commit, deployment, is_type, sine_pcm16

from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import truncate_transcript

REPLY_MS = 1000
UNPACED = {"output_audio_pacing": "none", "turn_detection": None, "duplex_extensions": True}


@pytest.mark.parametrize("played_ms", [200, 100, 150, 300, 0, 999, 1000, 5000])
async def test_a_truncating_ack_cuts_the_stored_item_at_exactly_the_played_position(
    played_ms: int,
) -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session(UNPACED)
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(REPLY_MS)))
        handle.submit(commit())
        done = (await reader.until(is_type("response.done")))[-1]
        ours = [e for e in reader.seen if getattr(e, "response_id", None) == done.response_id]
        said = "".join(e.delta for e in ours if e.type == "response.output_audio_transcript.delta")
        marks = [
            mark
            for e in ours
            if e.type == "response.output_audio.delta"
            for mark in e.metadata["audio_text_marks"]
        ]
        item_id = done.response["output"][0]["id"]
        handle.submit(
            command(
                {
                    "type": "playback.ack",
                    "item_id": item_id,
                    "played_ms": played_ms,
                    "truncate": True,
                }
            )
        )
        acked = (await reader.until(is_type("playback.acknowledged")))[-1]
        handle.submit(command({"type": "conversation.item.retrieve", "item_id": item_id}))
        retrieved = (await reader.until(is_type("conversation.item.retrieved")))[-1]
        await handle.close()

    heard_ms = min(played_ms, REPLY_MS)
    assert acked.event["committed_ms"] == heard_ms
    transcript = retrieved.item["content"][0]["transcript"]
    assert transcript == truncate_transcript(said, heard_ms, REPLY_MS, marks)
    # The marks are dense enough that 100 ms more or less would say something else.
    if 0 < heard_ms < REPLY_MS:
        later = truncate_transcript(said, heard_ms + 100, REPLY_MS, marks)
        assert later != transcript
