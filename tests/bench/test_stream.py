"""``omniduplex bench --scenario stream``: the timeline's arithmetic on made-up clocks, and
the scenario end to end against a real ``personaplex-tiny`` server and a plain Realtime
test double. No assertion depends on how long anything takes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "entrypoints" / "openai"))
sys.path.insert(0, str(HERE))

from server_harness import run_server  # noqa: E402
from test_bench_command import realtime_double  # noqa: E402

from omniduplex.bench.timeline import REALTIME_P95_MS, REALTIME_RATE, StreamTimeline  # noqa: E402
from omniduplex.entrypoints.cli import main  # noqa: E402

FRAME_S = 0.08


def lockstep(
    frames: int, latency_s: float, *, stall_at: int | None = None, backlog: int = 0
) -> StreamTimeline:
    """A client sending one 80 ms frame every 80 ms from t=10 s and a lockstep server
    answering frame k ``latency_s`` after it was sent; from frame ``stall_at`` on, each
    answer comes ``backlog`` frames late (a backlog that is never made up)."""
    timeline = StreamTimeline()
    for k in range(frames):
        sent = 10.0 + k * FRAME_S
        timeline.on_sent(sent, 80.0)
        late = backlog * FRAME_S if stall_at is not None and k >= stall_at else 0.0
        # The answer to frame k arrives before frame k+1 is sent (latency < one frame).
        timeline.on_audio(sent + latency_s + late, "resp_1", 80.0)
    timeline.ended(10.0 + frames * FRAME_S)
    return timeline


def test_a_lockstep_server_at_constant_latency_measures_that_latency_and_no_growth() -> None:
    summary = lockstep(500, 0.030).summary()
    latency = summary["frame_latency_ms"]
    assert latency["count"] == 500
    assert latency["min"] == pytest.approx(30.0, abs=1e-6)
    assert latency["max"] == pytest.approx(30.0, abs=1e-6)
    assert summary["latency_growth"]["slope_ms_per_min"] == pytest.approx(0.0, abs=1e-6)
    assert summary["latency_growth"]["window_s"] == 10.0
    # 500 frames of output between the first arrival and the end of the stream.
    assert summary["output_rate"] == pytest.approx(500 * 80 / (500 * 80 - 30), rel=1e-3)
    assert summary["first_output_ms"] == pytest.approx(30.0, abs=1e-6)
    assert summary["held_realtime"] is True
    assert summary["frames_ahead_of_input"] == 0


def test_a_backlog_that_is_never_made_up_shows_as_growth() -> None:
    # After frame 300 every answer comes 3 frames (240 ms) late: the latency ratchet.
    summary = lockstep(500, 0.030, stall_at=300, backlog=3).summary()
    growth = summary["latency_growth"]
    assert growth["first_p50_ms"] == pytest.approx(30.0, abs=1e-6)
    assert growth["last_p50_ms"] == pytest.approx(270.0, abs=1e-6)
    assert growth["slope_ms_per_min"] > 0
    assert summary["frame_latency_ms"]["max"] == pytest.approx(270.0, abs=1e-6)
    # p95 over the bound: this session is not held in real time.
    assert summary["frame_latency_ms"]["p95"] >= REALTIME_P95_MS
    assert summary["held_realtime"] is False


def test_the_first_output_is_anchored_to_the_freshest_input() -> None:
    # The server's first output comes after three frames were sent: it is taken to answer
    # the third, and the next outputs the frames after it.
    timeline = StreamTimeline()
    for k in range(3):
        timeline.on_sent(k * FRAME_S, 80.0)
    timeline.on_audio(2 * FRAME_S + 0.050, "resp_1", 80.0)
    timeline.on_sent(3 * FRAME_S, 80.0)
    timeline.on_audio(3 * FRAME_S + 0.020, "resp_1", 80.0)
    assert [round(v, 6) for _, v in timeline.latency] == [50.0, 20.0]
    assert timeline.summary()["first_output_ms"] == pytest.approx(210.0)


def test_a_listening_gap_counts_the_frames_it_spans_and_output_past_input_is_counted() -> None:
    timeline = StreamTimeline()

    def frame(k: int, response_id: str | None) -> None:
        """Frame k is sent; the model's answer to it (if it speaks) comes 10 ms later."""
        if k < 8:  # the client stops after 8 frames
            timeline.on_sent(k * FRAME_S, 80.0)
        if response_id is not None:
            timeline.on_audio(k * FRAME_S + 0.010, response_id, 80.0)

    frame(0, "resp_1")
    frame(1, "resp_1")
    for k in (2, 3, 4):  # the model listened for frames 2..4
        frame(k, None)
    frame(5, "resp_2")
    assert timeline.gaps_inferred == 1
    assert timeline.gap_ms_inferred == 240.0
    assert [round(v, 6) for _, v in timeline.latency] == [10.0, 10.0, 10.0]
    # Output for input the client never sent (the server fed silence): no latency.
    for k in range(6, 10):
        frame(k, "resp_2")
    assert timeline.frames_ahead_of_input == 2
    assert len(timeline.latency) == 5
    # Once the stream has ended, what the server sends answers silence: not "ahead".
    timeline.ended(10 * FRAME_S)
    timeline.on_audio(11 * FRAME_S, "resp_2", 80.0)
    assert timeline.frames_ahead_of_input == 2


