"""``--ramp``: which session counts to run, whether a level held, and its ramp summary."""

from __future__ import annotations

from typing import Any

__all__ = ["held", "ramp_levels", "ramp_point"]


def held(level: dict[str, Any], bound_ms: float) -> bool:
    """Every session opened, no errors, and: in the ``stream`` scenario every session
    held in real time (see ``timeline``); otherwise p95 event lag within ``bound_ms``."""
    agg = level["aggregate"]
    if agg["errors"] or agg["sessions_opened"] != level["sessions"]:
        return False
    stream = agg.get("stream")
    if stream is not None:
        return bool(stream["sessions_held_realtime"] == level["sessions"])
    lag = agg["event_lag_ms"]
    return lag is None or lag["p95"] <= bound_ms


def ramp_levels(cfg: Any) -> list[int]:
    top = max(1, cfg.sessions)
    step = cfg.ramp_step or max(1, round(top / 10))
    start = cfg.ramp_start or step
    levels = list(range(start, top, step))
    return [*levels, top]


def ramp_point(level: dict[str, Any], bound_ms: float) -> dict[str, Any]:
    agg = level["aggregate"]
    res = level.get("server_resources") or {}

    def q(key: str, p: str, source: dict[str, Any] = agg) -> float | None:
        dist = source.get(key)
        return dist[p] if dist else None

    point = {
        "sessions": level["sessions"],
        "held": held(level, bound_ms),
        "event_lag_p50_ms": q("event_lag_ms", "p50"),
        "event_lag_p95_ms": q("event_lag_ms", "p95"),
        "event_lag_p99_ms": q("event_lag_ms", "p99"),
        "reply_latency_p50_ms": q("reply_latency_ms", "p50"),
        "reply_latency_p95_ms": q("reply_latency_ms", "p95"),
        "send_lag_p95_ms": q("send_lag_ms", "p95"),
        "underruns_per_audio_minute": agg["underruns_per_audio_minute"],
        "floor_p50_ms": level["floor"]["floor_ms"],
        "errors": agg["errors"],
        "errors_by_code": agg["errors_by_code"],
        "server_cpu_percent": res.get("cpu_percent"),
        "server_rss_per_session_bytes": res.get("rss_per_session_bytes"),
        "client_cpu_percent": level["client"]["cpu_percent"],
        "client_loop_lag_p95_ms": (level["client"]["loop_lag_ms"] or {}).get("p95"),
    }
    stream = agg.get("stream")
    if stream is not None:
        point.update(
            sessions_held_realtime=stream["sessions_held_realtime"],
            output_rate_min=q("output_rate", "min", stream),
            frame_latency_p50_ms=q("frame_latency_ms", "p50", stream),
            frame_latency_p95_ms=q("frame_latency_ms", "p95", stream),
            latency_slope_ms_per_min_p50=q("latency_slope_ms_per_min", "p50", stream),
        )
    return point
