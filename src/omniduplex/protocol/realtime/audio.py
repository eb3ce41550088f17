"""Audio conversion for the wire: decode, encode, resample, base64.

Everything internal is float32 mono in [-1, 1). Wire formats are converted at the edges:
PCM16 and pcm_f32le little-endian, G.711 mu-law and A-law, and WAV. This module runs on
the audio hot path (every append, every output delta), so each conversion is a few
vectorised numpy passes; resampling uses ``soxr`` and base64 ``pybase64``.

Malformed client audio raises ``RealtimeProtocolError`` with code ``bad_audio``.
"""

from __future__ import annotations

import math
import struct
from typing import Final

import numpy as np
import numpy.typing as npt
import pybase64
import soxr

from .errors import RealtimeProtocolError
from .formats import (
    DEFAULT_OUTPUT_RATE_HZ,
    G711_ALAW,
    G711_ULAW,
    PCM16,
    PCM_F32LE,
    WAV,
    AudioFormat,
    canonical_format_name,
)

FloatArray = npt.NDArray[np.float32]
Int16Array = npt.NDArray[np.int16]

BAD_AUDIO: Final = "bad_audio"
# Bytes per sample of the raw (headerless) formats.
SAMPLE_WIDTH: Final[dict[str, int]] = {PCM16: 2, PCM_F32LE: 4, G711_ULAW: 1, G711_ALAW: 1}

_INT16_SCALE: Final = 32768.0
_F32_SCALE: Final = np.float32(_INT16_SCALE)
_F32_MIN: Final = np.float32(-_INT16_SCALE)
_F32_MAX: Final = np.float32(_INT16_SCALE - 1.0)
_EMPTY_F32: Final = np.zeros(0, dtype=np.float32)
_EMPTY_F32.flags.writeable = False


def _bad_audio(message: str) -> RealtimeProtocolError:
    return RealtimeProtocolError(message, BAD_AUDIO)


def format_name(fmt: AudioFormat | str) -> str:
    """The canonical name of ``fmt`` (an ``AudioFormat`` or any accepted spelling)."""
    if isinstance(fmt, AudioFormat):
        return fmt.name
    name = canonical_format_name(fmt)
    if name is None:
        raise RealtimeProtocolError(
            f"Unsupported audio format: {fmt!r}", "unsupported_audio_format"
        )
    return name


# --------------------------------------------------------------------------- base64


def b64decode_strict(data: str | bytes) -> bytes:
    """Decode standard base64, rejecting anything outside the alphabet or badly padded."""
    try:
        return pybase64.b64decode(data, validate=True)
    except (ValueError, TypeError) as exc:
        raise _bad_audio("input audio is not valid base64") from exc


def b64encode_str(raw: bytes | bytearray | memoryview) -> str:
    """Standard base64 as ``str`` (what a JSON event carries)."""
    return pybase64.b64encode_as_string(raw)


# --------------------------------------------------------------------------- G.711
#
# Both laws are tabulated once at import: a 256-entry decode table and a 65536-entry encode
# table indexed by the int16 sample's bit pattern, so encoding a chunk is one gather. The
# tables follow ITU-T G.711 as implemented by the classic Sun reference code (and stdlib
# ``audioop``): mu-law on the 14-bit magnitude with bias 0x84 and clip 8159, A-law on the
# 13-bit value with even-bit inversion (XOR 0x55).


def _build_ulaw_encode_table() -> npt.NDArray[np.uint8]:
    x = np.arange(-32768, 32768, dtype=np.int32) >> 2
    negative = x < 0
    magnitude = np.minimum(np.where(negative, -x, x), 8159) + 33
    segment_ends = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
    segment = np.searchsorted(segment_ends, magnitude, side="left")
    code = (segment << 4) | ((magnitude >> (segment + 1)) & 0xF)
    code = np.where(segment >= 8, 0x7F, code)
    code ^= np.where(negative, 0x7F, 0xFF)
    return _reorder_for_uint16_index(code.astype(np.uint8))


