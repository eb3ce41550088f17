"""semantic_vad's end-of-turn decision (``end_of_turn.decide``) and the detector using it.

The rule is tested on given scores (a neural model's raw score differs between CPUs and
library versions): finished, ambiguous and unfinished turns at each eagerness, and the
fallback without a language model, which must be the rule semantic_vad had before. The
detector is then driven with test doubles of the two models (named as doubles) to pin
that the wait the decision gives is the silence the turn ends at, and that speech
during the wait keeps the turn.
"""

from __future__ import annotations

import numpy as np
import pytest

from omniduplex.engine.duplex.session.end_of_turn import (
    AMBIGUOUS,
    AMBIGUOUS_SILENCE_MS,
    FINISHED,
    SEMANTIC_CANDIDATE_SILENCE_MS,
    SEMANTIC_FINISHED_THRESHOLD,
    SEMANTIC_MAX_SILENCE_MS,
    SEMANTIC_UNFINISHED_THRESHOLD,
    UNFINISHED,
    TurnInputs,
    decide,
)
from omniduplex.engine.duplex.session.turn_detection import SemanticPolicy, TurnDetector
from omniduplex.engine.duplex.vad import TranscriptCompletionModel, TurnCompletionModel

EAGERNESS = ("low", "medium", "high", "auto")
RATE = 16_000
# Sentences whose words are whole, and fragments that stop where no sentence ends, made
# from parts so the rule is seen on many, not on one hand-picked example.
SUBJECTS = ("I would like", "Could you help me", "We need", "Please find")
OBJECTS = ("a table for two", "the way to the station", "some milk", "a taxi at noon")
FRAGMENT_ENDS = ("to", "the", "for", "and", "because", "my", "a", "with")


def _whole() -> list[str]:
    return [f"{s} {o}." for s in SUBJECTS for o in OBJECTS]


def _fragments() -> list[str]:
    return [f"{s} {o} {end}." for s in SUBJECTS for o in OBJECTS for end in FRAGMENT_ENDS]


@pytest.mark.parametrize("eagerness", EAGERNESS)
def test_a_confident_finish_ends_at_the_short_silence(eagerness: str) -> None:
    for words in _whole():
        verdict = decide(TurnInputs(eagerness, 0.9, words, SEMANTIC_FINISHED_THRESHOLD + 0.1))
        assert verdict.verdict == FINISHED
        assert verdict.wait_ms == SEMANTIC_CANDIDATE_SILENCE_MS


@pytest.mark.parametrize("eagerness", EAGERNESS)
def test_an_ambiguous_turn_waits_longer_but_less_than_the_maximum(eagerness: str) -> None:
    between = (SEMANTIC_FINISHED_THRESHOLD + SEMANTIC_UNFINISHED_THRESHOLD) / 2
    cases = [
        (0.9, between),  # sounds done, the words may go on ("I would like a table")
        (0.2, SEMANTIC_FINISHED_THRESHOLD + 0.1),  # reads done, sounds unfinished
        (0.9, SEMANTIC_UNFINISHED_THRESHOLD / 2),  # reads unfinished, sounds done
    ]
    for prosody, semantic in cases:
        for words in _whole():
            verdict = decide(TurnInputs(eagerness, prosody, words, semantic))
            assert verdict.verdict == AMBIGUOUS
            assert verdict.wait_ms == AMBIGUOUS_SILENCE_MS[eagerness]
            assert verdict.wait_ms > SEMANTIC_CANDIDATE_SILENCE_MS
            assert verdict.wait_ms < SEMANTIC_MAX_SILENCE_MS[eagerness]


@pytest.mark.parametrize("eagerness", EAGERNESS)
def test_an_unfinished_turn_waits_up_to_the_eagerness_maximum(eagerness: str) -> None:
    longest = SEMANTIC_MAX_SILENCE_MS[eagerness]
    for words in _fragments():  # the words stop mid-sentence: no score overrides them
        for prosody, semantic in ((0.99, 0.99), (0.99, None), (0.1, 0.0)):
            verdict = decide(TurnInputs(eagerness, prosody, words, semantic))
            assert (verdict.verdict, verdict.wait_ms) == (UNFINISHED, longest)
    for words in _whole():  # neither the words' model nor the voice hears an end
        verdict = decide(TurnInputs(eagerness, 0.1, words, SEMANTIC_UNFINISHED_THRESHOLD / 2))
        assert (verdict.verdict, verdict.wait_ms) == (UNFINISHED, longest)


def test_waits_grow_as_eagerness_falls() -> None:
    for table in (AMBIGUOUS_SILENCE_MS, SEMANTIC_MAX_SILENCE_MS):
        assert table["high"] < table["medium"] < table["low"]
        assert table["auto"] == table["medium"]  # OpenAI: auto is medium


