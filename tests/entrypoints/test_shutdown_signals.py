"""``omniduplex serve`` stopped the way systemd and container runtimes stop it: SIGTERM to
the whole process group. The stage worker process gets the signal as well as the server;
the server's shutdown stops it in order, so its exit is no worker death (no ERROR, no
restart), is said at most once at INFO, and no process is left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from omniduplex.config.pipeline import DEPLOY_DIR

# Guards against hangs only; no assertion depends on how long anything takes.
TIMEOUT_S = 120.0
SERVE = (sys.executable, "-m", "omniduplex.entrypoints.cli", "serve")

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir() or not hasattr(signal, "sigwaitinfo"),
    reason="finds the server's children in /proc; the worker tells senders apart by sigwaitinfo",
)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def _descendants(pid: int) -> set[int]:
    found = _children(pid)
    for child in tuple(found):
        found |= _descendants(child)
    return found


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie that only its new parent can reap."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_healthy(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server exited before it was ready"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise AssertionError("the server did not become healthy")


def test_sigterm_to_the_process_group_stops_the_worker_in_order(tmp_path: Path) -> None:
    # cascade-rules with its responder in a worker process, as cascade runs llama.cpp.
    raw = yaml.safe_load((DEPLOY_DIR / "cascade-rules.yaml").read_text())
    (responder,) = [stage for stage in raw["stages"] if stage["name"] == "responder"]
    responder["worker"] = "process"
    deploy = tmp_path / "cascade-process.yaml"
    deploy.write_text(yaml.safe_dump(raw))
    port = _free_port()
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*SERVE, str(deploy), "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_healthy(port, process)
        started = _descendants(process.pid)
        assert started, "the responder runs in a child process"
        os.killpg(process.pid, signal.SIGTERM)
        status = process.wait(TIMEOUT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    log = log_path.read_text()
    # uvicorn ends a server stopped by a signal with that signal, as supervisors expect
    # (systemd counts it a clean stop).
    assert status == -signal.SIGTERM, log
    assert "Traceback" not in log
    assert "worker died" not in log and "restarting stage" not in log, log
    assert not [line for line in log.splitlines() if line.startswith(("ERROR", "WARNING"))], log
    exits = [line for line in log.splitlines() if "worker process" in line]
    assert len(exits) <= 1 and all(line.startswith("INFO") for line in exits), exits
    assert "Application shutdown complete" in log
    # multiprocessing's resource tracker ends when it reads the server's end of its pipe
    # close, a moment after the server; the stage worker is gone before the server is.
    deadline = time.monotonic() + TIMEOUT_S
    while [pid for pid in started if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in started if _alive(pid)], "a child outlived the server"
