"""Whole hypotheses become append-only transcript deltas (local agreement of two)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from omniduplex.engine.duplex.session.live_transcript import TranscriptDeltas


def test_a_word_goes_out_once_two_hypotheses_agree_on_it() -> None:
    deltas = TranscriptDeltas()
    assert deltas.partial("what") == ""  # one hypothesis settles nothing
    assert deltas.partial("what time") == "what"
    assert deltas.partial("what time is") == " time"
    assert deltas.partial("what time is it") == " is"
    assert deltas.final("what time is it") == " it"
    assert deltas.text == "what time is it"


def test_a_revised_word_is_held_back_until_it_settles() -> None:
    deltas = TranscriptDeltas()
    deltas.partial("what dime")
    assert deltas.partial("what time") == "what"  # "dime" became "time": not settled
    assert deltas.partial("what time is") == " time"


def test_what_went_out_is_never_taken_back() -> None:
    deltas = TranscriptDeltas()
    deltas.partial("hello there")
    assert deltas.partial("hello there") == "hello there"
    # A later hypothesis that disagrees with sent words lets nothing more out ...
    assert deltas.partial("yellow there friend") == ""
    assert deltas.partial("yellow there friend") == ""
    # ... and the final transcript (authoritative, sent whole) adds no delta either.
    assert deltas.final("yellow there friend") == ""
    assert deltas.text == "hello there"


_WORDS = st.lists(st.sampled_from(["a", "b", "c", "dd"]), max_size=6).map(" ".join)


@given(st.lists(_WORDS, max_size=8), _WORDS)
def test_deltas_always_concatenate_to_a_prefix_of_what_was_heard(
    partials: list[str], final: str
) -> None:
    deltas = TranscriptDeltas()
    sent = "".join(deltas.partial(p) for p in partials)
    assert sent == deltas.text
    sent += deltas.final(final)
    assert sent == deltas.text
    # Sent text is a word prefix of some hypothesis; if it fits the final, it becomes it.
    if final.split()[: len(sent.split())] == sent.split():
        assert sent == " ".join(final.split())
