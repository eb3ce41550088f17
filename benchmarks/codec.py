"""Wire-codec micro-benchmark: our hot path against the same work done with the stdlib.

Two hot paths run for every 100 ms of audio in a session:

- out: a ``response.output_audio.delta`` of 100 ms of 24 kHz pcm16 (4800 bytes), base64
  encoded and rendered to JSON;
- in: an ``input_audio_buffer.append`` of 100 ms of 16 kHz pcm16 parsed from JSON,
  validated, decoded and resampled to the model's 24 kHz.

Ours uses orjson, pybase64, numpy tables and soxr streams (and the typed event/command
classes when they are importable); the baseline uses ``json`` and ``base64`` with the same
numpy/soxr work, so the ratio isolates what the codec choices buy. Each row is the median
over many timed batches (``time.perf_counter_ns``), reported per operation.

Run: ``python benchmarks/codec.py [--quick]``; writes ``benchmarks/results/codec.json``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import soxr

from omniduplex.protocol.realtime.audio import (
    InputAudioConverter,
    OutputAudioEncoder,
    b64decode_strict,
    b64encode_str,
    decode_pcm16,
    encode_pcm16,
    int16_to_ulaw,
)
from omniduplex.protocol.realtime.audio_input import decode_audio_append
from omniduplex.protocol.realtime.formats import PCM16, AudioFormat
from omniduplex.protocol.realtime.session import RealtimeInputDefaults

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import audioop
    except ImportError:  # removed in Python 3.13
        audioop = None  # type: ignore[assignment]

# The typed wire classes are written alongside this benchmark; use them once they exist so
# the numbers include their construction and rendering cost. The duplex (Tier 2) delta is
# what the server sends; the Tier 1 class stands in until it exists.
_event_modules: list[Any] = []
try:
    from omniduplex.protocol.duplex import events as _duplex_events

    _event_modules.append(_duplex_events)
except ImportError:
    pass
try:
    from omniduplex.protocol.realtime import events as _realtime_events

    _event_modules.append(_realtime_events)
except ImportError:
    pass
try:
    from omniduplex.protocol.duplex.commands import command_from_realtime
except ImportError:
    command_from_realtime = None  # type: ignore[assignment]

RESULTS = Path(__file__).resolve().parent / "results" / "codec.json"
DELTA_TYPE = "response.output_audio.delta"


@dataclasses.dataclass
class Row:
    name: str
    ours_us: float
    stdlib_us: float | None
    ours_impl: str
    stdlib_impl: str

    @property
    def ratio(self) -> float | None:
        return None if self.stdlib_us is None else self.stdlib_us / self.ours_us


def median_us(fn: Callable[[], Any], *, batches: int, min_batch_ns: int = 200_000) -> float:
    """Median per-call time: calls are timed in batches so timer overhead stays negligible."""
    for _ in range(20):  # warm-up: caches, allocator, lazy imports
        fn()
    inner = 1
    while True:
        start = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        if time.perf_counter_ns() - start >= min_batch_ns or inner >= 1 << 16:
            break
        inner *= 2
    samples = []
    for _ in range(batches):
        start = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter_ns() - start) / inner)
    return statistics.median(samples) / 1000.0


def sine(freq: float, rate: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def delta_event_class() -> type | None:
    for module in _event_modules:
        for value in vars(module).values():
            if isinstance(value, type) and getattr(value, "type", None) == DELTA_TYPE:
                return value
    return None


def run(batches: int) -> list[Row]:
    rows: list[Row] = []

    # ---- out: response.output_audio.delta, 100 ms of 24 kHz pcm16
    out_raw = encode_pcm16(sine(440, 24_000, 0.1))
    fields = {
        "event_id": "event_" + "0" * 32,
        "response_id": "resp_0123456789abcdef",
        "item_id": "item_0123456789abcdef",
        "output_index": 0,
        "content_index": 0,
    }

    def ours_delta_dict() -> bytes:
        return orjson.dumps({"type": DELTA_TYPE, **fields, "delta": b64encode_str(out_raw)})

    def stdlib_delta() -> str:
        delta = base64.b64encode(out_raw).decode("ascii")
        return json.dumps({"type": DELTA_TYPE, **fields, "delta": delta})

    # Extra fields of the Tier 2 twin; a Tier 1 class ignores them.
    tier2_fields = {"format": "pcm16", "sample_rate_hz": 24_000}
    event_cls = delta_event_class()
    ours_delta, ours_delta_impl = ours_delta_dict, ""
    if event_cls is not None:
        accepted = {f.name for f in dataclasses.fields(event_cls)}
        kwargs = {k: v for k, v in {**fields, **tier2_fields}.items() if k in accepted}

        def ours_delta_event() -> bytes:
            event = event_cls(**kwargs, delta=b64encode_str(out_raw))
            return orjson.dumps(event.to_realtime("ga"))

        ours_delta, ours_delta_impl = ours_delta_event, f"{event_cls.__name__} + orjson"

    # Same payload either way (a typed event may add fields of its own).
    rendered, expected = json.loads(ours_delta()), json.loads(stdlib_delta())
    assert {key: rendered.get(key) for key in expected} == expected
    rows.append(
        Row(
            "b64 encode 100 ms 24k pcm16 (4800 B)",
            median_us(lambda: b64encode_str(out_raw), batches=batches),
            median_us(lambda: base64.b64encode(out_raw).decode("ascii"), batches=batches),
            "pybase64",
            "base64",
        )
    )
    stdlib_delta_us = median_us(stdlib_delta, batches=batches)
    rows.append(
        Row(
            "render output_audio.delta, dict (b64 + JSON)",
            median_us(ours_delta_dict, batches=batches),
            stdlib_delta_us,
            "dict + pybase64 + orjson",
            "base64 + json",
        )
    )
    if event_cls is not None:
        rows.append(
            Row(
                "render output_audio.delta, typed event",
                median_us(ours_delta, batches=batches),
                stdlib_delta_us,
                ours_delta_impl,
                "base64 + json (dict)",
            )
        )

    # ---- out: model float32 audio to wire bytes
    model_audio = sine(440, 24_000, 0.1)
    pcm_encoder = OutputAudioEncoder(24_000, AudioFormat(PCM16))
    ulaw_encoder = OutputAudioEncoder(24_000, AudioFormat("g711_ulaw"))
    rows.append(
        Row(
            "encode 100 ms float32 -> pcm16 24k",
            median_us(lambda: pcm_encoder.encode(model_audio), batches=batches),
            None,
            "OutputAudioEncoder",
            "",
        )
    )
    rows.append(
        Row(
            "encode 100 ms float32 24k -> g711_ulaw 8k",
            median_us(lambda: ulaw_encoder.encode(model_audio), batches=batches),
            None,
            "OutputAudioEncoder (soxr + table)",
            "",
        )
    )
    if audioop is not None:
        pcm_8k_bytes = encode_pcm16(sine(440, 8_000, 0.1))

        def ours_ulaw() -> bytes:
            return int16_to_ulaw(np.frombuffer(pcm_8k_bytes, dtype="<i2"))

        assert ours_ulaw() == audioop.lin2ulaw(pcm_8k_bytes, 2)
        rows.append(
            Row(
                "g711_ulaw encode 100 ms 8k pcm16 bytes",
                median_us(ours_ulaw, batches=batches),
                median_us(lambda: audioop.lin2ulaw(pcm_8k_bytes, 2), batches=batches),
                "numpy 64 Ki-entry table",
                "audioop.lin2ulaw (C, removed in 3.13)",
            )
        )

    # ---- in: input_audio_buffer.append, 100 ms of 16 kHz pcm16 -> 24 kHz float32
    in_raw = encode_pcm16(sine(440, 16_000, 0.1))
    wire = orjson.dumps(
        {
            "type": "input_audio_buffer.append",
            "event_id": "evt_client_1",
            "audio": b64encode_str(in_raw),
            "format": {"type": "audio/pcm", "rate": 16_000},
        }
    )
    defaults = RealtimeInputDefaults()
    ours_converter = InputAudioConverter(24_000)
    stdlib_converter = soxr.ResampleStream(16_000, 24_000, 1, "float32")

    def ours_decode() -> Any:
        obj = orjson.loads(wire)
        if command_from_realtime is not None:
            return command_from_realtime(obj, defaults=defaults)
        return decode_audio_append(obj, defaults)

    ours_decode_impl = (
        "orjson + command_from_realtime"
        if command_from_realtime is not None
        else "orjson + decode_audio_append"
    )

    def stdlib_decode() -> bytes:
        obj = json.loads(wire)
        return base64.b64decode(obj["audio"], validate=True)

    def ours_full() -> np.ndarray:
        append = decode_audio_append(orjson.loads(wire), defaults)
        return ours_converter.convert(append.audio, append.format, append.sample_rate_hz)

    def stdlib_full() -> np.ndarray:
        obj = json.loads(wire)
        raw = base64.b64decode(obj["audio"], validate=True)
        samples = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
        return stdlib_converter.resample_chunk(samples)

    b64_text = b64encode_str(in_raw)
    assert b64decode_strict(b64_text) == in_raw
    rows.append(
        Row(
            "b64 decode (strict) 100 ms 16k pcm16 (3200 B)",
            median_us(lambda: b64decode_strict(b64_text), batches=batches),
            median_us(lambda: base64.b64decode(b64_text, validate=True), batches=batches),
            "pybase64",
            "base64",
        )
    )
    rows.append(
        Row(
            "parse + validate append (no resampling)",
            median_us(ours_decode, batches=batches),
            median_us(stdlib_decode, batches=batches),
            ours_decode_impl,
            "json + base64 (no validation)",
        )
    )
    rows.append(
        Row(
            "decode pcm16 -> float32 + resample 16k->24k",
            median_us(lambda: ours_converter.convert(in_raw, PCM16, 16_000), batches=batches),
            median_us(
                lambda: stdlib_converter.resample_chunk(
                    np.frombuffer(in_raw, dtype="<i2").astype(np.float32) / 32768.0
                ),
                batches=batches,
            ),
            "InputAudioConverter",
            "numpy + soxr.ResampleStream",
        )
    )
    rows.append(
        Row(
            "append end to end (parse..24k float32)",
            median_us(ours_full, batches=batches),
            median_us(stdlib_full, batches=batches),
            "orjson + decode_audio_append + InputAudioConverter",
            "json + base64 + numpy + soxr",
        )
    )
    # Sanity: both paths produce the same samples for the same stream position.
    check_ours, check_std = InputAudioConverter(24_000), soxr.ResampleStream(16_000, 24_000, 1)
    a = np.concatenate([check_ours.convert(in_raw, PCM16, 16_000) for _ in range(5)])
    b = np.concatenate([check_std.resample_chunk(decode_pcm16(in_raw)) for _ in range(5)])
    np.testing.assert_allclose(a, b, atol=1e-6)
    return rows


def environment() -> dict[str, Any]:
    import importlib.metadata as md

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "packages": {name: md.version(name) for name in ("numpy", "soxr", "orjson", "pybase64")},
        "delta_event_class": (
            f"{cls.__module__}.{cls.__name__}" if (cls := delta_event_class()) else None
        ),
        "command_from_realtime": command_from_realtime is not None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300, help="timed batches per row")
    parser.add_argument("--quick", action="store_true", help="30 batches (smoke run)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = run(30 if args.quick else args.batches)

    header = f"{'operation':<52} {'ours us':>9} {'stdlib us':>10} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for row in rows:
        std = "-" if row.stdlib_us is None else f"{row.stdlib_us:10.2f}"
        ratio = "-" if row.ratio is None else f"{row.ratio:6.1f}x"
        print(f"{row.name:<52} {row.ours_us:9.2f} {std:>10} {ratio:>7}")

    args.output.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "codec",
        "unit": "microseconds per operation (median of timed batches)",
        "environment": environment(),
        "rows": [{**dataclasses.asdict(row), "ratio": row.ratio} for row in rows],
    }
    args.output.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
