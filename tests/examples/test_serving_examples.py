"""examples/barge_in_client.py and examples/multi_session.py run to completion against a
real server started here (and the barge-in scenario also in process, with --inline)."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "entrypoints" / "openai"))

from server_harness import run_server  # noqa: E402

EXAMPLES = ROOT / "examples"
# A guard against hangs only.
TIMEOUT_S = 120
GRACE_S = 0.5


@pytest.fixture(scope="module")
def server():
    # The paced loopback model, so an answer is still streaming when it is interrupted.
    with run_server("loopback") as running:
        yield running


@pytest.fixture
def small_server():
    # multi_session.py's server: a small admission limit and a short disconnect grace.
    with run_server(
        "loopback", max_sessions=3, disconnect_grace_s=GRACE_S, reaper_interval_s=0.05
    ) as running:
        yield running


def run_example(name: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def check_wavs(out: Path) -> None:
    names = sorted(p.name for p in out.glob("*.wav"))
    assert names == ["response_1_cancelled.wav", "response_2_completed.wav"]
    for path in out.glob("*.wav"):
        with wave.open(str(path)) as wav:
            assert wav.getnchannels() == 1 and wav.getsampwidth() == 2
            assert wav.getframerate() == 24_000 and wav.getnframes() > 0


def test_barge_in_client_over_the_network(server, tmp_path: Path) -> None:
    out = run_example("barge_in_client.py", "--url", server.ws_url, "--out", str(tmp_path))
    assert "answer cancelled" in out and "answer completed" in out
    assert "-> barge_in" in out and "<- session.closed" in out
    assert "errors: 0; interrupted: True; OK" in out
    check_wavs(tmp_path)


def test_barge_in_client_with_response_cancel(server, tmp_path: Path) -> None:
    out = run_example(
        "barge_in_client.py", "--url", server.ws_url, "--out", str(tmp_path), "--cancel"
    )
    assert "-> response.cancel" in out and "OK" in out
    check_wavs(tmp_path)


def test_barge_in_client_inline(tmp_path: Path) -> None:
    out = run_example("barge_in_client.py", "--inline", "--out", str(tmp_path))
    assert "in process" in out and "errors: 0; interrupted: True; OK" in out
    check_wavs(tmp_path)


def test_multi_session(small_server) -> None:
    out = run_example("multi_session.py", "--url", small_server.ws_url, "--grace-s", str(GRACE_S))
    assert "3 sessions open; the next one: resource_exhausted" in out
    assert "each exactly once, in order" in out and "<- connection.resumed" in out
    assert "connection A ended: session_replaced" in out
    assert "resume refused: session_resume_expired" in out
    assert "admission: ok, resume: ok, takeover: ok, expiry: ok" in out
