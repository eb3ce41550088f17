"""DESIGN decision 5: ``playback_commit_policy`` is honoured as requested, through the
real engine. Under ``commit_all_on_done`` the whole reply is history once it is done: a
``playback.ack`` that does not ask to truncate leaves the stored item whole. Under
``ack_only`` history keeps what the client acknowledged having heard.

The reply is loopback's, unpaced, so it is whole and stored before the ack.
"""

from __future__ import annotations

import pytest
from duplex_helpers import EventReader, append, command, commit, deployment, is_type, sine_pcm16

from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import truncate_transcript

REPLY_MS = 1000
PLAYED_MS = 200
UNPACED = {"output_audio_pacing": "none", "turn_detection": None, "duplex_extensions": True}


async def _soft_ack_then_retrieve(policy: str | None, ack: dict) -> tuple[str, str, list]:
    """(what the reply said, the stored transcript after a non-truncating ack, marks)."""
    session = dict(UNPACED)
    if policy is not None:
        session["playback_commit_policy"] = policy
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session(session)
        reader = EventReader(handle)
        created = await reader.next()
        assert created.session["playback_commit_policy"] == (policy or "commit_all_on_done")
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
        handle.submit(command({"type": "playback.ack", "item_id": item_id, **ack}))
        await reader.until(is_type("playback.acknowledged"))
        handle.submit(command({"type": "conversation.item.retrieve", "item_id": item_id}))
        retrieved = (await reader.until(is_type("conversation.item.retrieved")))[-1]
        await handle.close()
        await reader.rest()
    assert not [e for e in reader.seen if e.type == "conversation.item.truncated"]
    return said, retrieved.item["content"][0]["transcript"], marks


@pytest.mark.parametrize(
    "ack", [{"played_ms": PLAYED_MS}, {"played_ms": PLAYED_MS, "truncate": False}]
)
@pytest.mark.parametrize("policy", [None, "commit_all_on_done"])
async def test_commit_all_on_done_keeps_the_whole_reply_after_a_soft_ack(policy, ack):
    said, stored, _ = await _soft_ack_then_retrieve(policy, ack)
    assert said
    assert stored == said


async def test_ack_only_keeps_what_the_ack_says_was_heard():
    said, stored, marks = await _soft_ack_then_retrieve("ack_only", {"played_ms": PLAYED_MS})
    assert stored == truncate_transcript(said, PLAYED_MS, REPLY_MS, marks)
    assert stored != said
