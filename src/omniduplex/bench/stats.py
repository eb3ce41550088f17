"""Percentile summaries and Prometheus text parsing for ``omniduplex bench``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..clients.collector import distribution

__all__ = ["histogram_quantiles", "parse_metrics", "ratios", "summarize"]


def summarize(values: Iterable[float]) -> dict[str, float | int] | None:
    """``{count, mean, p50, p95, p99, min, max}`` (nearest rank, rounded to 3 decimals) of
    the finite values, negative ones included (an event may come before it was due);
    ``None`` when there are none."""
    return distribution(values, quantiles=(0.50, 0.95, 0.99), non_negative=False)


def ratios(dist: Mapping[str, Any] | None, floor_ms: float | None) -> dict[str, float] | None:
    """A latency summary's p50/p95/p99 divided by a floor latency (the floor's p50)."""
    if not dist or not floor_ms or floor_ms <= 0:
        return None
    return {q: round(float(dist[q]) / floor_ms, 2) for q in ("p50", "p95", "p99")}


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition as ``{"name{label=value,...}": value}`` (samples only)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = float(sample.value)
    return out


def counter_delta(before: Mapping[str, float], after: Mapping[str, float], prefix: str) -> float:
    """Sum over every sample starting with ``prefix`` of ``after - before``."""
    total = 0.0
    for key, value in after.items():
        if key.startswith(prefix):
            total += value - before.get(key, 0.0)
    return total


def labelled_deltas(
    before: Mapping[str, float], after: Mapping[str, float], name: str, label: str
) -> dict[str, float]:
    """``{label value: after - before}`` for the samples of ``name`` (one label)."""
    out: dict[str, float] = {}
    head = f"{name}{{"
    for key, value in after.items():
        if not key.startswith(head):
            continue
        labels = dict(part.split("=", 1) for part in key[len(head) : -1].split(",") if part)
        delta = value - before.get(key, 0.0)
        if delta and label in labels:
            out[labels[label]] = out.get(labels[label], 0.0) + delta
    return out


def histogram_quantiles(
    before: Mapping[str, float], after: Mapping[str, float], name: str
) -> dict[str, float | int] | None:
    """p50/p95/p99 in ms of a Prometheus histogram's observations between two scrapes
    (linear interpolation inside a bucket, as ``histogram_quantile`` does)."""
    buckets: list[tuple[float, float]] = []
    head = f"{name}_bucket{{le="
    for key, value in after.items():
        if key.startswith(head):
            le = key[len(head) : -1]
            bound = math.inf if le in ("+Inf", "inf") else float(le)
            buckets.append((bound, value - before.get(key, 0.0)))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    count_key, sum_key = f"{name}_count", f"{name}_sum"
    observed = after.get(count_key, total) - before.get(count_key, 0.0)
    summed = after.get(sum_key, 0.0) - before.get(sum_key, 0.0)
    out: dict[str, float | int] = {"count": int(observed)}
    if observed > 0:
        out["mean"] = round(summed / observed * 1000.0, 3)
    for q, label in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in buckets:
            if cumulative >= rank:
                if math.isinf(bound):
                    value = lower_bound
                elif cumulative == lower_count:
                    value = bound
                else:
                    frac = (rank - lower_count) / (cumulative - lower_count)
                    value = lower_bound + (bound - lower_bound) * frac
                out[label] = round(value * 1000.0, 3)
                break
            lower_bound, lower_count = bound, cumulative
    return out
