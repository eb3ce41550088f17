"""Truncation math (wire.md 7.4): audio-text marks, duration only, neither; and the
validation of a truncate request against the item it targets."""

from __future__ import annotations

from typing import Any

import pytest

from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.items import (
    part_duration_ms,
    truncate_item,
    truncate_transcript,
    validate_truncate,
)

TEXT = "Hello there, how are you today?"  # 31 characters
MARKS = [
    {"text_chars": 6, "audio_end_ms": 400},  # "Hello "
    {"text_chars": 13, "audio_end_ms": 1000},  # "Hello there, "
    {"text_chars": 21, "audio_end_ms": 1600},  # "... how are "
]


@pytest.mark.parametrize(
    ("audio_end_ms", "duration_ms", "expected"),
    [
        (0, 3000, ""),
        (-5, 3000, ""),
        (200, 3000, "Hel"),  # 6 * 200/400 = 3
        (400, 3000, "Hello"),  # right-stripped
        (700, 3000, "Hello the"),  # 6 + floor(7 * 300/600) = 9
        (1000, 3000, "Hello there,"),
        (1600, 3000, "Hello there, how are"),
        # Past the last mark: on towards the full text at the audio's end.
        (2300, 3000, "Hello there, how are you t"),  # 21 + floor(10 * 700/1400) = 26
        (3000, 3000, TEXT),
        (9000, 3000, TEXT),
        # Unknown duration: everything after the last mark counts as heard.
        (1700, None, TEXT),
        (1599, None, "Hello there, how are"),  # 13 + floor(8 * 599/600) = 20
    ],
)
def test_marks(audio_end_ms: float, duration_ms: float | None, expected: str) -> None:
    assert truncate_transcript(TEXT, audio_end_ms, duration_ms, MARKS) == expected


def test_marks_are_sorted_clamped_and_filtered() -> None:
    messy: list[Any] = [
        {"text_chars": 21, "audio_end_ms": 1600},
        {"text_chars": 999, "audio_end_ms": 2000},  # beyond the text: clamped to its length
        "not a mark",
        {"text_chars": 4, "audio_end_ms": 1800},  # goes backwards in chars: clamped up
        {"text_chars": True, "audio_end_ms": 10},
        {"text_chars": 6, "audio_end_ms": 400},
        {"text_chars": 13, "audio_end_ms": float("nan")},
        {"text_chars": -1, "audio_end_ms": 50},
    ]
    assert truncate_transcript(TEXT, 400, None, messy) == "Hello"
    assert truncate_transcript(TEXT, 1700, None, messy) == "Hello there, how are"  # held at 21
    assert truncate_transcript(TEXT, 1900, None, messy) == "Hello there, how are you t"  # 21 + 5
    assert truncate_transcript(TEXT, 2000, None, messy) == TEXT


def test_duplicate_mark_times() -> None:
    marks = [{"text_chars": 6, "audio_end_ms": 400}, {"text_chars": 13, "audio_end_ms": 400}]
    assert truncate_transcript(TEXT, 400, None, marks) == "Hello"
    assert truncate_transcript(TEXT, 401, 1000, marks) == "Hello there,"


@pytest.mark.parametrize(
    ("audio_end_ms", "expected"),
    [
        (0, ""),
        (1, ""),  # floor(31 * 1/3100) = 0
        (1000, "Hello ther"),  # floor(31 * 1000/3100) = 10
        (1550, "Hello there, ho"),  # 15
        (3100, TEXT),
        (6000, TEXT),
    ],
)
def test_duration_only(audio_end_ms: float, expected: str) -> None:
    assert truncate_transcript(TEXT, audio_end_ms, 3100) == expected


def test_no_valid_marks_fall_back_to_duration() -> None:
    assert truncate_transcript(TEXT, 1000, 3100, []) == "Hello ther"
    assert truncate_transcript(TEXT, 1000, 3100, [{"text_chars": "x"}]) == "Hello ther"


def test_neither_marks_nor_duration() -> None:
    assert truncate_transcript(TEXT, 0) == ""
    assert truncate_transcript(TEXT, 1) == TEXT
    assert truncate_transcript(TEXT, 5, 0, None) == TEXT  # a zero duration is unknown
    assert truncate_transcript(TEXT, 5, None, [{"bad": 1}]) == TEXT
    assert truncate_transcript("", 500, 1000, MARKS) == ""
    assert truncate_transcript("   ", 5) == ""


# ---- validating a truncate request ------------------------------------------------------

ASSISTANT = {
    "id": "item_resp1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [
        {
            "type": "output_audio",
            "transcript": TEXT,
            "audio_duration_ms": 3000,
            "audio_text_marks": MARKS,
        },
        {"type": "output_text", "text": "side text"},
    ],
}


def test_valid_truncation_cuts_the_audio_transcript_only() -> None:
    validate_truncate(ASSISTANT, 0, 1600)
    cut = truncate_item(ASSISTANT, 0, 1000)
    assert cut["content"][0]["transcript"] == "Hello there,"
    assert cut["content"][0]["audio_text_marks"] == MARKS
    assert cut["content"][1] == ASSISTANT["content"][1]
    assert ASSISTANT["content"][0]["transcript"] == TEXT  # the input is left alone


def test_item_without_content_is_truncatable() -> None:
    item = {"type": "message", "role": "assistant", "content": []}
    assert truncate_item(item, 3, 100) == item


@pytest.mark.parametrize(
    ("item", "content_index", "audio_end_ms", "param"),
    [
        ({**ASSISTANT, "role": "user"}, 0, 10, "item_id"),
        ({**ASSISTANT, "type": "function_call"}, 0, 10, "item_id"),
        (ASSISTANT, 0, -1, "audio_end_ms"),
        (ASSISTANT, 2, 10, "content_index"),
        (ASSISTANT, 1, 10, "content_index"),  # a text part
        (ASSISTANT, 0, 3001, "audio_end_ms"),  # beyond the audio
        ({**ASSISTANT, "content": ["x"]}, 0, 10, "content_index"),
    ],
)
def test_refused_truncations(
    item: dict[str, Any], content_index: int, audio_end_ms: int, param: str
) -> None:
    with pytest.raises(RealtimeProtocolError) as caught:
        validate_truncate(item, content_index, audio_end_ms)
    assert (caught.value.code, caught.value.param) == ("bad_event", param)


def test_beta_audio_part_and_duration_spellings() -> None:
    item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "audio", "transcript": "abcd", "duration_ms": 400}],
    }
    assert truncate_item(item, 0, 200)["content"][0]["transcript"] == "ab"
    assert part_duration_ms({"audio_ms": 12}) == 12.0
    assert part_duration_ms({"audio_duration_ms": 0, "duration_ms": 5}) == 5.0
    assert part_duration_ms({"audio_duration_ms": "5"}) is None
