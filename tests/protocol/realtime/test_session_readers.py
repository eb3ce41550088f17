"""Session-object readers in both dialects, whole-object validation, negotiated defaults."""

from __future__ import annotations

from typing import Any

import pytest

from omniduplex.protocol.realtime.capabilities import (
    PERMISSIVE_CAPABILITIES,
    RealtimeProtocolCapabilities,
)
from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.formats import (
    G711_ALAW,
    G711_ULAW,
    PCM16,
    PCM_F32LE,
    WAV,
    AudioFormat,
)
from omniduplex.protocol.realtime.session import (
    RealtimeInputDefaults,
    next_input_defaults,
    read_input_format,
    read_input_rate,
    read_instructions,
    read_max_output_tokens,
    read_output_format,
    read_output_modalities,
    read_output_rate,
    read_speed,
    read_temperature,
    read_voice,
    session_of_update,
    validate_session,
)

VALIDATING = RealtimeProtocolCapabilities(validate_turn_detection=True)


@pytest.mark.parametrize(
    ("session", "expected"),
    [
        ({}, None),
        ({"input_audio_format": "pcm16"}, AudioFormat(PCM16)),
        ({"input_audio_format": "g711_ulaw"}, AudioFormat(G711_ULAW)),
        ({"input_audio_format": "pcm_f32le"}, AudioFormat(PCM_F32LE)),
        (
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}},
            AudioFormat(PCM16, 24000),
        ),
        ({"audio": {"input": {"format": {"type": "audio/pcmu"}}}}, AudioFormat(G711_ULAW)),
        ({"audio": {"input": {"format": {"type": "audio/pcma"}}}}, AudioFormat(G711_ALAW)),
        ({"audio": {"input": {"format": "S16LE"}}}, AudioFormat(PCM16)),
        # The flat field wins.
        (
            {"input_audio_format": "g711_alaw", "audio": {"input": {"format": "pcm16"}}},
            AudioFormat(G711_ALAW),
        ),
        ({"input_audio_format": None, "audio": {"input": {"format": "pcm16"}}}, AudioFormat(PCM16)),
        # Both spellings of the same format: the GA object supplies the rate.
        (
            {
                "input_audio_format": "pcm16",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}},
            },
            AudioFormat(PCM16, 16000),
        ),
        (
            {
                "input_audio_format": "g711_ulaw",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}},
            },
            AudioFormat(G711_ULAW),
        ),
        (
            {"input_audio_format": "pcm16", "audio": {"input": {"format": "opus"}}},
            AudioFormat(PCM16),
        ),
    ],
)
def test_read_input_format(session: dict[str, Any], expected: AudioFormat | None) -> None:
    assert read_input_format(session) == expected