def _build_alaw_encode_table() -> npt.NDArray[np.uint8]:
    x = np.arange(-32768, 32768, dtype=np.int32) >> 3
    negative = x < 0
    magnitude = np.where(negative, -x - 1, x)
    segment_ends = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])
    segment = np.searchsorted(segment_ends, magnitude, side="left")
    # Segments 0 and 1 share a step size, hence the shift by at least one.
    quant = (magnitude >> np.maximum(segment, 1)) & 0xF
    code = np.where(segment >= 8, 0x7F, (segment << 4) | quant)
    code ^= np.where(negative, 0x55, 0xD5)
    return _reorder_for_uint16_index(code.astype(np.uint8))


def _reorder_for_uint16_index(table_from_min: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    # Built in sample order -32768..32767; lookups index by the sample's uint16 bit pattern
    # (0..32767 then -32768..-1), which avoids an add per sample.
    return np.ascontiguousarray(np.roll(table_from_min, -32768))


def _build_ulaw_decode_table() -> Int16Array:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0xF) << 3) + 0x84) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, 0x84 - t, t - 0x84).astype(np.int16)


def _build_alaw_decode_table() -> Int16Array:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    segment = (a & 0x70) >> 4
    t = ((a & 0xF) << 4) + np.where(segment == 0, 8, 0x108)
    t = np.where(segment > 1, t << np.maximum(segment - 1, 0), t)
    return np.where(a & 0x80, t, -t).astype(np.int16)


_ULAW_ENCODE: Final = _build_ulaw_encode_table()
_ALAW_ENCODE: Final = _build_alaw_encode_table()
_ULAW_DECODE_I16: Final = _build_ulaw_decode_table()
_ALAW_DECODE_I16: Final = _build_alaw_decode_table()
_ULAW_DECODE_F32: Final = (_ULAW_DECODE_I16 / _INT16_SCALE).astype(np.float32)
_ALAW_DECODE_F32: Final = (_ALAW_DECODE_I16 / _INT16_SCALE).astype(np.float32)
for _table in (
    _ULAW_ENCODE,
    _ALAW_ENCODE,
    _ULAW_DECODE_I16,
    _ALAW_DECODE_I16,
    _ULAW_DECODE_F32,
    _ALAW_DECODE_F32,
):
    _table.flags.writeable = False
del _table


def _g711_codes(raw: bytes | bytearray | memoryview) -> npt.NDArray[np.uint8]:
    return np.frombuffer(raw, dtype=np.uint8)


def ulaw_to_int16(raw: bytes | bytearray | memoryview) -> Int16Array:
    return _ULAW_DECODE_I16.take(_g711_codes(raw))


def alaw_to_int16(raw: bytes | bytearray | memoryview) -> Int16Array:
    return _ALAW_DECODE_I16.take(_g711_codes(raw))


def int16_to_ulaw(samples: npt.ArrayLike) -> bytes:
    index = np.asarray(samples, dtype=np.int16).view(np.uint16)
    return _ULAW_ENCODE.take(index).tobytes()


def int16_to_alaw(samples: npt.ArrayLike) -> bytes:
    index = np.asarray(samples, dtype=np.int16).view(np.uint16)
    return _ALAW_ENCODE.take(index).tobytes()


# --------------------------------------------------------------------------- raw decode


def decode_pcm16(raw: bytes | bytearray | memoryview) -> FloatArray:
    """Little-endian signed 16-bit PCM to float32 (``x / 32768``)."""
    if len(raw) % 2:
        raise _bad_audio("pcm16 audio must have an even number of bytes")
    out = np.frombuffer(raw, dtype="<i2").astype(np.float32)
    out *= np.float32(1.0 / _INT16_SCALE)
    return out


def decode_f32le(raw: bytes | bytearray | memoryview) -> FloatArray:
    """Little-endian float32 PCM; every sample must be finite."""
    if len(raw) % 4:
        raise _bad_audio("pcm_f32le audio must be a whole number of 4-byte samples")
    out = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    # One pass instead of two: float32 values cannot overflow a float64 sum, so the sum is
    # finite exactly when every sample is.
    if not np.isfinite(out.sum(dtype=np.float64)):
        raise _bad_audio("pcm_f32le audio contains NaN or infinite samples")
    return out


def decode_ulaw(raw: bytes | bytearray | memoryview) -> FloatArray:
    return _ULAW_DECODE_F32.take(_g711_codes(raw))


def decode_alaw(raw: bytes | bytearray | memoryview) -> FloatArray:
    return _ALAW_DECODE_F32.take(_g711_codes(raw))


