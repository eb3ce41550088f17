"""A dead engine (a stage worker killed past its restart budget) says so: every live
session gets ``engine_unavailable`` and closes, ``/health`` answers 503 with the reason,
new sessions are refused the same way, and ``omniduplex serve`` exits for its supervisor.

Workers are real subprocesses, killed for real with SIGKILL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from server_harness import TIMEOUT_S, free_port, run_app, wire
from websockets.exceptions import ConnectionClosed

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.cli import ENGINE_FAILURE_EXIT_CODE
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.entrypoints.openai.api_server import build_app


def fragile_loopback():
    """Paced loopback (a reply stays in the worker while it plays) in one worker process
    that is not restarted: its first death spends the budget."""
    pipeline = load_deploy_config("loopback")
    stage = dataclasses.replace(pipeline.stages[0], worker="process", max_restarts=0)
    return dataclasses.replace(pipeline, stages=(stage,))


async def events_until_closed(client) -> tuple[list[dict], ConnectionClosed]:
    events = []
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            events.append(await client.recv())
    return events, closed.value


async def test_a_dead_engine_ends_every_session_and_refuses_new_ones(caplog) -> None:
    caplog.set_level(logging.WARNING)
    app = build_app(DuplexOmni(fragile_loopback()), model_name="loopback")
    with run_app(app) as server:
        async with (
            wire(server.ws_url + "?model=loopback") as busy,
            wire(server.ws_url + "?model=loopback&duplex=1") as idle,
        ):
            assert (await busy.recv())["type"] == "session.created"
            assert (await idle.recv())["type"] == "session.created"
            # A stock client in the middle of a reply: its request is on the worker.
            await busy.speak(3000)
            await busy.send({"type": "input_audio_buffer.commit"})
            await busy.send({"type": "response.create"})
            await busy.until("response.output_audio.delta")

            os.kill(app.state.omni.engine.stages[0].worker.pid, signal.SIGKILL)

            # Opted into our extensions: the error, then session.closed, then the close.
            idle_events, idle_close = await events_until_closed(idle)
            error, closed = idle_events[-2:]
            assert error["type"] == "error"
            assert error["error"]["type"] == "server_error"
            assert error["error"]["code"] == "engine_unavailable"
            assert closed["type"] == "session.closed"
            assert closed["reason"] == "engine_unavailable"
            assert idle_close.rcvd is not None
            assert (idle_close.rcvd.code, idle_close.rcvd.reason) == (1000, "engine_unavailable")

            # A stock client gets the same error and learns the end from the close frame.
            busy_events, busy_close = await events_until_closed(busy)
            errors = [e["error"] for e in busy_events if e["type"] == "error"]
            assert [e["code"] for e in errors] == ["engine_unavailable"]
            assert errors[0]["type"] == "server_error"
            assert "session.closed" not in {e["type"] for e in busy_events}
            assert busy_close.rcvd is not None
            assert (busy_close.rcvd.code, busy_close.rcvd.reason) == (1000, "engine_unavailable")

        async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
            health = await http.get("/health")
        assert health.status_code == 503
        assert health.json()["status"] == "dead"
        reason = health.json()["reason"]
        assert "stage 0 (loopback)" in reason and "restart budget" in reason
        assert "killed by SIGKILL" in reason
        assert reason in error["error"]["message"] and reason in errors[0]["message"]

        async with wire(server.ws_url + "?model=loopback&duplex=1") as late:
            late_events, late_close = await events_until_closed(late)
        (refusal,) = late_events
        assert refusal["type"] == "error"
        assert refusal["error"]["type"] == "server_error"
        assert refusal["error"]["code"] == "engine_unavailable"
        assert reason in refusal["error"]["message"]
        assert late_close.rcvd is not None
        assert (late_close.rcvd.code, late_close.rcvd.reason) == (1011, "engine_unavailable")

    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


def worker_processes(parent: int) -> list[int]:
    """The spawned children of ``parent`` (stage workers, not the resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


FRAGILE_DEPLOYMENT = """\
base_config: loopback-fast.yaml
name: loopback-fragile
stages:
  - name: loopback
    worker: process
    max_restarts: 0
    model:
      factory: omniduplex.model_executor.models.loopback.stage:LoopbackStageModel
      kwargs: {unit_ms: 100, realtime: false, max_reply_ms: 10000, silence_rms: 0.01}
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the worker in /proc")
async def test_serve_exits_for_its_supervisor_when_the_engine_dies(tmp_path: Path) -> None:
    deployment = tmp_path / "fragile.yaml"
    deployment.write_text(FRAGILE_DEPLOYMENT)
    stderr_path = tmp_path / "stderr.txt"
    port = free_port()
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "omniduplex.entrypoints.cli",
                "serve",
                str(deployment),
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stderr=stderr,
        )
    try:
        url = f"ws://127.0.0.1:{port}/v1/realtime?model=loopback&duplex=1"
        for _ in range(300):
            try:
                async with wire(url) as probe:
                    await probe.recv()
                break
            except OSError:
                await asyncio.sleep(0.1)
        async with wire(url) as client:
            assert (await client.recv())["type"] == "session.created"
            (worker,) = worker_processes(process.pid)
            os.kill(worker, signal.SIGKILL)
            closed = await client.until("session.closed")
            assert closed[-2]["error"]["code"] == "engine_unavailable"
            assert closed[-1]["reason"] == "engine_unavailable"
        assert process.wait(TIMEOUT_S) == ENGINE_FAILURE_EXIT_CODE != 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = stderr_path.read_text()
    assert "restart budget (0) is spent" in log and "exiting with status" in log
    assert "Traceback" not in log
