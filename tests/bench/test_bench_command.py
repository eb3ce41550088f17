"""``omniduplex bench`` end to end: against our server (each scenario, ramp, plot) and
against a plain Realtime test double. No assertion depends on how long anything takes."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import threading
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "entrypoints" / "openai"))

from server_harness import free_port, run_server  # noqa: E402

from omniduplex.bench.stats import histogram_quantiles, parse_metrics, summarize  # noqa: E402
from omniduplex.entrypoints.cli import main  # noqa: E402

DIST_KEYS = {"count", "mean", "p50", "p95", "p99", "min", "max"}
AGGREGATE_KEYS = {
    "sessions",
    "sessions_opened",
    "turns",
    "events",
    "responses",
    "cancel_methods",
    "cancels_too_late",
    "reply_latency_ms",
    "barge_in_stop_ms",
    "late_audio_bytes",
    "late_audio_ms",
    "event_lag_ms",
    "underruns",
    "underruns_per_audio_minute",
    "underrun_gap_ms",
    "send_lag_ms",
    "drops",
    "resume_ms",
    "events_lost",
    "events_duplicated",
    "replay_duplicates_dropped",
    "audio_s_received",
    "audio_ms_missing",
    "errors",
    "errors_by_code",
    "ratio_to_floor",
}
TOP_KEYS = {
    "schema",
    "started_at",
    "wall_s",
    "config",
    "machine",
    "server",
    "sessions",
    "floor",
    "aggregate",
    "server_resources",
    "server_metrics",
    "client",
    "per_session",
    "ramp",
}
FLOOR_KEYS = {
    "heartbeat_rtt_ms",
    "ws_ping_rtt_ms",
    "idle_heartbeat_rtt_ms",
    "idle_ws_ping_rtt_ms",
    "echo",
    "probe_error",
    "basis",
    "floor_ms",
}


def bench(url: str, out: Path, *extra: str) -> dict[str, Any]:
    argv = [
        "bench",
        "--url",
        url,
        "--sessions",
        "2",
        "--duration",
        "1.5",
        "--min-utterance-ms",
        "400",
        "--max-utterance-ms",
        "700",
        "--quiet",
        "--out",
        str(out),
        *extra,
    ]
    assert main(argv) == 0
    return json.loads(out.read_text())


def check_shape(results: dict[str, Any], *, kind: str, sessions: int = 2) -> None:
    assert results.keys() >= TOP_KEYS
    assert results["schema"] == "omniduplex.bench/1"
    assert results["server"]["kind"] == kind
    assert results["floor"].keys() >= FLOOR_KEYS
    agg = results["aggregate"]
    assert agg.keys() >= AGGREGATE_KEYS
    assert agg["sessions"] == sessions
    assert agg["turns"] >= 1
    for key in ("reply_latency_ms", "event_lag_ms"):
        assert agg[key] is not None and agg[key].keys() >= DIST_KEYS
    assert len(results["per_session"]) == sessions
    assert agg["events_lost"] == 0
    assert agg["events_duplicated"] == 0


@pytest.mark.parametrize("scenario", ["talk", "barge-in", "resume", "mixed"])
def test_bench_against_our_server(scenario: str, tmp_path: Path) -> None:
    with run_server("loopback", max_sessions=16) as server:
        results = bench(server.ws_url, tmp_path / "out.json", "--scenario", scenario)
    check_shape(results, kind="duplex")
    agg = results["aggregate"]
    assert agg["errors_by_code"] == {}
    assert results["floor"]["heartbeat_rtt_ms"] is not None
    assert results["floor"]["basis"] == "heartbeat_rtt_ms"
    assert agg["ratio_to_floor"]["reply_latency_ms"] is not None
    assert results["server_resources"]["source"] == "proc"
    metrics = results["server_metrics"]
    assert metrics is not None and metrics["sessions_admitted"] >= 2
    if scenario == "barge-in":
        assert sum(agg["cancel_methods"].values()) >= 1
    if scenario == "resume":
        assert agg["drops"] >= 1
        assert agg["resume_ms"] is not None


def test_bench_server_vad_with_wav_input(tmp_path: Path) -> None:
    folder = tmp_path / "wavs"
    folder.mkdir()
    t = np.arange(48_000 * 6 // 10) / 48_000
    tone = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2")
    for name in ("a.wav", "b.wav"):
        with wave.open(str(folder / name), "wb") as wav:
            wav.setnchannels(2)
            wav.setsampwidth(2)
            wav.setframerate(48_000)
            wav.writeframes(np.repeat(tone, 2).tobytes())
    with run_server("loopback", max_sessions=16) as server:
        results = bench(
            server.ws_url,
            tmp_path / "out.json",
            "--input",
            str(folder),
            "--turn-detection",
            "server_vad",
            "--chunk-ms",
            "40",
        )
    check_shape(results, kind="duplex")
    assert results["aggregate"]["errors_by_code"] == {}
    assert results["aggregate"]["responses"].get("completed", 0) >= 1


def test_bench_ramp_plot_and_echo_floor(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "out.png"
    with run_server("loopback", max_sessions=16) as server:
        results = bench(
            server.ws_url,
            tmp_path / "out.json",
            "--ramp",
            "--ramp-step",
            "1",
            "--chunk-ms",
            "100",
            "--dialect",
            "beta",
            "--floor-echo",
            "--plot",
            str(plot),
        )
    check_shape(results, kind="duplex", sessions=results["sessions"])
    ramp = results["ramp"]
    assert ramp["lag_bound_ms"] == 50.0
    assert ramp["levels"][0]["sessions"] == 1
    assert ramp["max_sessions_held"] in (0, 1, 2)
    assert results["floor"]["echo"]["rtt_ms"]["count"] > 0
    assert results["aggregate"]["ratio_to_echo"] is not None
    assert plot.read_bytes().startswith(b"\x89PNG")


# ---- a plain (non-duplex) Realtime server: a test double ------------------------------------


class RealtimeServerDouble:
    """A minimal OpenAI Realtime server: ``session.created`` without a ``resume_token``,
    ``session.update`` -> ``session.updated``, append/commit, ``response.create`` ->
    a few audio deltas and ``response.done``, ``response.cancel``. Nothing else."""

    DELTAS = 5
    DELTA_BYTES = 2400  # 50 ms of 24 kHz PCM16

    def __init__(self) -> None:
        self.port = free_port()
        self.commands: list[str] = []
        self._stop: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = self._loop.create_future()
        async with serve(self._handle, "127.0.0.1", self.port, max_size=None):
            self._ready.set()
            await self._stop

    async def _handle(self, ws: ServerConnection) -> None:
        counter = 0
        active: dict[str, asyncio.Task[None]] = {}

        async def send(obj: dict[str, Any]) -> None:
            nonlocal counter
            counter += 1
            await ws.send(orjson.dumps({"event_id": f"evt_{counter}", **obj}).decode())

        async def respond(rid: str) -> None:
            status = "completed"
            try:
                await send({"type": "response.created", "response": {"id": rid}})
                pcm = base64.b64encode(bytes(self.DELTA_BYTES)).decode()
                for _ in range(self.DELTAS):
                    await asyncio.sleep(0.05)
                    await send({"type": "response.output_audio.delta", "response_id": rid,
                                "item_id": "item_1", "output_index": 0, "content_index": 0,
                                "delta": pcm})  # fmt: skip
            except asyncio.CancelledError:
                status = "cancelled"
            active.pop(rid, None)
            await send({"type": "response.done", "response": {"id": rid, "status": status}})

        await send({"type": "session.created", "session": {"id": "sess_double"}})
        async for frame in ws:
            event = orjson.loads(frame)
            kind = event.get("type")
            self.commands.append(kind)
            if kind == "session.update":
                await send({"type": "session.updated", "session": {"id": "sess_double"}})
            elif kind == "input_audio_buffer.commit":
                await send({"type": "input_audio_buffer.committed", "item_id": "item_0"})
            elif kind == "response.create":
                rid = f"resp_{counter}"
                active[rid] = asyncio.ensure_future(respond(rid))
            elif kind == "response.cancel":
                task = active.get(event.get("response_id"))
                if task is None:
                    await send({"type": "error", "error": {"type": "invalid_request_error",
                                "code": "response_cancel_not_active", "message": "n"}})  # fmt: skip
                else:
                    task.cancel()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def __enter__(self) -> RealtimeServerDouble:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set_result, None)
        self._thread.join(10)


@contextmanager
def realtime_double() -> Iterator[RealtimeServerDouble]:
    with RealtimeServerDouble() as double:
        yield double


@pytest.mark.parametrize("scenario", ["talk", "barge-in", "resume"])
def test_bench_against_a_plain_realtime_server(scenario: str, tmp_path: Path) -> None:
    with realtime_double() as double:
        results = bench(double.url, tmp_path / "out.json", "--scenario", scenario)
    check_shape(results, kind="realtime")
    assert "barge_in" not in double.commands  # plain Realtime events only
    assert "playback.ack" not in double.commands
    assert {"session.update", "input_audio_buffer.append", "response.create"} <= set(
        double.commands
    )
    floor = results["floor"]
    assert floor["basis"] == "ws_ping_rtt_ms" and floor["ws_ping_rtt_ms"] is not None
    assert results["server_metrics"] is None
    errors = results["aggregate"]["errors_by_code"]
    if scenario == "resume":
        assert errors == {"resume_unsupported": 2}
    else:
        assert errors == {}


# ---- pieces -------------------------------------------------------------------------------


def test_summaries_and_metrics_parsing() -> None:
    assert summarize([]) is None
    dist = summarize(range(1, 101))
    assert dist is not None
    assert (dist["p50"], dist["p95"], dist["p99"], dist["count"]) == (50, 95, 99, 100)
    before = parse_metrics(
        'h_bucket{le="0.01"} 0\nh_bucket{le="0.1"} 0\nh_bucket{le="+Inf"} 0\nh_count 0\nh_sum 0\n'
    )
    after = parse_metrics(
        "# TYPE h histogram\n"
        'h_bucket{le="0.01"} 5\nh_bucket{le="0.1"} 10\nh_bucket{le="+Inf"} 10\n'
        "h_count 10\nh_sum 0.3\n"
    )
    quantiles = histogram_quantiles(before, after, "h")
    assert quantiles is not None
    assert quantiles["count"] == 10
    assert quantiles["p50"] == pytest.approx(10.0)
    assert 10.0 < quantiles["p95"] <= 100.0


def test_bench_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--url", "ws://127.0.0.1:1/v1/realtime", "--sessions", "0"]) == 2
    assert "--sessions" in capsys.readouterr().err
