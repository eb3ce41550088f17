"""``benchmarks/mcp_round_trip.py``'s requests: the held-out split stays what it was (a
run can be compared with an earlier one, and nobody tunes on it), shares nothing with the
tuning split, and every request is one the deployment can hear and answer with the tool."""

from __future__ import annotations

import re

from mcp_round_trip import PHRASINGS, PLACES, SPLITS, TOOL, draw_cases, every_sentence
from turn_taking_cases import VOICES

# The first held-out requests as they were measured: a change to the split shows here.
HELD_OUT_START = [
    ("Could you check what the weather is like in Denver?", "espeak-caribbean"),
    ("Could you check what the weather is like in Seattle?", "espeak-rp"),
    ("Check the weather over in Toronto.", "espeak-us"),
    ("Would you check the weather in Seattle today?", "piper"),
]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


def test_the_held_out_split_is_fixed() -> None:
    drawn = [(case["text"], case["voice"]) for case in draw_cases("held_out", 4)]
    assert drawn == HELD_OUT_START
    # Drawing the tuning split first, or more cases, changes none of them.
    draw_cases("tuning", 30)
    assert [(c["text"], c["voice"]) for c in draw_cases("held_out", 30)[:4]] == HELD_OUT_START


def test_the_splits_share_no_phrasing_and_no_place() -> None:
    assert not set(PHRASINGS["tuning"]) & set(PHRASINGS["held_out"])
    assert not set(PLACES["tuning"]) & set(PLACES["held_out"])
    tuning = {case["text"] for case in draw_cases("tuning", 40)}
    assert not tuning & {case["text"] for case in draw_cases("held_out", 40)}


def test_the_cases_span_voices_phrasings_and_places() -> None:
    for split in SPLITS:
        cases = draw_cases(split, 15)
        assert {case["voice"] for case in cases} == set(VOICES)
        texts = {case["text"] for case in cases}
        assert len({p for p in PHRASINGS[split] if any(_fits(p, t) for t in texts)}) >= 3
        assert len({p for p in PLACES[split] if any(p in t for t in texts)}) >= 3


def test_every_request_is_heard_and_calls_the_tool() -> None:
    grammar = set(every_sentence())
    for split in SPLITS:
        for case in draw_cases(split, 40):
            assert case["text"] in grammar  # the ASR is restricted to these sentences
            # The rule responder calls a tool when every word of its name was said.
            assert set(TOOL.split("_")) <= _words(case["text"])


def _fits(phrasing: str, text: str) -> bool:
    head, tail = phrasing.split("{place}")
    return text.startswith(head) and text.endswith(tail)
