"""``--plot``: latency CDFs and the ramp curve (needs matplotlib: ``pip install
omniduplex[bench]``)."""

from __future__ import annotations

from typing import Any

__all__ = ["plot_results"]

_CURVES = (
    ("reply_latency_ms", "commit -> first audio"),
    ("barge_in_stop_ms", "cancel -> done(cancelled)"),
    ("event_lag_ms", "event lag"),
    ("resume_ms", "resume"),
    ("frame_latency_ms", "frame latency (stream)"),
    ("floor_ms", "floor (heartbeat RTT)"),
)


def plot_results(results: dict[str, Any], samples: dict[str, list[float]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise RuntimeError("--plot needs matplotlib: pip install 'omniduplex[bench]'") from exc
    ramp = results.get("ramp")
    ncols = 2 if ramp else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 4.5), squeeze=False)
    ax = axes[0][0]
    for key, label in _CURVES:
        values = sorted(samples.get(key) or [])
        if not values:
            continue
        n = len(values)
        ax.step(values, [(i + 1) / n for i in range(n)], where="post", label=f"{label} (n={n})")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0)
    ax.set_xlabel("ms")
    ax.set_ylabel("fraction")
    ax.set_title(
        f"{results['config']['scenario']}, {results['sessions']} sessions, "
        f"{results['config']['chunk_ms']} ms chunks"
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    if ramp:
        ax = axes[0][1]
        points = ramp["levels"]
        xs = [p["sessions"] for p in points]
        for key, label in (
            ("event_lag_p95_ms", "event lag p95"),
            ("event_lag_p50_ms", "event lag p50"),
            ("reply_latency_p95_ms", "reply latency p95"),
            ("floor_p50_ms", "floor p50"),
        ):
            ys = [p[key] if p[key] is not None else float("nan") for p in points]
            ax.plot(xs, ys, marker="o", label=label)
        ax.axhline(ramp["lag_bound_ms"], color="red", linestyle="--", label="lag bound")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrent sessions")
        ax.set_ylabel("ms")
        ax.set_title(f"ramp: {ramp['max_sessions_held']} sessions held")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        cpu = ax.twinx()
        cpu.plot(
            xs,
            [p["server_cpu_percent"] or float("nan") for p in points],
            color="gray",
            linestyle=":",
            label="server CPU %",
        )
        cpu.set_ylabel("server CPU %")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
