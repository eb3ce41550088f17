"""Drive N concurrent sessions for a while and summarize what they measured."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from ..clients import DuplexClientError, DuplexConnectionError, DuplexProtocolError
from .audio import load_utterances, synth_utterance
from .drivers import Driver, DuplexDriver, RealtimeDriver, host_port, probe_server
from .floor import FloorProbe, echo_floor
from .health import ClientHealth
from .ramp import held, ramp_levels, ramp_point
from .recorder import SessionRecorder
from .server_stats import ProcSampler, fetch_metrics, find_listening_pid, metrics_report
from .stats import ratios, summarize
from .stream import STREAM_RATE_HZ, aggregate_stream, stream_session
from .timeline import StreamTimeline

__all__ = ["BenchConfig", "run_bench"]

SCHEMA = "omniduplex.bench/1"
SCENARIOS = ("talk", "barge-in", "resume", "mixed", "stream")
_MIXED = (("talk", 0.5), ("barge-in", 0.3), ("resume", 0.2))
#: Latency keys of ``aggregate`` that also get ratios to the floor.
LATENCY_KEYS = ("reply_latency_ms", "barge_in_stop_ms", "event_lag_ms", "resume_ms")


@dataclass
class BenchConfig:
    url: str
    sessions: int = 10
    duration_s: float = 20.0
    chunk_ms: float = 20
    scenario: str = "talk"
    input_dir: str | None = None
    dialect: str = "ga"
    api_key: str | None = None
    server_pid: int | None = None
    floor_echo: bool = False
    ramp: bool = False
    ramp_start: int | None = None
    ramp_step: int | None = None
    lag_bound_ms: float = 50.0
    turn_detection: str = "client"
    cancel_method: str = "random"
    playout_ms: float = 20.0
    min_utterance_ms: int = 800
    max_utterance_ms: int = 2000
    turn_timeout_s: float = 30.0
    connect_timeout_s: float = 30.0
    seed: int = 0
    progress: bool = True
    progress_interval_s: float = 2.0


def _log(cfg: BenchConfig, message: str) -> None:
    if cfg.progress:
        print(f"[bench] {message}", file=sys.stderr, flush=True)


# ---- one session ---------------------------------------------------------------------------


async def _stream(driver: Driver, rec: SessionRecorder, pcm: bytes, chunk_ms: float) -> None:
    """Send ``pcm`` in ``chunk_ms`` appends at real-time pace; record how late each left."""
    step = round(driver.input_rate_hz * chunk_ms / 1000.0) * 2
    started = time.perf_counter()
    for k, offset in enumerate(range(0, len(pcm), step)):
        due = started + k * chunk_ms / 1000.0
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        rec.send_lag_ms.append(max(0.0, (time.perf_counter() - due) * 1000.0))
        chunk = pcm[offset : offset + step]
        await driver.append(chunk)
        rec.input_ms_sent += len(chunk) * 1000.0 / (2 * driver.input_rate_hz)


def _pick_scenario(cfg: BenchConfig, driver: Driver, rng: random.Random) -> str:
    scenario = cfg.scenario
    if scenario == "mixed":
        roll, acc = rng.random(), 0.0
        for name, weight in _MIXED:
            acc += weight
            if roll < acc:
                scenario = name
                break
    if scenario == "resume" and not driver.supports_resume:
        return "talk"
    return scenario


async def _turn(
    driver: Driver,
    rec: SessionRecorder,
    cfg: BenchConfig,
    rng: random.Random,
    pcm: bytes,
    scenario: str,
) -> None:
    await _stream(driver, rec, pcm, cfg.chunk_ms)
    if cfg.turn_detection == "server_vad":
        rec.committed(time.perf_counter())
        silence = bytes(driver.input_rate_hz * 2 * 600 // 1000)
        waiter = asyncio.ensure_future(driver.next_response(cfg.turn_timeout_s))
        await _stream(driver, rec, silence, cfg.chunk_ms)
        handle = await waiter
    else:
        await driver.commit()
        handle = await driver.next_response(cfg.turn_timeout_s)
    rec.turns += 1
    expected_ms = len(pcm) * 1000.0 / (2 * driver.input_rate_hz)
    if scenario in ("barge-in", "resume"):
        if not await driver.first_audio(handle, cfg.turn_timeout_s):
            return
        await asyncio.sleep(rng.uniform(0.1, 0.8) * expected_ms / 1000.0)
        if not handle.done:
            if scenario == "barge-in":
                method = cfg.cancel_method
                if method == "random":
                    method = rng.choice(("barge_in", "response.cancel"))
                if not driver.supports_barge_in:
                    method = "response.cancel"
                played = handle.received_ms
                await driver.cancel(handle, method)
                await handle.wait(cfg.turn_timeout_s)
                await driver.ack(handle, played, truncate=True)
                return
            driver.drop()
    await handle.wait(cfg.turn_timeout_s)
    await driver.ack(handle, handle.received_ms)


async def _session(
    index: int,
    cfg: BenchConfig,
    kind: str,
    utterances: list[bytes],
    deadline: float,
    rec: SessionRecorder,
    state: dict[str, int],
) -> None:
    rng = random.Random(cfg.seed * 1_000_003 + index)
    vad = cfg.turn_detection == "server_vad"
    driver_class: type[Driver] = DuplexDriver if kind == "duplex" else RealtimeDriver
    driver = driver_class(rec, cfg.url, dialect=cfg.dialect, api_key=cfg.api_key, server_vad=vad)
    await asyncio.sleep(rng.uniform(0.0, min(1.0, cfg.duration_s / 4)))
    try:
        await asyncio.wait_for(driver.open(), cfg.connect_timeout_s)
    except DuplexProtocolError as exc:
        rec.error(exc.code or "protocol_error")
        return
    except (DuplexClientError, OSError, TimeoutError) as exc:
        rec.error("connect_failed" if not isinstance(exc, TimeoutError) else "connect_timeout")
        return
    state["open"] += 1
    try:
        if cfg.scenario == "resume" and not driver.supports_resume:
            rec.error("resume_unsupported")
        while time.perf_counter() < deadline:
            scenario = _pick_scenario(cfg, driver, rng)
            pcm = rng.choice(utterances)
            try:
                await _turn(driver, rec, cfg, rng, pcm, scenario)
            except DuplexProtocolError as exc:
                rec.error(exc.code or "protocol_error")
            await asyncio.sleep(rng.uniform(0.1, 0.4))
    except DuplexConnectionError:
        rec.error("connection_lost")
    except DuplexClientError as exc:
        rec.error(getattr(exc, "code", None) or type(exc).__name__)
    except TimeoutError:
        rec.error("timeout")
    except OSError:
        rec.error("connection_lost")
    finally:
        state["open"] -= 1
        state["done"] += 1
        with contextlib.suppress(Exception):
            await driver.close()


async def _stream_session(
    index: int,
    cfg: BenchConfig,
    utterances: list[bytes],
    deadline: float,
    rec: SessionRecorder,
    state: dict[str, int],
    speaks_first: bool,
) -> None:
    rng = random.Random(cfg.seed * 1_000_003 + index)
    delay = rng.uniform(0.0, min(1.0, cfg.duration_s / 4))
    await stream_session(cfg, utterances, deadline, rec, state, delay, speaks_first=speaks_first)


# ---- one level (N sessions) ------------------------------------------------------------------


def _aggregate(recs: list[SessionRecorder], floor_ms: float | None, echo_ms: float | None):
    def flat(name: str) -> list[float]:
        return [v for r in recs for v in getattr(r, name)]

    errors: dict[str, int] = {}
    statuses: dict[str, int] = {}
    methods: dict[str, int] = {}
    for r in recs:
        for code, n in r.errors.items():
            errors[code] = errors.get(code, 0) + n
        for status, n in r.statuses.items():
            statuses[status] = statuses.get(status, 0) + n
        for method, n in r.cancel_methods.items():
            methods[method] = methods.get(method, 0) + n
    audio_s = sum(r.audio_ms_received for r in recs) / 1000.0
    underruns = sum(len(r.gap_ms) for r in recs)
    out: dict[str, Any] = {
        "sessions": len(recs),
        "sessions_opened": sum(1 for r in recs if r.session_id is not None),
        "turns": sum(r.turns for r in recs),
        "events": sum(r.events for r in recs),
        "responses": statuses,
        "cancel_methods": methods,
        "cancels_too_late": sum(r.cancels_too_late for r in recs),
        "reply_latency_ms": summarize(flat("reply_ms")),
        "barge_in_stop_ms": summarize(flat("cancel_ms")),
        "late_audio_bytes": summarize(flat("late_audio_bytes")),
        "late_audio_ms": summarize(flat("late_audio_ms")),
        "event_lag_ms": summarize(flat("lag_ms")),
        "underruns": underruns,
        "underruns_per_audio_minute": round(underruns / audio_s * 60.0, 3) if audio_s else None,
        "underrun_gap_ms": summarize(flat("gap_ms")),
        "send_lag_ms": summarize(flat("send_lag_ms")),
        "drops": sum(r.drops for r in recs),
        "resume_ms": summarize(flat("resume_ms")),
        "events_lost": sum(r.events_lost for r in recs),
        "events_duplicated": sum(r.events_duplicated for r in recs),
        "replay_duplicates_dropped": sum(r.replay_duplicates_dropped for r in recs),
        "audio_s_received": round(audio_s, 3),
        "audio_ms_missing": round(sum(r.audio_ms_missing for r in recs), 1),
        "errors": sum(errors.values()),
        "errors_by_code": errors,
    }
    out["ratio_to_floor"] = {key: ratios(out[key], floor_ms) for key in LATENCY_KEYS}
    if echo_ms is not None:
        out["ratio_to_echo"] = {key: ratios(out[key], echo_ms) for key in LATENCY_KEYS}
    return out


async def _progress(cfg: BenchConfig, recs, state, started: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), cfg.progress_interval_s)
        lag = summarize(v for r in recs for v in r.lag_ms[-200:])
        reply = summarize(v for r in recs for v in r.reply_ms[-20:])
        errors = sum(sum(r.errors.values()) for r in recs)
        _log(
            cfg,
            f"t={time.perf_counter() - started:5.1f}s open={state['open']}/{len(recs)} "
            f"turns={sum(r.turns for r in recs)} errors={errors} "
            f"lag_p95={lag['p95'] if lag else '-'}ms "
            f"reply_p50={reply['p50'] if reply else '-'}ms",
        )


async def run_level(
    cfg: BenchConfig,
    sessions: int,
    kind: str,
    utterances: list[bytes],
    *,
    speaks_first: bool = True,
) -> dict[str, Any]:
    """``sessions`` concurrent sessions for ``cfg.duration_s``; the level's report."""
    host, port = host_port(cfg.url)
    scheme = "https" if cfg.url.startswith(("wss", "https")) else "http"
    http_url = f"{scheme}://{host}:{port}"
    pid = cfg.server_pid or find_listening_pid(host, port)
    metrics_before = await fetch_metrics(http_url, cfg.api_key)
    echo: dict[str, Any] | None = None
    if cfg.floor_echo:
        samples = round(cfg.chunk_ms * (16 if kind == "duplex" else 24))
        frame = len(utterances[0][: 2 * samples]) * 4 // 3
        _log(cfg, f"echo floor: {sessions} connections")
        raw = await echo_floor(
            sessions,
            frame_bytes=frame + 120,
            chunk_ms=cfg.chunk_ms,
            duration_s=min(cfg.duration_s, 5.0),
        )
        echo = {
            "rtt_ms": summarize(raw["rtts"]),
            "connections": sessions,
            "errors": raw["errors"],
        }
    probe = FloorProbe(cfg.url, kind=kind, dialect=cfg.dialect, api_key=cfg.api_key)
    stop_probe = asyncio.Event()
    probe_task = asyncio.ensure_future(probe.run(stop_probe))
    await asyncio.sleep(1.0)  # idle floor: the probe alone
    idle_hb, idle_ping = probe.mark()
    sampler = ProcSampler(pid) if pid is not None else None
    client_cpu = time.process_time()
    streaming = cfg.scenario == "stream"
    recs = [
        SessionRecorder(
            index=i,
            scenario=cfg.scenario,
            playout_ms=cfg.playout_ms,
            stream=StreamTimeline() if streaming else None,
        )
        for i in range(sessions)
    ]
    state = {"open": 0, "done": 0}
    started = time.perf_counter()
    deadline = started + cfg.duration_s
    stop_progress = asyncio.Event()
    progress = asyncio.ensure_future(_progress(cfg, recs, state, started, stop_progress))
    health = ClientHealth()
    health_task = asyncio.ensure_future(health.run(stop_progress))

    async def sample_loop() -> None:
        while sampler is not None:
            sampler.sample()
            await asyncio.sleep(1.0)

    sampling = asyncio.ensure_future(sample_loop())
    _log(cfg, f"{sessions} sessions, scenario {cfg.scenario}, {cfg.duration_s:g}s ({kind})")
    try:
        await asyncio.gather(
            *(
                _stream_session(i, cfg, utterances, deadline, recs[i], state, speaks_first)
                if streaming
                else _session(i, cfg, kind, utterances, deadline, recs[i], state)
                for i in range(sessions)
            )
        )
    finally:
        wall = time.perf_counter() - started
        stop_progress.set()
        stop_probe.set()
        sampling.cancel()
        for task in (progress, probe_task, sampling, health_task):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 10.0)
    client_cpu = time.process_time() - client_cpu
    metrics_after = await fetch_metrics(http_url, cfg.api_key)
    loaded_hb = probe.heartbeat_ms[idle_hb:]
    loaded_ping = probe.ping_ms[idle_ping:]
    floor: dict[str, Any] = {
        "heartbeat_rtt_ms": summarize(loaded_hb),
        "ws_ping_rtt_ms": summarize(loaded_ping),
        "idle_heartbeat_rtt_ms": summarize(probe.heartbeat_ms[:idle_hb]),
        "idle_ws_ping_rtt_ms": summarize(probe.ping_ms[:idle_ping]),
        "echo": echo,
        "probe_error": probe.error,
    }
    basis = "heartbeat_rtt_ms" if floor["heartbeat_rtt_ms"] else "ws_ping_rtt_ms"
    floor["basis"] = basis
    floor["floor_ms"] = floor[basis]["p50"] if floor[basis] else None
    echo_ms = echo["rtt_ms"]["p50"] if echo and echo["rtt_ms"] else None
    resources: dict[str, Any] | None
    if sampler is not None:
        resources = sampler.report(wall, sessions)
    elif metrics_after is not None:
        resources = {"source": "metrics", "note": "remote server: CPU and RSS not visible"}
    else:
        resources = None
    aggregate = _aggregate(recs, floor["floor_ms"], echo_ms)
    if streaming:
        aggregate["stream"] = aggregate_stream(recs, started)
    return {
        "sessions": sessions,
        "wall_s": round(wall, 3),
        "floor": floor,
        "aggregate": aggregate,
        "server_resources": resources,
        "server_metrics": metrics_report(metrics_before, metrics_after, sessions),
        "client": {
            "pid": os.getpid(),
            "cpu_s": round(client_cpu, 3),
            "cpu_percent": round(client_cpu / wall * 100.0, 1) if wall else None,
            "loop_lag_ms": summarize(health.loop_lag_ms),
            "gc_pause_ms": summarize(health.gc_pause_ms),
        },
        "per_session": [r.summary() for r in recs],
        "_samples": {
            "reply_latency_ms": [v for r in recs for v in r.reply_ms],
            "barge_in_stop_ms": [v for r in recs for v in r.cancel_ms],
            "event_lag_ms": [v for r in recs for v in r.lag_ms],
            "resume_ms": [v for r in recs for v in r.resume_ms],
            "floor_ms": loaded_hb or loaded_ping,
            "frame_latency_ms": [v for r in recs if r.stream for _, v in r.stream.latency],
        },
    }


