"""``turn_detection`` validation and normalisation: server_vad, semantic_vad or null."""

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
from omniduplex.protocol.realtime.turn_detection import SEMANTIC_VAD_DEFAULTS

DEFAULTS = dict(TURN_DETECTION_DEFAULTS)
SEMANTIC = dict(SEMANTIC_VAD_DEFAULTS)

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
        "integral float durations are integers",
        {"type": "server_vad", "silence_duration_ms": 250.0},
        {**DEFAULTS, "silence_duration_ms": 250},
    ),
    ("interrupt_response true", {"type": "server_vad", "interrupt_response": True}, DEFAULTS),
    ("OpenAI idle timeout left unset", {"type": "server_vad", "idle_timeout_ms": None}, DEFAULTS),
    (
        "idle timeout at OpenAI's lower bound",
        {"type": "server_vad", "idle_timeout_ms": 5000},
        {**DEFAULTS, "idle_timeout_ms": 5000},
    ),
    (
        "idle timeout at OpenAI's upper bound, as a whole float",
        {"type": "server_vad", "idle_timeout_ms": 30000.0},
        {**DEFAULTS, "idle_timeout_ms": 30000},
    ),
    ("null values mean defaults", {"type": "server_vad", "threshold": None}, DEFAULTS),
    ("bare semantic_vad: eagerness auto", {"type": "semantic_vad"}, SEMANTIC),
    *[
        (
            f"semantic_vad eagerness {e}",
            {"type": "semantic_vad", "eagerness": e},
            {
                **SEMANTIC,
                "eagerness": e,
            },
        )
        for e in ("low", "medium", "high", "auto")
    ],
    (
        "semantic_vad as openai-agents sends it",
        {"type": "semantic_vad", "interrupt_response": True},
        SEMANTIC,
    ),
    (
        "semantic_vad with every key (pipecat, livekit)",
        {
            "type": "semantic_vad",
            "eagerness": "high",
            "create_response": False,
            "interrupt_response": True,
        },
        {**SEMANTIC, "eagerness": "high", "create_response": False},
    ),
    (
        "semantic_vad nulls mean defaults",
        {"type": "semantic_vad", "eagerness": None, "create_response": None},
        SEMANTIC,
    ),
    (
        "semantic_vad keeps VAD tuning",
        {"type": "semantic_vad", "threshold": 0.6, "prefix_padding_ms": 200},
        {**SEMANTIC, "threshold": 0.6, "prefix_padding_ms": 200},
    ),
]