_RAW_DECODERS: Final = {
    PCM16: decode_pcm16,
    PCM_F32LE: decode_f32le,
    G711_ULAW: decode_ulaw,
    G711_ALAW: decode_alaw,
}


def check_raw_length(raw_length: int, fmt: AudioFormat | str) -> None:
    """``bad_audio`` unless ``raw_length`` bytes hold a whole number of samples of ``fmt``."""
    name = format_name(fmt)
    width = SAMPLE_WIDTH.get(name)
    if width is not None and raw_length % width:
        raise _bad_audio(f"{name} audio must be a whole number of {width}-byte samples")


def validate_raw_audio(raw: bytes | bytearray | memoryview, fmt: AudioFormat | str) -> None:
    """``bad_audio`` unless ``raw`` decodes cleanly as ``fmt`` (checked without decoding).

    Whole samples for every format; finite samples for pcm_f32le.
    """
    name = format_name(fmt)
    check_raw_length(len(raw), name)
    if name == PCM_F32LE and not np.isfinite(np.frombuffer(raw, dtype="<f4").sum(dtype=np.float64)):
        raise _bad_audio("pcm_f32le audio contains NaN or infinite samples")


def decode_raw(raw: bytes | bytearray | memoryview, fmt: AudioFormat | str) -> FloatArray:
    """Decode headerless audio (pcm16, pcm_f32le, G.711) to float32 mono."""
    name = format_name(fmt)
    decoder = _RAW_DECODERS.get(name)
    if decoder is None:
        raise RealtimeProtocolError(
            f"{name} is not a headerless audio format", "unsupported_audio_format"
        )
    return decoder(raw)


def decode_audio(
    raw: bytes | bytearray | memoryview, fmt: AudioFormat | str, rate: int
) -> tuple[FloatArray, int]:
    """Decode any supported format; returns the samples and their rate.

    WAV carries its own rate in its header, which wins over ``rate``.
    """
    if format_name(fmt) == WAV:
        return decode_wav(raw)
    return decode_raw(raw, fmt), rate


# --------------------------------------------------------------------------- encode


def as_float32(samples: npt.ArrayLike) -> FloatArray:
    """Samples as a 1-D float32 array; int16 input is scaled to [-1, 1)."""
    arr = np.asarray(samples)
    if arr.dtype == np.int16:
        arr = arr.astype(np.float32)
        arr *= np.float32(1.0 / _INT16_SCALE)
    elif arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    return arr if arr.ndim == 1 else arr.reshape(-1)


def float_to_int16(samples: npt.ArrayLike) -> Int16Array:
    """Float samples to int16: scaled by 32768, rounded, clipped; NaN becomes silence."""
    scaled = np.multiply(as_float32(samples), _F32_SCALE)  # a fresh array, safe to edit
    # NaN survives clipping and casts to an arbitrary integer. The dot product is a cheap
    # test: it is finite whenever every sample is (an overflow merely takes the slow path).
    if not math.isfinite(np.dot(scaled, scaled)):
        np.nan_to_num(scaled, copy=False, nan=0.0)
    np.clip(scaled, _F32_MIN, _F32_MAX, out=scaled)
    np.rint(scaled, out=scaled)
    return scaled.astype("<i2")


def encode_pcm16(samples: npt.ArrayLike) -> bytes:
    return float_to_int16(samples).tobytes()


def encode_f32le(samples: npt.ArrayLike) -> bytes:
    return as_float32(samples).astype("<f4", copy=False).tobytes()


def encode_ulaw(samples: npt.ArrayLike) -> bytes:
    return int16_to_ulaw(float_to_int16(samples))


def encode_alaw(samples: npt.ArrayLike) -> bytes:
    return int16_to_alaw(float_to_int16(samples))


def encode_audio(samples: npt.ArrayLike, fmt: AudioFormat | str, rate: int) -> bytes:
    """Encode float samples into ``fmt``; ``rate`` is only written into WAV headers."""
    name = format_name(fmt)
    if name == PCM16:
        return encode_pcm16(samples)
    if name == G711_ULAW:
        return encode_ulaw(samples)
    if name == G711_ALAW:
        return encode_alaw(samples)
    if name == WAV:
        return encode_wav(samples, rate)
    return encode_f32le(samples)


# --------------------------------------------------------------------------- WAV