@pytest.mark.parametrize("eagerness", EAGERNESS)
def test_without_a_language_model_the_rule_is_the_one_before_it(eagerness: str) -> None:
    longest = SEMANTIC_MAX_SILENCE_MS[eagerness]
    short = SEMANTIC_CANDIDATE_SILENCE_MS
    for words in _whole():
        assert decide(TurnInputs(eagerness, 0.9, words)).wait_ms == short
        # The recogniser closed a sentence the audio calls unfinished: half the maximum.
        assert decide(TurnInputs(eagerness, 0.2, words)).wait_ms == longest // 2
        assert decide(TurnInputs(eagerness, 0.2, words.rstrip("."))).wait_ms == longest
    assert decide(TurnInputs(eagerness, 0.9, None)).wait_ms == short  # no transcript
    assert decide(TurnInputs(eagerness, 0.2, None)).wait_ms == longest


# ---- the detector ----------------------------------------------------------------------


class ProsodyDouble(TurnCompletionModel):
    """Test double of Smart Turn: a fixed probability."""

    name = "prosody-double"

    def __init__(self, probability: float) -> None:
        self.probability = probability

    def completion_probability(self, audio: np.ndarray, rate_hz: int) -> float:
        return self.probability


class WordsDouble(TranscriptCompletionModel):
    """Test double of the words model: a fixed probability, and the words it was asked."""

    name = "words-double"

    def __init__(self, probability: float | None) -> None:
        self.probability = probability
        self.asked: list[str] = []

    def finished_probability(self, words: str) -> float | None:
        self.asked.append(words)
        return self.probability


def _tone(ms: int) -> np.ndarray:
    t = np.arange(RATE * ms // 1000) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def _silence(ms: int) -> np.ndarray:
    return np.zeros(RATE * ms // 1000, dtype=np.float32)


def _stop_after(detector: TurnDetector, audio: np.ndarray, words: str) -> list[int]:
    """Feed ``audio`` in 20 ms pieces; where (ms into ``audio``) each turn stopped."""
    detector.words = (1, words)
    stops = []
    step = RATE // 50
    for start in range(0, audio.size, step):
        for event in detector.process(audio[start : start + step]):
            if event.kind == "stopped":
                stops.append((start + step) * 1000 // RATE)
    return stops


def _detector(prosody: float, semantic: float | None, eagerness: str) -> TurnDetector:
    policy = SemanticPolicy.for_eagerness(ProsodyDouble(prosody), eagerness, WordsDouble(semantic))
    detector = TurnDetector(rate_hz=RATE, semantic=policy)
    detector.process(_tone(600))
    detector.words = (0, "")
    detector.process(_silence(20))  # the speech frames set the hypothesis count
    return detector


@pytest.mark.parametrize("eagerness", EAGERNESS)
@pytest.mark.parametrize(
    ("prosody", "semantic", "verdict"),
    [(0.9, 0.9, FINISHED), (0.9, 0.1, AMBIGUOUS), (0.1, 0.001, UNFINISHED)],
)
def test_the_detector_ends_the_turn_at_the_decision_s_wait(
    eagerness: str, prosody: float, semantic: float, verdict: str
) -> None:
    detector = _detector(prosody, semantic, eagerness)
    longest = SEMANTIC_MAX_SILENCE_MS[eagerness]
    stops = _stop_after(detector, _silence(longest + 500), "I would like a table.")
    [decision] = detector.decisions
    assert decision.verdict == verdict
    assert decision.semantic == semantic
    assert decision.words == "I would like a table."
    expected = decide(TurnInputs(eagerness, prosody, decision.words, semantic)).wait_ms
    assert decision.wait_ms == expected
    # The turn ends the frame its silence reaches the wait (20 ms pieces, 20 ms frames).
    assert len(stops) == 1
    assert expected - 20 <= stops[0] + 20 <= expected + 40


def test_speech_during_an_ambiguous_wait_keeps_the_turn() -> None:
    detector = _detector(0.9, 0.1, "auto")
    wait = AMBIGUOUS_SILENCE_MS["auto"]
    audio = np.concatenate((_silence(wait - 300), _tone(600), _silence(100)))
    assert _stop_after(detector, audio, "I would like a table.") == []
    assert [d.verdict for d in detector.decisions] == [AMBIGUOUS]


def test_words_that_stop_mid_sentence_are_not_put_to_the_language_model() -> None:
    detector = _detector(0.9, 0.9, "auto")
    _stop_after(detector, _silence(300), "I would like a table for.")
    words_model = detector.semantic.words_model if detector.semantic else None
    assert isinstance(words_model, WordsDouble)
    assert words_model.asked == []
    assert detector.decisions[0].verdict == UNFINISHED
