"""``turn_detection`` validation and normalisation (wire.md 5.6): server_vad or null."""

from __future__ import annotations

from typing import Any

import pytest

from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.session import (
    TURN_DETECTION_DEFAULTS,
    check_overlap_policy,
    overlap_policy_for,
    turn_detection_of,
    validate_turn_detection,
)

DEFAULTS = dict(TURN_DETECTION_DEFAULTS)

ACCEPTED: list[tuple[str, Any, dict[str, Any] | None]] = [
    ("null turns detection off", None, None),
    ("bare server_vad gets every default", {"type": "server_vad"}, DEFAULTS),
    (
        "client values win over defaults",
        {
            "type": "server_vad",
            "threshold": 0.7,
            "silence_duration_ms": 800,
            "create_response": False,
        },
        {**DEFAULTS, "threshold": 0.7, "silence_duration_ms": 800, "create_response": False},
    ),
    (
        "threshold at the top of its range",
        {"type": "server_vad", "threshold": 1},
        {**DEFAULTS, "threshold": 1},
    ),
    (
        "integral float durations become ints",
        {"type": "server_vad", "prefix_padding_ms": 200.0, "min_speech_duration_ms": 0},
        {**DEFAULTS, "prefix_padding_ms": 200, "min_speech_duration_ms": 0},
    ),
    (
        "fractional durations are kept",
        {"type": "server_vad", "silence_duration_ms": 250.5},
        {**DEFAULTS, "silence_duration_ms": 250.5},
    ),
    ("interrupt_response true", {"type": "server_vad", "interrupt_response": True}, DEFAULTS),
    ("OpenAI idle timeout left unset", {"type": "server_vad", "idle_timeout_ms": None}, DEFAULTS),
    ("null values mean defaults", {"type": "server_vad", "threshold": None}, DEFAULTS),
]

REFUSED: list[tuple[str, Any]] = [
    ("semantic_vad", {"type": "semantic_vad", "eagerness": "auto"}),
    ("no type", {"threshold": 0.5}),
    ("type not a string", {"type": ["server_vad"]}),
    ("not an object", "server_vad"),
    ("list", [{"type": "server_vad"}]),
    ("false", False),
    ("unknown key", {"type": "server_vad", "eagerness": "low"}),
    ("threshold too low", {"type": "server_vad", "threshold": 0.15}),
    ("threshold zero", {"type": "server_vad", "threshold": 0}),
    ("threshold above one", {"type": "server_vad", "threshold": 1.01}),
    ("threshold bool", {"type": "server_vad", "threshold": True}),
    ("threshold text", {"type": "server_vad", "threshold": "0.5"}),
    ("threshold nan", {"type": "server_vad", "threshold": float("nan")}),
    ("negative silence", {"type": "server_vad", "silence_duration_ms": -1}),
    ("infinite padding", {"type": "server_vad", "prefix_padding_ms": float("inf")}),
    ("min speech text", {"type": "server_vad", "min_speech_duration_ms": "96"}),
    ("create_response not bool", {"type": "server_vad", "create_response": 1}),
    ("interrupt_response false", {"type": "server_vad", "interrupt_response": False}),
    ("interrupt_response not bool", {"type": "server_vad", "interrupt_response": "yes"}),
    ("idle timeout set", {"type": "server_vad", "idle_timeout_ms": 5000}),
]


@pytest.mark.parametrize(("label", "raw", "expected"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted_and_normalised(label: str, raw: Any, expected: dict[str, Any] | None) -> None:
    assert validate_turn_detection(raw) == expected


@pytest.mark.parametrize(("label", "raw"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_with_code_and_param(label: str, raw: Any) -> None:
    with pytest.raises(RealtimeProtocolError) as caught:
        validate_turn_detection(raw)
    assert caught.value.code == "unsupported_turn_detection"
    assert caught.value.param == "turn_detection"


def test_normalisation_is_idempotent_and_does_not_alias_its_input() -> None:
    raw = {"type": "server_vad", "threshold": 0.6}
    once = validate_turn_detection(raw)
    assert once is not None
    assert validate_turn_detection(once) == once
    once["threshold"] = 0.9
    assert raw["threshold"] == 0.6
    assert TURN_DETECTION_DEFAULTS["threshold"] == 0.5


def test_message_names_the_location() -> None:
    with pytest.raises(RealtimeProtocolError) as caught:
        validate_turn_detection({"type": "semantic_vad"}, field="audio.input.turn_detection")
    assert "audio.input.turn_detection.type must be 'server_vad'" in caught.value.message


def test_location_nested_wins_and_null_is_present() -> None:
    assert turn_detection_of({}) == (False, None, "turn_detection")
    assert turn_detection_of({"turn_detection": None}) == (True, None, "turn_detection")
    both = {"turn_detection": None, "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
    assert turn_detection_of(both) == (True, {"type": "server_vad"}, "audio.input.turn_detection")
    # An audio object without the key leaves the flat one in charge.
    flat = {"turn_detection": {"type": "server_vad"}, "audio": {"input": {"format": "pcm16"}}}
    assert turn_detection_of(flat) == (True, {"type": "server_vad"}, "turn_detection")


def test_overlap_policy_follows_turn_detection() -> None:
    assert overlap_policy_for({"type": "server_vad"}) == "barge_in_on_speech"
    assert overlap_policy_for(None) == "listen_only"


@pytest.mark.parametrize(
    ("session", "detection", "refused"),
    [
        ({"overlap_policy": "listen_only"}, {"type": "server_vad"}, True),
        ({"overlap_policy": "barge_in_on_speech"}, None, True),
        ({"extra_body": {"overlap_policy": "barge_in_on_speech"}}, None, True),
        ({"overlap_policy": "barge_in_on_speech"}, {"type": "server_vad"}, False),
        ({"overlap_policy": "listen_only"}, None, False),
        ({"overlap_policy": "something_else"}, None, False),
        ({}, {"type": "server_vad"}, False),
    ],
)
def test_overlap_policy_consistency(session: dict[str, Any], detection: Any, refused: bool) -> None:
    if refused:
        with pytest.raises(RealtimeProtocolError) as caught:
            check_overlap_policy(session, detection, present=True)
        assert caught.value.code == "unsupported_turn_detection"
    else:
        check_overlap_policy(session, detection, present=True)


def test_overlap_policy_without_turn_detection_is_engine_state() -> None:
    # The session's current detection is not in the patch: nothing to contradict here.
    check_overlap_policy({"overlap_policy": "barge_in_on_speech"}, None, present=False)