async def run_bench(cfg: BenchConfig) -> dict[str, Any]:
    """The whole run (one level, or a ramp); the results object (see the package doc)."""
    if cfg.scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {', '.join(SCENARIOS)}")
    started = time.time()
    load_start = os.getloadavg()
    server = await probe_server(cfg.url, dialect=cfg.dialect, api_key=cfg.api_key)
    kind = server["kind"]
    rate = STREAM_RATE_HZ if cfg.scenario == "stream" else 16_000 if kind == "duplex" else 24_000
    samples = cfg.chunk_ms * rate / 1000.0
    if abs(samples - round(samples)) > 1e-9:
        raise ValueError(f"--chunk-ms {cfg.chunk_ms:g} is not whole samples at {rate} Hz")
    if cfg.input_dir:
        utterances = load_utterances(cfg.input_dir, rate)
    else:
        rng = random.Random(cfg.seed)
        utterances = [
            synth_utterance(rng, rate, cfg.min_utterance_ms, cfg.max_utterance_ms)
            for _ in range(16)
        ]
    _log(cfg, f"server at {cfg.url} is a {kind} server")
    levels: list[dict[str, Any]] = []
    ramp: dict[str, Any] | None = None
    if cfg.ramp:
        most_held = 0
        for n in ramp_levels(cfg):
            level = await run_level(cfg, n, kind, utterances, speaks_first=server["speaks_first"])
            ok = held(level, cfg.lag_bound_ms)
            levels.append(level)
            lag = level["aggregate"]["event_lag_ms"]
            _log(
                cfg,
                f"ramp: {n} sessions {'held' if ok else 'NOT held'} "
                f"(p95 event lag {lag['p95'] if lag else '-'} ms, "
                f"{level['aggregate']['errors']} errors)",
            )
            if not ok:
                break
            most_held = n
        ramp = {
            "lag_bound_ms": cfg.lag_bound_ms,
            "max_sessions_held": most_held,
            "levels": [ramp_point(level, cfg.lag_bound_ms) for level in levels],
        }
    else:
        levels.append(
            await run_level(
                cfg, cfg.sessions, kind, utterances, speaks_first=server["speaks_first"]
            )
        )
    final = levels[-1]
    samples = final.pop("_samples")
    for level in levels[:-1]:
        level.pop("_samples", None)
    config = asdict(cfg)
    config.pop("api_key", None)
    return {
        "schema": SCHEMA,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "wall_s": round(time.time() - started, 3),
        "config": config,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            # Other work on the machine skews every number: 1/5/15-minute load averages.
            "loadavg_start": [round(x, 2) for x in load_start],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        },
        "server": {"url": cfg.url, **server},
        "sessions": final["sessions"],
        "floor": final["floor"],
        "aggregate": final["aggregate"],
        "server_resources": final["server_resources"],
        "server_metrics": final["server_metrics"],
        "client": final["client"],
        "per_session": final["per_session"],
        "ramp": ramp,
        "samples": samples,
    }
