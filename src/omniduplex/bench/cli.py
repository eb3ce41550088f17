"""``omniduplex bench``: arguments and the command."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from .runner import SCENARIOS, BenchConfig, run_bench

__all__ = ["add_arguments", "main", "run_command"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="ws://HOST:PORT/v1/realtime")
    parser.add_argument("--sessions", type=int, default=10, help="concurrent sessions (ramp: max)")
    parser.add_argument("--ramp", action="store_true", help="raise N until the lag bound breaks")
    parser.add_argument("--ramp-start", type=int, default=None)
    parser.add_argument("--ramp-step", type=int, default=None, help="default: sessions / 10")
    parser.add_argument("--lag-bound-ms", type=float, default=50.0, help="ramp: p95 event lag")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per level")
    parser.add_argument(
        "--chunk-ms",
        type=float,
        default=20.0,
        help="ms of audio per append (a whole number of samples at the input rate; 80 = one "
        "PersonaPlex/Moshi frame)",
    )
    parser.add_argument("--scenario", choices=SCENARIOS, default="talk")
    parser.add_argument("--input", dest="input_dir", default=None, help="folder of .wav files")
    parser.add_argument("--dialect", choices=("ga", "beta"), default="ga")
    parser.add_argument("--turn-detection", choices=("client", "server_vad"), default="client")
    parser.add_argument(
        "--cancel-method", choices=("random", "barge_in", "response.cancel"), default="random"
    )
    parser.add_argument(
        "--playout-ms", type=float, default=20.0, help="jitter buffer of the simulated player"
    )
    parser.add_argument("--min-utterance-ms", type=int, default=800)
    parser.add_argument("--max-utterance-ms", type=int, default=2000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--out", default=None, help="write the results JSON here")
    parser.add_argument("--plot", default=None, help="write latency CDFs (and ramp) PNG here")
    parser.add_argument("--floor-echo", action="store_true", help="also measure an echo server")
    parser.add_argument("--server-pid", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _config(args: argparse.Namespace) -> BenchConfig:
    if args.sessions < 1:
        raise ValueError("--sessions must be at least 1")
    if not 0 < args.min_utterance_ms <= args.max_utterance_ms:
        raise ValueError("need 0 < --min-utterance-ms <= --max-utterance-ms")
    if args.duration <= 0:
        raise ValueError("--duration must be positive")
    if not 0 < args.chunk_ms <= 10_000:
        raise ValueError("--chunk-ms must be positive (and at most 10000)")
    return BenchConfig(
        url=args.url,
        sessions=args.sessions,
        duration_s=args.duration,
        chunk_ms=args.chunk_ms,
        scenario=args.scenario,
        input_dir=args.input_dir,
        dialect=args.dialect,
        api_key=args.api_key,
        server_pid=args.server_pid,
        floor_echo=args.floor_echo,
        ramp=args.ramp,
        ramp_start=args.ramp_start,
        ramp_step=args.ramp_step,
        lag_bound_ms=args.lag_bound_ms,
        turn_detection=args.turn_detection,
        cancel_method=args.cancel_method,
        playout_ms=args.playout_ms,
        min_utterance_ms=args.min_utterance_ms,
        max_utterance_ms=args.max_utterance_ms,
        seed=args.seed,
        progress=not args.quiet,
    )


def _line(name: str, dist: Any, ratio: Any = None) -> str:
    if not dist or "p50" not in dist:
        return f"  {name:<28} -"
    text = (
        f"  {name:<28} p50 {dist['p50']:>9.2f}  p95 {dist['p95']:>9.2f}  "
        f"p99 {dist['p99']:>9.2f}  (n={dist.get('count', '?')})"
    )
    if ratio:
        text += f"  x{ratio['p50']:g}/x{ratio['p95']:g}/x{ratio['p99']:g} floor"
    return text


def report_text(results: dict[str, Any]) -> str:
    agg, floor = results["aggregate"], results["floor"]
    ratio = agg["ratio_to_floor"]
    lines = [
        f"{results['server']['kind']} server, {results['sessions']} sessions, "
        f"scenario {results['config']['scenario']}, {results['config']['chunk_ms']:g} ms chunks",
        _line("floor (" + floor["basis"] + ")", floor[floor["basis"]]),
        _line("reply latency ms", agg["reply_latency_ms"], ratio["reply_latency_ms"]),
        _line("barge-in stop ms", agg["barge_in_stop_ms"], ratio["barge_in_stop_ms"]),
        _line("late audio bytes", agg["late_audio_bytes"]),
        _line("event lag ms", agg["event_lag_ms"], ratio["event_lag_ms"]),
        _line("resume ms", agg["resume_ms"], ratio["resume_ms"]),
        _line("client send lag ms", agg["send_lag_ms"]),
        f"  underruns {agg['underruns']} ({agg['underruns_per_audio_minute']} per audio min), "
        f"events lost {agg['events_lost']}, duplicated {agg['events_duplicated']}, "
        f"errors {agg['errors_by_code'] or 0}",
    ]
    stream = agg.get("stream")
    if stream is not None:
        rate = stream["output_rate"]
        lines.append(_line("frame latency ms", stream["frame_latency_ms"]))
        lines.append(_line("first output ms", stream["first_output_ms"]))
        lines.append(_line("latency slope ms/min", stream["latency_slope_ms_per_min"]))
        lines.append(
            f"  output rate min {rate['min'] if rate else '-'} / p50 {rate['p50'] if rate else '-'}"
            f" of real time; {stream['sessions_held_realtime']} of {results['sessions']} sessions"
            f" held in real time (rate >= {stream['realtime_rate']:g}, frame latency p95 < "
            f"{stream['realtime_p95_ms']:g} ms)"
        )
    client = results["client"]
    lines.append(_line("client loop lag ms", client.get("loop_lag_ms")))
    lines.append(_line("client gc pause ms", client.get("gc_pause_ms")))
    metrics = results.get("server_metrics") or {}
    lines.append(_line("server-side reply ms", metrics.get("reply_latency_ms")))
    lines.append(_line("server-side barge-in ms", metrics.get("barge_in_stop_ms")))
    res = results.get("server_resources") or {}
    if res.get("source") == "proc":
        lines.append(
            f"  server CPU {res['cpu_percent']}% ({res['cpu_percent_per_session']}% per session), "
            f"RSS +{res['rss_per_session_bytes'] / 1024:.0f} KiB per session"
        )
    if results.get("ramp"):
        ramp = results["ramp"]
        rule = (
            "every session in real time"
            if stream is not None
            else f"p95 event lag <= {ramp['lag_bound_ms']:g} ms"
        )
        lines.append(f"  ramp: {ramp['max_sessions_held']} sessions held ({rule}, no errors)")
    return "\n".join(lines)


def run_command(args: argparse.Namespace) -> int:
    try:
        cfg = _config(args)
    except ValueError as exc:
        print(f"omniduplex bench: {exc}", file=sys.stderr)
        return 2
    try:
        results = asyncio.run(run_bench(cfg))
    except (OSError, ValueError) as exc:
        print(f"omniduplex bench: {exc}", file=sys.stderr)
        return 1
    samples = results.pop("samples", {})
    if args.plot:
        from .plot import plot_results

        plot_results(results, samples, args.plot)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2))
    print(report_text(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="omniduplex bench")
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