def test_output_rate_counts_what_arrived_by_the_end_of_the_stream() -> None:
    timeline = StreamTimeline()
    for k in range(100):
        timeline.on_sent(k * FRAME_S, 80.0)
        if k % 2 == 0:  # the server keeps half of real time
            timeline.on_audio(k * FRAME_S + 0.010, "resp_1", 80.0)
    timeline.ended(100 * FRAME_S)
    timeline.on_audio(100 * FRAME_S + 1.0, "resp_1", 80.0)  # after the end: not counted
    rate = timeline.output_rate()
    assert rate == pytest.approx(50 * 0.08 / (100 * FRAME_S - 0.010), rel=1e-6)
    assert rate < REALTIME_RATE
    assert timeline.summary()["held_realtime"] is False


# ---- end to end ---------------------------------------------------------------------------


def bench_stream(url: str, out: Path, *extra: str) -> dict[str, Any]:
    argv = ["bench", "--url", url, "--scenario", "stream", "--quiet", "--out", str(out), *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


def check_stream_consistency(results: dict[str, Any], *, duration_s: float) -> None:
    """What the numbers must satisfy whatever the machine's speed."""
    agg = results["aggregate"]
    stream = agg["stream"]
    chunk_ms = results["config"]["chunk_ms"]
    per_session = [s["stream"] for s in results["per_session"]]
    assert len(per_session) == results["sessions"]
    for session in per_session:
        # Whole chunks, no more than the duration allows.
        assert session["input_ms_sent"] % chunk_ms == 0
        assert 0 < session["input_ms_sent"] <= duration_s * 1000.0 + chunk_ms
        latency = session["frame_latency_ms"]
        if session["output_ms_received"]:
            assert session["output_unit_ms"] > 0
            frames = session["output_ms_received"] / session["output_unit_ms"]
            # Every latency sample is one output unit that answered sent input.
            assert latency is None or latency["count"] <= frames
            assert latency is None or latency["min"] >= 0.0
        held = (
            session["output_rate"] is not None
            and latency is not None
            and session["output_rate"] >= stream["realtime_rate"]
            and latency["p95"] < stream["realtime_p95_ms"]
        )
        assert session["held_realtime"] is held
    assert stream["sessions_held_realtime"] == sum(s["held_realtime"] for s in per_session)
    counts = sum(s["frame_latency_ms"]["count"] for s in per_session if s["frame_latency_ms"])
    assert (stream["frame_latency_ms"] or {"count": 0})["count"] == counts
    assert sum(b["t_s"] >= 0 for b in stream["timeline"]) == len(stream["timeline"])


def warm_up(url: str, out: Path) -> None:
    """One short stream session at a time until the model's audio comes back: the model is
    built and stepping, so the measured run sees a running server (a hang guard only)."""
    for _ in range(10):
        results = bench_stream(url, out, "--sessions", "1", "--duration", "3", "--chunk-ms", "80")
        if results["per_session"][0]["stream"]["output_ms_received"] > 0:
            return
    raise AssertionError("personaplex-tiny never spoke in 10 warm-up sessions")


def test_stream_against_personaplex_tiny_in_80ms_chunks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("moshi")
    # The plot needs the bench extra's matplotlib, which the test command does not install.
    plot = tmp_path / "out.png"
    plotting = importlib.util.find_spec("matplotlib") is not None
    with run_server("personaplex-tiny") as server:
        warm_up(server.ws_url, tmp_path / "warm.json")
        results = bench_stream(
            server.ws_url, tmp_path / "out.json", "--sessions", "2", "--duration", "5",
            "--chunk-ms", "80", *(["--plot", str(plot)] if plotting else []),
        )  # fmt: skip
    if plotting:
        assert plot.read_bytes().startswith(b"\x89PNG")
    assert results["config"]["chunk_ms"] == 80
    assert results["config"]["scenario"] == "stream"
    assert results["aggregate"]["errors_by_code"] == {}  # no commit was refused
    stream = results["aggregate"]["stream"]
    # The model spoke: after its voice prompt, output came back for the streamed input.
    assert sum(s["stream"]["output_ms_received"] for s in results["per_session"]) > 0
    assert stream["frame_latency_ms"]["count"] > 0
    assert stream["first_output_ms"]["count"] == 2
    check_stream_consistency(results, duration_s=5.0)


def test_stream_sends_only_audio_to_a_plain_realtime_server(tmp_path: Path) -> None:
    with realtime_double() as double:
        results = bench_stream(
            double.url, tmp_path / "out.json", "--sessions", "2", "--duration", "1.5",
            "--chunk-ms", "30",
        )  # fmt: skip
    assert set(double.commands) == {"session.update", "input_audio_buffer.append"}
    stream = results["aggregate"]["stream"]
    assert stream["sessions_held_realtime"] == 0  # the double never speaks
    assert stream["output_rate"] is None
    check_stream_consistency(results, duration_s=1.5)


def test_chunk_sizes_are_any_whole_number_of_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "ws://127.0.0.1:1/v1/realtime"
    assert main(["bench", "--url", url, "--chunk-ms", "0"]) == 2
    assert "--chunk-ms" in capsys.readouterr().err
    assert main(["bench", "--url", url, "--chunk-ms", "-80"]) == 2
    with realtime_double() as double:
        # 0.01 ms is a quarter of a sample at 24 kHz: refused before any session opens.
        argv = ["bench", "--url", double.url, "--scenario", "stream", "--chunk-ms", "0.01"]
        assert main([*argv, "--quiet"]) == 1
        assert "whole samples" in capsys.readouterr().err
        assert "input_audio_buffer.append" not in double.commands
        # 12.5 ms is 300 samples at 24 kHz: accepted.
        results = bench_stream(
            double.url, tmp_path / "out.json", "--sessions", "1", "--duration", "1",
            "--chunk-ms", "12.5",
        )  # fmt: skip
    assert results["per_session"][0]["stream"]["input_ms_sent"] % 12.5 == 0