# (label, raw, param): the whole object when it is unusable, else the one key.
REFUSED: list[tuple[str, Any, str]] = [
    ("unknown type", {"type": "vad"}, "turn_detection.type"),
    ("no type", {"threshold": 0.5}, "turn_detection.type"),
    ("type not a string", {"type": ["server_vad"]}, "turn_detection.type"),
    ("not an object", "server_vad", "turn_detection"),
    ("list", [{"type": "server_vad"}], "turn_detection"),
    ("false", False, "turn_detection"),
    ("unknown key", {"type": "server_vad", "eagerness": "low"}, "turn_detection.eagerness"),
    ("bad eagerness", {"type": "semantic_vad", "eagerness": "eager"}, "turn_detection.eagerness"),
    (
        "silence under semantic_vad",
        {"type": "semantic_vad", "silence_duration_ms": 500},
        "turn_detection.silence_duration_ms",
    ),
    (
        "semantic_vad interrupt_response false",
        {"type": "semantic_vad", "interrupt_response": False},
        "turn_detection.interrupt_response",
    ),
    (
        "semantic_vad idle timeout",
        {"type": "semantic_vad", "idle_timeout_ms": 1000},
        "turn_detection.idle_timeout_ms",
    ),
    (
        "semantic_vad idle timeout in server_vad's range (OpenAI: server_vad only)",
        {"type": "semantic_vad", "idle_timeout_ms": 5000},
        "turn_detection.idle_timeout_ms",
    ),
    ("threshold too low", {"type": "server_vad", "threshold": 0.15}, "turn_detection.threshold"),
    ("threshold zero", {"type": "server_vad", "threshold": 0}, "turn_detection.threshold"),
    ("threshold above one", {"type": "server_vad", "threshold": 1.01}, "turn_detection.threshold"),
    ("threshold bool", {"type": "server_vad", "threshold": True}, "turn_detection.threshold"),
    ("threshold text", {"type": "server_vad", "threshold": "0.5"}, "turn_detection.threshold"),
    (
        "threshold nan",
        {"type": "server_vad", "threshold": float("nan")},
        "turn_detection.threshold",
    ),
    (
        "fractional silence (OpenAI's durations are integers)",
        {"type": "server_vad", "silence_duration_ms": 250.5},
        "turn_detection.silence_duration_ms",
    ),
    (
        "negative silence",
        {"type": "server_vad", "silence_duration_ms": -1},
        "turn_detection.silence_duration_ms",
    ),
    (
        "infinite padding",
        {"type": "server_vad", "prefix_padding_ms": float("inf")},
        "turn_detection.prefix_padding_ms",
    ),
    (
        "min speech text",
        {"type": "server_vad", "min_speech_duration_ms": "96"},
        "turn_detection.min_speech_duration_ms",
    ),
    (
        "create_response not bool",
        {"type": "server_vad", "create_response": 1},
        "turn_detection.create_response",
    ),
    (
        "interrupt_response false",
        {"type": "server_vad", "interrupt_response": False},
        "turn_detection.interrupt_response",
    ),
    (
        "interrupt_response not bool",
        {"type": "server_vad", "interrupt_response": "yes"},
        "turn_detection.interrupt_response",
    ),
    (
        "idle timeout below OpenAI's 5 s",
        {"type": "server_vad", "idle_timeout_ms": 4999},
        "turn_detection.idle_timeout_ms",
    ),
    (
        "idle timeout above OpenAI's 30 s",
        {"type": "server_vad", "idle_timeout_ms": 30001},
        "turn_detection.idle_timeout_ms",
    ),
    (
        "idle timeout not an integer",
        {"type": "server_vad", "idle_timeout_ms": 6000.5},
        "turn_detection.idle_timeout_ms",
    ),
    (
        "idle timeout a string",
        {"type": "server_vad", "idle_timeout_ms": "6000"},
        "turn_detection.idle_timeout_ms",
    ),
    (
        "idle timeout a bool",
        {"type": "server_vad", "idle_timeout_ms": True},
        "turn_detection.idle_timeout_ms",
    ),
]


@pytest.mark.parametrize(("label", "raw", "expected"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted_and_normalised(label: str, raw: Any, expected: dict[str, Any] | None) -> None:
    assert validate_turn_detection(raw) == expected


@pytest.mark.parametrize(("label", "raw", "param"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_with_code_and_param(label: str, raw: Any, param: str) -> None:
    with pytest.raises(RealtimeProtocolError) as caught:
        validate_turn_detection(raw)
    assert caught.value.code == "unsupported_turn_detection"
    assert caught.value.param == param


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
        validate_turn_detection({"type": "vad"}, field="audio.input.turn_detection")
    assert "audio.input.turn_detection.type must be 'server_vad' or 'semantic_vad'" in (
        caught.value.message
    )
    assert caught.value.param == "audio.input.turn_detection.type"


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


def test_an_idle_timeout_refusal_names_the_ga_location() -> None:
    field = "audio.input.turn_detection"
    with pytest.raises(RealtimeProtocolError) as caught:
        validate_turn_detection({"type": "server_vad", "idle_timeout_ms": 100}, field=field)
    assert caught.value.param == "audio.input.turn_detection.idle_timeout_ms"
    assert "5000 to 30000" in caught.value.message