@pytest.mark.parametrize(
    ("session", "expected"),
    [
        ({}, None),
        ({"output_audio_format": "pcm16"}, AudioFormat(PCM16)),
        ({"response_format": "pcm"}, AudioFormat(PCM16)),
        ({"response_format": "wav"}, AudioFormat(WAV)),
        ({"output_audio_format": "g711_ulaw", "response_format": "wav"}, AudioFormat(G711_ULAW)),
        (
            {"audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            AudioFormat(PCM16, 16000),
        ),
    ],
)
def test_read_output_format(session: dict[str, Any], expected: AudioFormat | None) -> None:
    assert read_output_format(session) == expected


def test_format_refusals_name_the_field() -> None:
    cases = [
        ({"input_audio_format": "wav"}, read_input_format, "input_audio_format"),
        (
            {"audio": {"input": {"format": {"type": "audio/opus"}}}},
            read_input_format,
            "audio.input.format",
        ),
        ({"output_audio_format": "pcm_f32le"}, read_output_format, "output_audio_format"),
        ({"audio": {"output": {"format": 16}}}, read_output_format, "audio.output.format"),
    ]
    for session, reader, param in cases:
        with pytest.raises(RealtimeProtocolError) as caught:
            reader(session)
        assert (caught.value.code, caught.value.param) == ("unsupported_audio_format", param)


def test_rates() -> None:
    assert read_input_rate({"sample_rate_hz": 16000}) == 16000
    assert read_input_rate({"sample_rate": 48000.0}) == 48000
    assert read_input_rate({"audio": {"input": {"sample_rate_hz": 8000}}}) == 8000
    assert read_input_rate({}) is None
    assert read_output_rate({"audio": {"output": {"sample_rate": 22050}}}) == 22050
    for bad in (7999, 192_001, 16000.5, "16000", True, 10**400):
        with pytest.raises(RealtimeProtocolError) as caught:
            read_input_rate({"sample_rate_hz": bad})
        assert (caught.value.code, caught.value.param) == ("bad_event", "sample_rate_hz")


def test_other_fields_in_both_spellings() -> None:
    assert read_voice({"voice": "alloy"}) == "alloy"
    assert read_voice({"audio": {"output": {"voice": "marin"}}}) == "marin"
    assert read_voice({"audio": {"output": {"voice": {"id": "voice_1"}}}}) == "voice_1"
    assert read_voice({"voice": ""}) is None
    assert read_output_modalities({"modalities": ["text", "audio", "text"]}) == ("text", "audio")
    assert read_output_modalities({"output_modalities": ["audio"]}) == ("audio",)
    assert read_output_modalities({"modalities": ["text"], "output_modalities": ["audio"]}) == (
        "text",
    )
    assert read_max_output_tokens({"max_response_output_tokens": "inf"}) == "inf"
    assert read_max_output_tokens({"max_output_tokens": 4096}) == 4096
    assert read_max_output_tokens({"max_tokens": "Unlimited"}) == "inf"
    assert read_max_output_tokens({}) is None
    assert read_instructions({"instructions": ""}) == ""
    assert read_temperature({"temperature": 1}) == 1.0
    assert read_speed({"audio": {"output": {"speed": 1.5}}}) == 1.5


@pytest.mark.parametrize(
    ("reader", "session"),
    [
        (read_voice, {"voice": ["alloy"]}),
        (read_voice, {"audio": {"output": {"voice": {}}}}),
        (read_voice, {"voice": "v" * 1000}),
        (read_output_modalities, {"modalities": []}),
        (read_output_modalities, {"modalities": "audio"}),
        (read_output_modalities, {"output_modalities": [["audio"]]}),
        (read_max_output_tokens, {"max_output_tokens": 0}),
        (read_max_output_tokens, {"max_output_tokens": 1.5}),
        (read_max_output_tokens, {"max_output_tokens": True}),
        (read_max_output_tokens, {"max_output_tokens": "lots"}),
        (read_instructions, {"instructions": 1}),
        (read_temperature, {"temperature": -0.1}),
        (read_temperature, {"temperature": float("inf")}),
        (read_speed, {"speed": 0}),
        (read_speed, {"speed": "fast"}),
    ],
)
def test_field_type_errors_are_bad_event(reader: Any, session: dict[str, Any]) -> None:
    with pytest.raises(RealtimeProtocolError) as caught:
        reader(session)
    assert caught.value.code == "bad_event"
    assert caught.value.param


def test_session_of_update() -> None:
    assert session_of_update({"type": "session.update", "session": {"voice": "x"}}) == {
        "voice": "x"
    }
    assert session_of_update({"type": "session.update", "event_id": "e", "voice": "x"}) == {
        "voice": "x"
    }
    with pytest.raises(RealtimeProtocolError):
        session_of_update({"type": "session.update", "session": None})


def test_validate_session_returns_normalised_turn_detection() -> None:
    assert validate_session({}, VALIDATING) is None
    assert validate_session({"turn_detection": None}, VALIDATING) is None
    normalised = validate_session(
        {"audio": {"input": {"turn_detection": {"type": "server_vad"}}}}, VALIDATING
    )
    assert normalised is not None and normalised["silence_duration_ms"] == 500
    # Permissive: passed through, not normalised.
    assert (
        validate_session({"turn_detection": {"type": "semantic_vad"}}, PERMISSIVE_CAPABILITIES)
        is None
    )


def test_validate_session_accepts_a_full_ga_session() -> None:
    validate_session(
        {
            "type": "realtime",
            "model": "gpt-realtime",
            "output_modalities": ["audio"],
            "instructions": "x",
            "max_output_tokens": "inf",
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None},
                "output": {"format": {"type": "audio/pcmu"}, "voice": "marin", "speed": 1.0},
            },
            "tools": [],
            "tracing": None,
            "overlap_silence_rms": 0.01,
            "extra_body": {"auto_response": True},
            "ref_audio": "data:audio/wav;base64,UklGRg==",
        },
        VALIDATING,
    )


# ---- negotiated formats -----------------------------------------------------------------


def test_defaults_are_openai_pcm16_at_24khz() -> None:
    defaults = RealtimeInputDefaults()
    assert defaults.input_format == AudioFormat(PCM16, 24000)
    assert defaults.input_sample_rate_hz == 24000
    assert next_input_defaults(None, {}) == defaults


def test_next_defaults_from_a_beta_session() -> None:
    defaults = next_input_defaults(
        None, {"input_audio_format": "g711_ulaw", "output_audio_format": "g711_alaw"}
    )
    assert defaults.input_format == AudioFormat(G711_ULAW)
    assert defaults.input_sample_rate_hz == 8000
    assert defaults.output_format == AudioFormat(G711_ALAW)


def test_next_defaults_from_a_ga_session() -> None:
    session = {
        "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 16000}},
            "output": {"format": {"type": "audio/pcm"}, "sample_rate_hz": 48000},
        }
    }
    defaults = next_input_defaults(None, session)
    assert defaults.input_format == AudioFormat(PCM16, 16000)
    assert defaults.output_format == AudioFormat(PCM16, 48000)


def test_new_format_does_not_inherit_the_old_rate_but_a_lone_rate_keeps_the_format() -> None:
    at_16k = next_input_defaults(None, {"input_audio_format": "pcm16", "sample_rate_hz": 16000})
    assert at_16k.input_format == AudioFormat(PCM16, 16000)
    ulaw = next_input_defaults(at_16k, {"input_audio_format": "ulaw"})
    assert ulaw.input_sample_rate_hz == 8000
    faster = next_input_defaults(at_16k, {"sample_rate_hz": 48000})
    assert faster.input_format == AudioFormat(PCM16, 48000)


def test_invalid_fields_keep_previous_values() -> None:
    start = next_input_defaults(
        None, {"input_audio_format": "g711_alaw", "overlap_silence_rms": 0.01}
    )
    after = next_input_defaults(
        start,
        {
            "input_audio_format": "opus",
            "output_audio_format": 3,
            "sample_rate_hz": 5,
            "overlap_silence_rms": -2,
        },
    )
    assert after == start
    assert start.overlap_silence_rms == 0.01
    assert (
        next_input_defaults(
            start, {"extra_body": {"overlap_silence_rms": 0.02}}
        ).overlap_silence_rms
        == 0.02
    )
    assert next_input_defaults(start, "not a session") == start  # type: ignore[arg-type]
