"""Decoding ``input_audio_buffer.append`` objects."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniduplex.protocol.realtime.audio_input import (
    RealtimeAudioAppend,
    decode_audio_append,
    looks_like_speech,
    speech_hint,
)
from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.formats import AudioFormat
from omniduplex.protocol.realtime.session import RealtimeInputDefaults

PCM_100MS_24K = base64.b64encode(b"\x01\x00" * 2400).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(100)).decode()
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(100)).decode()


def append(**fields: Any) -> dict[str, Any]:
    return {"type": "input_audio_buffer.append", "event_id": "evt_1", **fields}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def refused(obj: Any, code: str, defaults: RealtimeInputDefaults | None = None) -> None:
    with pytest.raises(RealtimeProtocolError) as excinfo:
        decode_audio_append(obj, defaults)
    assert excinfo.value.code == code, excinfo.value.message
    expected_id = obj.get("event_id") if isinstance(obj, dict) else None
    if not (isinstance(expected_id, str) and expected_id):
        expected_id = None
    assert excinfo.value.event_id == expected_id


class TestAccepted:
    def test_stock_pcm16_append(self) -> None:
        out = decode_audio_append(append(audio=PCM_100MS_24K))
        assert out == RealtimeAudioAppend(
            audio=b"\x01\x00" * 2400,
            format="pcm16",
            sample_rate_hz=24000,
            is_speech=None,
            hints={},
            duration_ms=100.0,
        )
        assert out.num_samples == 2400

    def test_delta_is_an_alias(self) -> None:
        assert decode_audio_append(append(delta=PCM_100MS_24K)).duration_ms == 100.0

    @pytest.mark.parametrize(
        ("fields", "fmt", "rate"),
        [
            ({"format": {"type": "audio/pcm", "rate": 16000}}, "pcm16", 16000),
            ({"format": {"type": "audio/pcmu"}}, "g711_ulaw", 8000),
            ({"input_audio_format": "g711_alaw"}, "g711_alaw", 8000),
            ({"format": "G711_ULAW", "sample_rate_hz": 16000}, "g711_ulaw", 16000),
            ({"format": "s16le", "sample_rate": 48000.0}, "pcm16", 48000),
            ({"format": "pcm_f32le"}, "pcm_f32le", 24000),
            (
                {"format": {"type": "audio/pcm", "rate": 16000}, "sample_rate_hz": 8000},
                "pcm16",
                8000,
            ),
            ({"format": "pcm16", "input_audio_format": "g711_ulaw"}, "pcm16", 24000),
        ],
    )
    def test_format_and_rate(self, fields: dict[str, Any], fmt: str, rate: int) -> None:
        out = decode_audio_append(append(audio=b64(bytes(32)), **fields))
        assert (out.format, out.sample_rate_hz) == (fmt, rate)

    def test_session_defaults_apply(self) -> None:
        session = RealtimeInputDefaults(input_format=AudioFormat("pcm16", 16000))
        out = decode_audio_append(append(audio=b64(bytes(320))), session)
        assert (out.format, out.sample_rate_hz, out.duration_ms) == ("pcm16", 16000, 10.0)
        # The append repeating the session's format keeps the session's rate.
        out = decode_audio_append(append(audio=b64(bytes(320)), format="pcm16"), session)
        assert out.sample_rate_hz == 16000
        out = decode_audio_append(append(audio=b64(bytes(320)), format="g711_ulaw"), session)
        assert out.sample_rate_hz == 8000

    def test_g711_session(self) -> None:
        session = RealtimeInputDefaults(input_format=AudioFormat("g711_alaw"))
        out = decode_audio_append(append(audio=b64(bytes(80))), session)
        assert (out.format, out.sample_rate_hz, out.duration_ms) == ("g711_alaw", 8000, 10.0)
        # An 8 kHz G.711 session says nothing about the rate of pcm16.
        out = decode_audio_append(append(audio=b64(bytes(480)), format="pcm16"), session)
        assert out.sample_rate_hz == 24000

    def test_f32_append(self) -> None:
        raw = np.full(160, 0.25, "<f4").tobytes()
        out = decode_audio_append(append(audio=b64(raw), format="pcm_f32le", sample_rate_hz=16000))
        assert out.duration_ms == 10.0

    def test_frames(self) -> None:
        out = decode_audio_append(
            append(audio=PCM_100MS_24K, video_frames=[JPEG, None, PNG], max_slice_nums=1)
        )
        assert out.video_frames == (JPEG, PNG)

    def test_frames_only(self) -> None:
        out = decode_audio_append(append(video_frames=[JPEG]))
        assert (out.audio, out.is_speech, out.duration_ms) == (b"", False, 0.0)

    def test_hints_are_copied(self) -> None:
        vad = {"is_speech": True, "speech_probability": 0.9}
        obj = append(audio=PCM_100MS_24K, vad=vad, transcript="hi", unrelated=1)
        out = decode_audio_append(obj)
        vad["is_speech"] = False
        assert out.hints == {
            "vad": {"is_speech": True, "speech_probability": 0.9},
            "transcript": "hi",
        }
        assert out.is_speech is True


class TestRefused:
    @pytest.mark.parametrize(
        "fields",
        [{}, {"audio": ""}, {"audio": None}, {"audio": 123}, {"audio": ["AAAA"]}, {"delta": ""}],
    )
    def test_missing_audio(self, fields: dict[str, Any]) -> None:
        refused(append(**fields), "bad_event")

    @pytest.mark.parametrize(
        "fields",
        [
            {"format": "pcm16", "audio": b64(b"\x00" * 3)},
            {"format": "pcm_f32le", "audio": b64(b"\x00" * 6)},
            {"format": "pcm_f32le", "audio": b64(np.array([0.0, np.nan], "<f4").tobytes())},
            {"format": "pcm_f32le", "audio": b64(np.array([np.inf], "<f4").tobytes())},
            {"audio": "not base64!"},
            {"audio": "AAA"},
            {"audio": "AAAA\n"},
        ],
    )
    def test_bad_audio(self, fields: dict[str, Any]) -> None:
        refused(append(**fields), "bad_audio")

    @pytest.mark.parametrize(
        "rate",
        [
            7999,
            192001,
            0,
            -16000,
            16000.5,
            True,
            False,
            "16000",
            float("inf"),
            float("nan"),
            10**400,
            [16000],
            {},
        ],
    )
    def test_bad_rate(self, rate: Any) -> None:
        refused(append(audio=PCM_100MS_24K, sample_rate_hz=rate), "bad_event")
        refused(append(audio=PCM_100MS_24K, sample_rate=rate), "bad_event")
        refused(
            append(audio=PCM_100MS_24K, format={"type": "audio/pcm", "rate": rate}), "bad_event"
        )

    @pytest.mark.parametrize(
        "fmt",
        ["wav", "opus", "", 16, ["pcm16"], {"type": "audio/mp3"}, {"rate": 16000}, "x" * 100_000],
    )
    def test_unsupported_format(self, fmt: Any) -> None:
        refused(append(audio=PCM_100MS_24K, format=fmt), "unsupported_audio_format")

    @pytest.mark.parametrize(
        "fields",
        [
            {"video_frames": JPEG},
            {"video_frames": [JPEG, JPEG, PNG]},
            {"video_frames": [""]},
            {"video_frames": [7]},
            {"video_frames": ["data:image/jpeg;base64," + JPEG]},
            {"video_frames": [base64.b64encode(b"GIF89a" + bytes(60)).decode()]},
            {"video_frames": [JPEG + "A" * 4_000_000]},
            {"video_frames": [JPEG], "max_slice_nums": 2},
            {"video_frames": [JPEG], "max_slice_nums": True},
            {"video_frames": [JPEG], "audio": PCM_100MS_24K, "max_slice_nums": "1"},
        ],
    )
    def test_invalid_video_frames(self, fields: dict[str, Any]) -> None:
        refused(append(**fields), "invalid_video_frames")

    @pytest.mark.parametrize("event_id", [None, "", 5, ["x"]])
    def test_event_id_only_when_a_non_empty_string(self, event_id: Any) -> None:
        refused({"type": "input_audio_buffer.append", "event_id": event_id}, "bad_event")

    @pytest.mark.parametrize("obj", [None, [], "append", 7])
    def test_not_an_object(self, obj: Any) -> None:
        refused(obj, "bad_event")

    def test_deeply_nested_hint(self) -> None:
        hint: Any = 0
        for _ in range(5000):
            hint = [hint]
        refused(append(audio=PCM_100MS_24K, vad=hint), "bad_event")


class TestSpeech:
    @pytest.mark.parametrize(
        ("hints", "verdict"),
        [
            ({}, None),
            ({"is_speech": False, "speech": True}, False),
            ({"is_speech": "yes", "speech": True}, True),
            ({"vad": {"is_speech": False}, "speech_probability": 0.9}, False),
            ({"vad": {"speech_probability": 0.7}}, True),
            ({"vad": {"probability": 0.2}}, False),
            ({"vad": {"probability": True}, "speech_probability": 0.5}, True),
            ({"speech_probability": 0.49}, False),
            ({"vad": "loud", "speech_probability": None}, None),
        ],
    )
    def test_speech_hint(self, hints: dict[str, Any], verdict: bool | None) -> None:
        assert speech_hint(hints) is verdict
        out = decode_audio_append(append(audio=PCM_100MS_24K, **hints))
        assert out.is_speech is verdict

    def test_looks_like_speech(self) -> None:
        assert not looks_like_speech(np.zeros(0, np.float32), 0.003)
        assert not looks_like_speech(np.zeros(160, np.float32), 0.0)
        assert not looks_like_speech(np.full(160, 0.002, np.float32), 0.003)
        assert looks_like_speech(np.full(160, -0.004, np.float32), 0.003)


# --------------------------------------------------------------------------- fuzzing

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
base64_text = st.binary(max_size=24).map(b64)
plausible = {
    "audio": base64_text | json_values,
    "delta": base64_text | json_values,
    "format": st.sampled_from(["pcm16", "g711_ulaw", "pcm_f32le", "wav", "audio/pcmu"])
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["audio/pcm", "audio/pcma"])}, optional={"rate": json_values}
    )
    | json_values,
    "input_audio_format": json_values,
    "sample_rate_hz": st.sampled_from([8000, 16000, 24000.0]) | json_values,
    "sample_rate": json_values,
    "video_frames": st.lists(st.sampled_from([JPEG, PNG, "", "AAAA"]) | json_values, max_size=3)
    | json_values,
    "max_slice_nums": json_values,
    "event_id": json_values,
    "vad": json_values,
    "is_speech": json_values,
    "speech_probability": json_values,
}
wire_objects = st.fixed_dictionaries({}, optional=plausible) | st.dictionaries(
    st.text(max_size=10), json_values, max_size=5
)


@settings(max_examples=400, deadline=None)
@given(wire_objects)
def test_arbitrary_objects_raise_only_protocol_errors(obj: dict[str, Any]) -> None:
    try:
        out = decode_audio_append(obj)
    except RealtimeProtocolError as exc:
        assert exc.code in {
            "bad_event",
            "bad_audio",
            "unsupported_audio_format",
            "invalid_video_frames",
        }
        event_id = obj.get("event_id")
        assert exc.event_id == (event_id if isinstance(event_id, str) and event_id else None)
    else:
        assert out.audio or out.video_frames
        assert 8000 <= out.sample_rate_hz <= 192000
