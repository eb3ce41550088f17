"""Audio codecs, resampling and the per-session converters."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from omniduplex.protocol.realtime import audio
from omniduplex.protocol.realtime.audio import (
    InputAudioConverter,
    OutputAudioEncoder,
    StreamingResampler,
)
from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.formats import AudioFormat

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

ALL_INT16 = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = bytes(range(256))


def sine(freq: float, rate: int, seconds: float = 1.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.argmax(spectrum) * rate / x.size)


def level_db(x: np.ndarray) -> float:
    core = x[x.size // 10 : -x.size // 10]  # skip the filter's edges
    return 20 * np.log10(np.sqrt(np.mean(core.astype(np.float64) ** 2)))


def bad_audio(excinfo: pytest.ExceptionInfo[RealtimeProtocolError]) -> None:
    assert excinfo.value.code == "bad_audio"


# --------------------------------------------------------------------------- G.711


class TestG711BitExact:
    def test_ulaw_encode_matches_audioop(self) -> None:
        ours = audio.int16_to_ulaw(ALL_INT16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ref = audioop.lin2ulaw(ALL_INT16.astype("<i2").tobytes(), 2)
        assert ours == ref

    def test_alaw_encode_matches_audioop(self) -> None:
        ours = audio.int16_to_alaw(ALL_INT16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ref = audioop.lin2alaw(ALL_INT16.astype("<i2").tobytes(), 2)
        assert ours == ref

    def test_ulaw_decode_matches_audioop(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ref = np.frombuffer(audioop.ulaw2lin(ALL_CODES, 2), dtype="<i2")
        np.testing.assert_array_equal(audio.ulaw_to_int16(ALL_CODES), ref)
        np.testing.assert_array_equal(audio.decode_ulaw(ALL_CODES), ref / 32768.0)

    def test_alaw_decode_matches_audioop(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ref = np.frombuffer(audioop.alaw2lin(ALL_CODES, 2), dtype="<i2")
        np.testing.assert_array_equal(audio.alaw_to_int16(ALL_CODES), ref)
        np.testing.assert_array_equal(audio.decode_alaw(ALL_CODES), ref / 32768.0)

    @pytest.mark.parametrize(
        ("encode", "decode"),
        [(audio.encode_ulaw, audio.decode_ulaw), (audio.encode_alaw, audio.decode_alaw)],
    )
    def test_float_round_trip_is_close(self, encode, decode) -> None:
        x = sine(440, 8000, 0.25)
        y = decode(encode(x))
        assert y.dtype == np.float32
        snr = 10 * np.log10(np.sum(x**2) / np.sum((x - y) ** 2))
        assert snr > 30


# --------------------------------------------------------------------------- PCM, f32


class TestLinear:
    def test_pcm16_round_trip_is_exact_for_every_int16(self) -> None:
        raw = ALL_INT16.astype("<i2").tobytes()
        decoded = audio.decode_pcm16(raw)
        assert decoded.dtype == np.float32
        assert decoded.min() == -1.0 and decoded.max() < 1.0
        assert audio.encode_pcm16(decoded) == raw

    def test_encode_pcm16_clips_rounds_and_silences_nan(self) -> None:
        x = np.array([2.0, -2.0, 0.5 / 32768, 1.4 / 32768, np.nan, -np.inf], np.float32)
        out = np.frombuffer(audio.encode_pcm16(x), dtype="<i2")
        assert out.tolist() == [32767, -32768, 0, 1, 0, -32768]

    def test_odd_pcm16_is_bad_audio(self) -> None:
        with pytest.raises(RealtimeProtocolError) as excinfo:
            audio.decode_pcm16(b"\x00\x01\x02")
        bad_audio(excinfo)

    def test_f32_round_trip(self) -> None:
        x = sine(1000, 16000, 0.1)
        y = audio.decode_f32le(audio.encode_f32le(x))
        np.testing.assert_array_equal(x, y)
        y[0] = 1.0  # decoded arrays are the caller's to modify

    @pytest.mark.parametrize("raw", [b"\x00" * 5, b"\x00" * 7])
    def test_f32_partial_sample_is_bad_audio(self, raw: bytes) -> None:
        with pytest.raises(RealtimeProtocolError) as excinfo:
            audio.decode_f32le(raw)
        bad_audio(excinfo)

    @pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
    def test_f32_non_finite_is_bad_audio(self, value: float) -> None:
        raw = np.array([0.1, value, 0.2], "<f4").tobytes()
        for check in (audio.decode_f32le, lambda r: audio.validate_raw_audio(r, "pcm_f32le")):
            with pytest.raises(RealtimeProtocolError) as excinfo:
                check(raw)
            bad_audio(excinfo)

    def test_int16_arrays_are_scaled_when_treated_as_float(self) -> None:
        out = audio.as_float32(np.array([16384, -32768], np.int16))
        assert out.tolist() == [0.5, -1.0]

    def test_decode_raw_and_encode_audio_dispatch_on_spelling(self) -> None:
        x = sine(300, 8000, 0.05)
        for spelling in ("pcm16", "s16le", "g711_ulaw", "audio/pcma", "pcm_f32le"):
            raw = audio.encode_audio(x, spelling, 8000)
            y = audio.decode_raw(raw, spelling)
            assert np.max(np.abs(x - y)) < 0.02
        with pytest.raises(RealtimeProtocolError) as excinfo:
            audio.decode_raw(b"", "opus")
        assert excinfo.value.code == "unsupported_audio_format"


# --------------------------------------------------------------------------- WAV


def wav_bytes(
    data: bytes, *, tag: int = 1, channels: int = 1, rate: int = 16000, bits: int = 16
) -> bytes:
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"LIST" + struct.pack("<I", 3) + b"abc\x00"  # an odd-sized chunk to skip
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


class TestWav:
    def test_round_trip(self) -> None:
        x = sine(440, 22050, 0.2)
        raw = audio.encode_wav(x, 22050)
        assert raw[:4] == b"RIFF" and len(raw) == 44 + 2 * x.size
        y, rate = audio.decode_wav(raw)
        assert rate == 22050
        assert np.max(np.abs(x - y)) <= 0.5 / 32768

    def test_stereo_float_is_averaged(self) -> None:
        frames = np.array([[0.5, 0.25], [-1.0, 0.0]], "<f4")
        y, rate = audio.decode_wav(wav_bytes(frames.tobytes(), tag=3, channels=2, bits=32))
        assert rate == 16000
        assert y.tolist() == [0.375, -0.5]

    def test_extensible_pcm16(self) -> None:
        data = np.array([16384, -16384], "<i2").tobytes()
        fmt = struct.pack("<HHIIHH", 0xFFFE, 1, 8000, 16000, 2, 16)
        fmt += struct.pack("<HHI", 22, 16, 4) + struct.pack("<H", 1) + b"\x00" * 14
        body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
        body += b"data" + struct.pack("<I", len(data)) + data
        y, rate = audio.decode_wav(b"RIFF" + struct.pack("<I", len(body)) + body)
        assert (y.tolist(), rate) == ([0.5, -0.5], 8000)

    def test_streamed_wav_with_placeholder_size(self) -> None:
        raw = bytearray(audio.encode_wav(np.full(10, 0.25, np.float32), 16000))
        raw[40:44] = b"\xff\xff\xff\xff"
        y, _ = audio.decode_wav(bytes(raw) + b"\x01")  # a trailing partial sample
        assert y.size == 10

    @pytest.mark.parametrize(
        "raw",
        [
            b"",
            b"not a wav file at all",
            b"RIFF\x00\x00\x00\x00WAVE",
            wav_bytes(b"\x80" * 8, bits=8),
            wav_bytes(b"\x00" * 12, bits=24),
            wav_bytes(b"\x00" * 8, tag=3, bits=64),
            wav_bytes(np.array([np.nan], "<f4").tobytes(), tag=3, bits=32),
            wav_bytes(b"\x00" * 4, channels=0),
            wav_bytes(b"\x00" * 4, rate=0),
            b"RIFF\x10\x00\x00\x00WAVEdata\x04\x00\x00\x00\x00\x00\x00\x00",
        ],
    )
    def test_malformed_is_bad_audio(self, raw: bytes) -> None:
        with pytest.raises(RealtimeProtocolError) as excinfo:
            audio.decode_wav(raw)
        bad_audio(excinfo)

    @settings(max_examples=200, deadline=None)
    @given(st.binary(max_size=96))
    def test_arbitrary_bytes_raise_only_protocol_errors(self, tail: bytes) -> None:
        for raw in (
            tail,
            b"RIFF\x00\x00\x00\x00WAVE" + tail,
            b"RIFF\x00\x00\x00\x00WAVEfmt " + tail,
        ):
            try:
                audio.decode_wav(raw)
            except RealtimeProtocolError as exc:
                assert exc.code == "bad_audio"


# --------------------------------------------------------------------------- base64


class TestBase64:
    def test_round_trip(self) -> None:
        raw = bytes(range(256))
        text = audio.b64encode_str(raw)
        assert isinstance(text, str)
        assert audio.b64decode_strict(text) == raw

    @pytest.mark.parametrize(
        "garbage", ["abc", "ab!d", "AAAA\n", "data:audio/pcm;base64,AAAA", "é"]
    )
    def test_garbage_is_bad_audio(self, garbage: str) -> None:
        with pytest.raises(RealtimeProtocolError) as excinfo:
            audio.b64decode_strict(garbage)
        bad_audio(excinfo)
        assert excinfo.value.message == "input audio is not valid base64"


# --------------------------------------------------------------------------- resampling

RATE_PAIRS = [(16000, 24000), (24000, 16000), (8000, 48000)]


class TestResampling:
    @pytest.mark.parametrize(("in_rate", "out_rate"), RATE_PAIRS)
    @pytest.mark.parametrize("freq", [440.0, 3000.0])
    def test_one_shot_keeps_frequency_and_level(
        self, in_rate: int, out_rate: int, freq: float
    ) -> None:
        x = sine(freq, in_rate)
        y = audio.resample(x, in_rate, out_rate)
        assert y.dtype == np.float32
        assert abs(y.size - out_rate) <= 1
        assert abs(peak_hz(y, out_rate) - freq) <= 2.0
        assert abs(level_db(y) - level_db(x)) < 1.0

    @pytest.mark.parametrize(("in_rate", "out_rate"), RATE_PAIRS)
    def test_streaming_in_random_chunks_equals_whole_buffer(
        self, in_rate: int, out_rate: int
    ) -> None:
        x = sine(440, in_rate) + sine(3000, in_rate, amplitude=0.25)
        rng = np.random.default_rng(in_rate + out_rate)
        stream = StreamingResampler(in_rate, out_rate)
        parts, pos = [], 0
        while pos < x.size:
            n = int(rng.integers(1, in_rate // 10))
            parts.append(stream.process(x[pos : pos + n]))
            pos += n
        parts.append(stream.flush())
        streamed = np.concatenate(parts)
        whole = soxr.resample(x, in_rate, out_rate)
        n = min(streamed.size, whole.size)
        assert abs(streamed.size - whole.size) <= 2
        np.testing.assert_allclose(streamed[:n], whole[:n], atol=1e-5)

    def test_stream_restarts_after_flush(self) -> None:
        x = sine(440, 16000, 0.1)
        stream = StreamingResampler(16000, 24000)
        first = np.concatenate([stream.process(x), stream.flush()])
        second = np.concatenate([stream.process(x), stream.flush()])
        np.testing.assert_array_equal(first, second)

    def test_equal_rates_pass_through(self) -> None:
        x = sine(440, 16000, 0.1)
        stream = StreamingResampler(16000, 16000)
        assert stream.is_identity
        np.testing.assert_array_equal(stream.process(x), x)
        assert stream.flush().size == 0
        assert audio.resample(x, 16000, 16000) is x


# --------------------------------------------------------------------------- converters


class TestInputAudioConverter:
    def test_rate_change_mid_stream_loses_nothing(self) -> None:
        conv = InputAudioConverter(24000)
        parts = []
        for rate in (16000, 8000):
            x = sine(440, rate, 0.5)
            for chunk in np.array_split(x, 5):
                parts.append(conv.convert(audio.encode_pcm16(chunk), "pcm16", rate))
        parts.append(conv.flush())
        y = np.concatenate(parts)
        assert conv.input_rate_hz == 8000
        assert abs(y.size - 24000) <= 4
        for half in (y[:12000], y[12000:]):
            assert abs(peak_hz(half, 24000) - 440) <= 4
            assert abs(level_db(half) - level_db(sine(440, 24000))) < 1.0

    def test_formats(self) -> None:
        x = sine(440, 8000, 0.2)
        for fmt, raw in [
            (AudioFormat("g711_ulaw"), audio.encode_ulaw(x)),
            ("g711_alaw", audio.encode_alaw(x)),
            ("pcm_f32le", audio.encode_f32le(x)),
            ("wav", audio.encode_wav(x, 8000)),
        ]:
            conv = InputAudioConverter(16000)
            y = np.concatenate([conv.convert(raw, fmt, 8000), conv.flush()])
            assert abs(y.size - 3200) <= 2
            assert abs(peak_hz(y, 16000) - 440) <= 6

    def test_target_rate_needs_no_resampling(self) -> None:
        conv = InputAudioConverter(16000)
        x = sine(440, 16000, 0.1)
        y = conv.convert(audio.encode_f32le(x), "pcm_f32le", 16000)
        np.testing.assert_array_equal(x, y)
        assert conv.flush().size == 0

    def test_bad_audio_propagates(self) -> None:
        with pytest.raises(RealtimeProtocolError) as excinfo:
            InputAudioConverter(16000).convert(b"\x00", "pcm16", 16000)
        bad_audio(excinfo)


class TestOutputAudioEncoder:
    def test_pcm16_same_rate(self) -> None:
        enc = OutputAudioEncoder(24000, AudioFormat("pcm16"))
        assert enc.target_rate_hz == 24000
        x = sine(440, 24000, 0.3)
        raw = b"".join(enc.encode(c) for c in np.array_split(x, 3)) + enc.flush()
        assert np.max(np.abs(audio.decode_pcm16(raw) - x)) <= 0.5 / 32768

    def test_pcm16_resampled_to_requested_rate(self) -> None:
        enc = OutputAudioEncoder(24000, "pcm16", 16000)
        x = sine(1000, 24000, 0.5)
        raw = b"".join(enc.encode(c) for c in np.array_split(x, 5)) + enc.flush()
        y = audio.decode_pcm16(raw)
        assert abs(y.size - 8000) <= 2
        ref = soxr.resample(x, 24000, 16000)
        assert np.max(np.abs(y[: ref.size] - ref[: y.size])) < 1e-3

    @pytest.mark.parametrize(
        ("fmt", "decode"), [("g711_ulaw", audio.decode_ulaw), ("g711_alaw", audio.decode_alaw)]
    )
    def test_g711_defaults_to_8k(self, fmt: str, decode) -> None:
        enc = OutputAudioEncoder(24000, fmt)
        assert enc.target_rate_hz == 8000
        x = sine(440, 24000, 0.5)
        raw = b"".join(enc.encode(c) for c in np.array_split(x, 5)) + enc.flush()
        y = decode(raw)
        ref = soxr.resample(x, 24000, 8000)
        assert abs(y.size - ref.size) <= 2
        n = min(y.size, ref.size)
        snr = 10 * np.log10(np.sum(ref[:n] ** 2) / np.sum((ref[:n] - y[:n]) ** 2))
        assert snr > 30

    def test_wav_is_one_file_per_chunk(self) -> None:
        enc = OutputAudioEncoder(16000, "wav", 16000)
        x = sine(440, 16000, 0.1)
        total = 0
        for chunk in np.array_split(x, 4):
            samples, rate = audio.decode_wav(enc.encode(chunk))
            assert rate == 16000
            total += samples.size
        assert total == x.size
        assert enc.flush() == b""

    def test_unsupported_format(self) -> None:
        with pytest.raises(RealtimeProtocolError) as excinfo:
            OutputAudioEncoder(24000, "opus")
        assert excinfo.value.code == "unsupported_audio_format"


def test_rms() -> None:
    assert audio.rms(np.zeros(0, np.float32)) == 0.0
    assert audio.rms(np.full(4, -0.5, np.float32)) == pytest.approx(0.5)