_WAVE_PCM: Final = 0x0001
_WAVE_FLOAT: Final = 0x0003
_WAVE_EXTENSIBLE: Final = 0xFFFE


def encode_wav(samples: npt.ArrayLike, rate: int) -> bytes:
    """A complete 16-bit mono PCM WAV file."""
    data = encode_pcm16(samples)
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        36 + len(data),
        b"WAVE",
        b"fmt ",
        16,
        _WAVE_PCM,
        1,
        rate,
        rate * 2,
        2,
        16,
        b"data",
        len(data),
    )
    return header + data


def decode_wav(raw: bytes | bytearray | memoryview) -> tuple[FloatArray, int]:
    """Parse a RIFF/WAVE file of 16-bit PCM or 32-bit float; channels are averaged to mono.

    A data chunk that claims more bytes than the file holds (a streamed WAV with a
    provisional "unknown length" size) is read up to the end of the file, whole frames only.
    """
    view = memoryview(raw).cast("B")
    if len(view) < 12 or view[0:4] != b"RIFF" or view[8:12] != b"WAVE":
        raise _bad_audio("audio is not a RIFF/WAVE file")
    fmt: tuple[int, int, int, int] | None = None  # tag, channels, rate, bits
    pos = 12
    while pos + 8 <= len(view):
        chunk_id = bytes(view[pos : pos + 4])
        (size,) = struct.unpack_from("<I", view, pos + 4)
        body = pos + 8
        if chunk_id == b"fmt ":
            if size < 16 or body + 16 > len(view):
                raise _bad_audio("WAV fmt chunk is truncated")
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", view, body)
            if tag == _WAVE_EXTENSIBLE and size >= 40 and body + 26 <= len(view):
                # The real format tag is the first two bytes of the sub-format GUID.
                (tag,) = struct.unpack_from("<H", view, body + 24)
            fmt = (tag, channels, rate, bits)
        elif chunk_id == b"data":
            if fmt is None:
                raise _bad_audio("WAV data chunk precedes its fmt chunk")
            return _decode_wav_data(view[body : body + size], *fmt)
        pos = body + size + (size & 1)  # chunks are word-aligned
    raise _bad_audio("WAV file has no data chunk")


def _decode_wav_data(
    data: memoryview, tag: int, channels: int, rate: int, bits: int
) -> tuple[FloatArray, int]:
    if tag == _WAVE_PCM and bits == 16:
        dtype, width = "<i2", 2
    elif tag == _WAVE_FLOAT and bits == 32:
        dtype, width = "<f4", 4
    else:
        raise _bad_audio(f"unsupported WAV encoding (format tag {tag}, {bits} bits)")
    if channels < 1:
        raise _bad_audio("WAV file declares no channels")
    if rate <= 0:
        raise _bad_audio("WAV file declares no sample rate")
    frame = width * channels
    usable = len(data) - len(data) % frame
    samples = np.frombuffer(data[:usable], dtype=dtype).astype(np.float32)
    if width == 2:
        samples *= np.float32(1.0 / _INT16_SCALE)
    elif not np.isfinite(samples).all():
        raise _bad_audio("WAV audio contains NaN or infinite samples")
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return samples, rate


# --------------------------------------------------------------------------- resampling


def resample(samples: npt.ArrayLike, in_rate: int, out_rate: int) -> FloatArray:
    """One-shot resampling of a whole buffer (not for streams: it does not keep state)."""
    x = as_float32(samples)
    if in_rate == out_rate or x.size == 0:
        return x
    return soxr.resample(x, in_rate, out_rate)


class StreamingResampler:
    """A continuous mono float32 stream from ``in_rate`` to ``out_rate``.

    soxr holds back a filter delay's worth of samples, so output sizes vary per chunk
    and the tail only comes out with ``last=True``. After a ``last`` call the stream
    starts afresh. When the rates are equal the input is passed through (the result may
    share memory with it).
    """

    __slots__ = ("_stream", "in_rate", "out_rate")

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream: soxr.ResampleStream | None = (
            None if in_rate == out_rate else soxr.ResampleStream(in_rate, out_rate, 1, "float32")
        )

    @property
    def is_identity(self) -> bool:
        return self._stream is None

    def process(self, chunk: npt.ArrayLike, last: bool = False) -> FloatArray:
        x = as_float32(chunk)
        if self._stream is None:
            return x
        out = self._stream.resample_chunk(np.ascontiguousarray(x), last=last)
        if last:
            self._stream.clear()
        return out

    def flush(self) -> FloatArray:
        """The held-back tail; the stream then starts afresh."""
        if self._stream is None:
            return _EMPTY_F32
        return self.process(_EMPTY_F32, last=True)

    def reset(self) -> None:
        """Drop held-back samples (e.g. the input was cleared)."""
        if self._stream is not None:
            self._stream.clear()


