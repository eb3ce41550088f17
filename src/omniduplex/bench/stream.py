"""The ``stream`` scenario's sessions and their level aggregate (the measures: ``timeline``)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any

from websockets.exceptions import ConnectionClosed

from ..clients import DuplexClientError, DuplexConnectionError, DuplexProtocolError
from .drivers import RealtimeDriver
from .recorder import SessionRecorder
from .stats import summarize
from .timeline import REALTIME_P95_MS, REALTIME_RATE

__all__ = ["DRAIN_S", "STREAM_RATE_HZ", "aggregate_stream", "stream_session"]

#: Model-native servers speak 24 kHz (PersonaPlex, Moshi): streaming at it skips resampling.
STREAM_RATE_HZ = 24_000
#: How long a session keeps reading after its last append (output still in flight).
DRAIN_S = 0.5


def aggregate_stream(recs: list[SessionRecorder], started: float) -> dict[str, Any]:
    """The ``stream`` block of a level: every session's timeline together, plus the
    per-second frame latency over the level (``timeline``, seconds from ``started``)."""
    timelines = [r.stream for r in recs if r.stream is not None]
    summaries = [t.summary() for t in timelines]
    rates = [s["output_rate"] for s in summaries if s["output_rate"] is not None]
    points = sorted(p for t in timelines for p in t.latency)
    buckets: list[dict[str, Any]] = []
    for second, group in itertools.groupby(points, key=lambda p: int(p[0] - started)):
        dist = summarize(v for _, v in group)
        if dist:
            buckets.append(
                {"t_s": second, "p50_ms": dist["p50"], "p95_ms": dist["p95"], "max_ms": dist["max"]}
            )
    return {
        "realtime_rate": REALTIME_RATE,
        "realtime_p95_ms": REALTIME_P95_MS,
        "sessions_held_realtime": sum(1 for s in summaries if s["held_realtime"]),
        "output_rate": summarize(rates),
        "frame_latency_ms": summarize(v for _, v in points),
        "first_output_ms": summarize(
            s["first_output_ms"] for s in summaries if s["first_output_ms"] is not None
        ),
        "latency_growth_first_p50_ms": summarize(
            g["first_p50_ms"] for s in summaries if (g := s["latency_growth"]) is not None
        ),
        "latency_growth_last_p50_ms": summarize(
            g["last_p50_ms"] for s in summaries if (g := s["latency_growth"]) is not None
        ),
        "latency_slope_ms_per_min": summarize(
            g["slope_ms_per_min"]
            for s in summaries
            if (g := s["latency_growth"]) is not None and g["slope_ms_per_min"] is not None
        ),
        "frames_ahead_of_input": sum(s["frames_ahead_of_input"] for s in summaries),
        "gaps_inferred": sum(s["gaps_inferred"] for s in summaries),
        "timeline": buckets,
        # The client perf_counter the timeline's seconds count from (for in-process callers
        # that act on the server mid-run, e.g. a benchmark that stalls it).
        "timeline_origin_perf_s": started,
    }


async def stream_session(
    cfg: Any,
    utterances: list[bytes],
    deadline: float,
    rec: SessionRecorder,
    state: dict[str, int],
    start_delay_s: float,
    *,
    speaks_first: bool = True,
) -> None:
    """One ``stream`` session (plain Realtime events, 24 kHz PCM16, no turn detection):
    appends on a fixed real-time schedule until ``deadline``, then reads ``DRAIN_S``."""
    timeline = rec.stream
    assert timeline is not None
    driver = RealtimeDriver(
        rec,
        cfg.url,
        dialect=cfg.dialect,
        api_key=cfg.api_key,
        server_vad=False,
        input_rate_hz=STREAM_RATE_HZ,
        speaks_first=speaks_first,
    )
    await asyncio.sleep(start_delay_s)
    try:
        await asyncio.wait_for(driver.open(), cfg.connect_timeout_s)
    except DuplexProtocolError as exc:
        rec.error(exc.code or "protocol_error")
        return
    except (DuplexClientError, OSError, TimeoutError) as exc:
        rec.error("connect_failed" if not isinstance(exc, TimeoutError) else "connect_timeout")
        return
    state["open"] += 1
    step = round(STREAM_RATE_HZ * cfg.chunk_ms / 1000.0) * 2
    chunk_ms = step / 2 * 1000.0 / STREAM_RATE_HZ
    # The utterances back to back, looped: one chunk may straddle the loop's seam.
    pcm = b"".join(utterances)
    looped = pcm + pcm[:step]
    try:
        started = time.perf_counter()
        for k in itertools.count():
            due = started + k * chunk_ms / 1000.0
            if due >= deadline:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.perf_counter()
            rec.send_lag_ms.append(max(0.0, (now - due) * 1000.0))
            offset = (k * step) % len(pcm)
            timeline.on_sent(now, chunk_ms)
            await driver.append(looped[offset : offset + step])
            rec.input_ms_sent += chunk_ms
        timeline.ended(time.perf_counter())
        await asyncio.sleep(DRAIN_S)
    except (DuplexConnectionError, ConnectionClosed, OSError):
        rec.error("connection_lost")
    except DuplexClientError as exc:
        rec.error(getattr(exc, "code", None) or type(exc).__name__)
    finally:
        if timeline.stream_ended_at is None:
            timeline.ended(time.perf_counter())
        state["open"] -= 1
        state["done"] += 1
        with contextlib.suppress(Exception):
            await driver.close()