# --------------------------------------------------------------------------- per-session


class InputAudioConverter:
    """Turns one session's appended client audio into float32 at the model's rate.

    One resampling stream is kept for the client's current rate. When the rate changes
    mid-stream the old stream is flushed and its tail is emitted ahead of the new audio,
    so no audio is lost at the switch.
    """

    __slots__ = ("_resampler", "target_rate_hz")

    def __init__(self, target_rate_hz: int) -> None:
        self.target_rate_hz = target_rate_hz
        self._resampler: StreamingResampler | None = None

    @property
    def input_rate_hz(self) -> int | None:
        """The rate of the stream now open, if any."""
        return None if self._resampler is None else self._resampler.in_rate

    def convert(
        self, raw: bytes | bytearray | memoryview, fmt: AudioFormat | str, rate: int
    ) -> FloatArray:
        samples, rate = decode_audio(raw, fmt, rate)
        resampler = self._resampler
        if resampler is None or resampler.in_rate != rate:
            tail = resampler.flush() if resampler is not None else _EMPTY_F32
            resampler = self._resampler = StreamingResampler(rate, self.target_rate_hz)
            out = resampler.process(samples)
            return np.concatenate((tail, out)) if tail.size else out
        return resampler.process(samples)

    def flush(self) -> FloatArray:
        """Audio still held back by the resampler (call at commit or end of input)."""
        if self._resampler is None:
            return _EMPTY_F32
        return self._resampler.flush()

    def reset(self) -> None:
        """Drop held-back audio (``input_audio_buffer.clear``, barge-in)."""
        if self._resampler is not None:
            self._resampler.reset()


class OutputAudioEncoder:
    """Turns model audio (float32 at ``source_rate_hz``) into the session's output format.

    ``fmt`` is pcm16, g711_ulaw, g711_alaw, wav (one complete WAV file per chunk) or
    pcm_f32le. The output rate is ``target_rate_hz``, else the format's stated rate, else
    8 kHz for G.711 and 24 kHz otherwise. ``encode`` returns ``b""`` when the resampler
    has not yet released any samples.
    """

    __slots__ = ("_format", "_resampler", "source_rate_hz", "target_rate_hz")

    def __init__(
        self,
        source_rate_hz: int,
        fmt: AudioFormat | str,
        target_rate_hz: int | None = None,
    ) -> None:
        audio_format = fmt if isinstance(fmt, AudioFormat) else AudioFormat(format_name(fmt))
        self._format = audio_format.name
        if self._format not in (PCM16, PCM_F32LE, G711_ULAW, G711_ALAW, WAV):
            raise RealtimeProtocolError(
                f"Unsupported output_audio_format: {self._format}", "unsupported_audio_format"
            )
        self.source_rate_hz = source_rate_hz
        self.target_rate_hz = target_rate_hz or audio_format.effective_rate(DEFAULT_OUTPUT_RATE_HZ)
        self._resampler = StreamingResampler(source_rate_hz, self.target_rate_hz)

    @property
    def format(self) -> str:
        return self._format

    def encode(self, samples: npt.ArrayLike) -> bytes:
        return self._encode(self._resampler.process(samples))

    def flush(self) -> bytes:
        """The resampler's tail, encoded (call when the response's audio ends)."""
        return self._encode(self._resampler.flush())

    def reset(self) -> None:
        """Drop held-back audio (the response was cancelled)."""
        self._resampler.reset()

    def _encode(self, samples: FloatArray) -> bytes:
        if samples.size == 0:
            return b""
        return encode_audio(samples, self._format, self.target_rate_hz)


def rms(samples: npt.ArrayLike) -> float:
    """Root mean square of the samples (0.0 for none)."""
    x = as_float32(samples)
    if x.size == 0:
        return 0.0
    return float(np.sqrt(np.dot(x, x) / x.size))
