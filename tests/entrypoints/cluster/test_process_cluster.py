"""Engine replicas as child processes behind one front door (``ProcessCluster``, no Ray).

One cluster for the module: two replicas of the loopback model (paced like a speaker;
``max_sessions: 2`` each), each a real child process, behind a ``build_cluster_app``
served in a thread. The last test runs ``omniduplex serve --replicas 2`` as a user would.
Every test leaves no session open. Waits are bounded polls, never timing assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from cluster_clients import close_session, open_session
from server_harness import TIMEOUT_S, free_port, wire

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.cli import uvicorn_config
from omniduplex.entrypoints.cluster.app import build_cluster_app
from omniduplex.entrypoints.cluster.processes import ProcessCluster

MAX_SESSIONS = 2
#: Child processes import the engine before they serve: slower than a thread to start.
STARTUP_S = 8 * TIMEOUT_S


class Running:
    def __init__(self, cluster: ProcessCluster, port: int) -> None:
        self.cluster = cluster
        self.ws_url = f"ws://127.0.0.1:{port}/v1/realtime"

    def replica_of(self, session_id: str) -> str | None:
        return self.cluster.directory.locate(session_id)

    def loads(self) -> dict[str, int]:
        return {r.name: r.sessions for r in self.cluster.directory.view().replicas if r.alive}

    def incarnation(self, name: str) -> str | None:
        view = self.cluster.directory.view()
        return next((r.incarnation for r in view.replicas if r.name == name and r.alive), None)

    async def until(self, check: Any) -> None:
        for _ in range(int(STARTUP_S / 0.05)):
            if check():
                return
            await asyncio.sleep(0.05)
        assert check()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    deploy_yaml = tmp_path_factory.mktemp("deploy") / "replicas.yaml"
    deploy_yaml.write_text(
        "base_config: loopback\n"
        f"duplex_session: {{max_sessions: {MAX_SESSIONS}, disconnect_grace_s: 30}}\n"
    )
    cluster = ProcessCluster(load_deploy_config(deploy_yaml), 2, startup_timeout_s=STARTUP_S)
    app = build_cluster_app(
        cluster, model_name="loopback", on_startup=cluster.start, on_shutdown=cluster.shutdown
    )
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_S
    while not server.started:
        assert thread.is_alive(), "the front door did not start"
        assert time.monotonic() < deadline, "the replicas did not come up"
        time.sleep(0.05)
    try:
        yield Running(cluster, port)
    finally:
        server.should_exit = True
        thread.join(STARTUP_S)
    assert not any(p.is_alive() for p in cluster.processes.values()), "a child outlived it"


def _assert_exactly_once(events: list[dict[str, Any]]) -> None:
    seqs = [e["server_event_seq"] for e in events if "server_event_seq" in e]
    assert seqs == list(range(1, len(seqs) + 1)), "every event once, in order, no gap"


async def test_sessions_spread_over_the_processes_and_resume_onto_theirs(running: Running):
    a = await open_session(running.ws_url)
    b = await open_session(running.ws_url)
    placed = {running.replica_of(c[2]["session"]["id"]) for c in (a, b)}
    assert placed == {"replica-0", "replica-1"}
    pids = {p.pid for p in running.cluster.processes.values()}
    assert len(pids) == 2 and os.getpid() not in pids

    ctx, client, created = a
    session_id = created["session"]["id"]
    replica = running.replica_of(session_id)
    await client.speak(400)
    await client.send({"type": "input_audio_buffer.commit"})
    await client.send({"type": "response.create"})
    kept = [created, await client.recv(), await client.recv()]
    await ctx.__aexit__(None, None, None)  # the socket drops mid-reply
    async with wire(running.ws_url + "?resume=1&duplex=1") as again:
        await again.send(
            {
                "type": "session.resume",
                "session_id": session_id,
                "resume_token": created["resume_token"],
                "last_received_server_event_seq": kept[-1]["server_event_seq"],
            }
        )
        resumed = await again.recv()
        assert resumed["type"] == "session.resumed", resumed
        kept.extend(await again.until("response.done"))
        assert running.replica_of(session_id) == replica
        await again.send({"type": "session.close"})
        kept.extend(await again.until("session.closed"))
    _assert_exactly_once(kept)
    await close_session(*b[:2])
    await running.until(lambda: running.loads() == {"replica-0": 0, "replica-1": 0})


async def test_admission_counts_every_process(running: Running) -> None:
    opened = [await open_session(running.ws_url) for _ in range(2 * MAX_SESSIONS)]
    assert running.loads() == {"replica-0": MAX_SESSIONS, "replica-1": MAX_SESSIONS}
    async with wire(running.ws_url + "?duplex=1") as refused:
        await refused.send({"type": "session.update", "session": {}})
        error = await refused.recv()
        assert error["type"] == "error"
        assert error["error"]["code"] == "resource_exhausted"
    for ctx, client, _ in opened:
        await close_session(ctx, client)
    await running.until(lambda: running.loads() == {"replica-0": 0, "replica-1": 0})


async def test_a_cancel_through_a_child_process_ends_the_reply(running: Running) -> None:
    ctx, client, _ = await open_session(running.ws_url)
    await client.send({"type": "session.update", "session": {"output_audio_pacing": "none"}})
    await client.until("session.updated")
    await client.speak(8000)
    await client.send({"type": "input_audio_buffer.commit"})
    await client.send({"type": "response.create"})
    first = (await client.until("response.output_audio.delta"))[-1]
    await client.send({"type": "response.cancel"})
    done = (await client.until("response.done"))[-1]
    assert done["response"]["status"] == "cancelled"
    await client.send({"type": "session.heartbeat"})
    after = await client.until("session.heartbeat_ack")
    assert not [e for e in after if e.get("response_id") == first["response_id"]]
    await close_session(ctx, client)
    _assert_exactly_once(client.received)


async def test_a_killed_process_ends_its_sessions_and_is_started_again(running: Running):
    ctx_a, a, created_a = await open_session(running.ws_url)
    ctx_b, b, created_b = await open_session(running.ws_url)
    doomed = running.replica_of(created_a["session"]["id"])
    survivor = running.replica_of(created_b["session"]["id"])
    assert doomed is not None and survivor is not None and doomed != survivor
    killed = running.incarnation(doomed)
    await a.speak(3000)
    await a.send({"type": "input_audio_buffer.commit"})
    await a.send({"type": "response.create"})
    await a.until("response.output_audio.delta")
    running.cluster.processes[doomed].kill()  # as a crash would

    await a.until("session.closed")
    assert a.received[-1]["reason"] == "replica_failed"
    assert all(e["type"] != "response.done" for e in a.received), "cut mid-reply"
    _assert_exactly_once(a.received)
    await ctx_a.__aexit__(None, None, None)

    await b.speak(300)  # the other process's session never noticed
    await b.send({"type": "input_audio_buffer.commit"})
    await b.send({"type": "response.create"})
    await b.until("response.done")

    # A fresh process takes the name, with a new incarnation, and takes sessions again.
    await running.until(lambda: running.incarnation(doomed) not in (None, killed))
    opened = [await open_session(running.ws_url) for _ in range(2)]
    assert {running.replica_of(c[2]["session"]["id"]) for c in opened} >= {doomed}
    for ctx, client, _ in [(ctx_b, b, None), *opened]:
        await close_session(ctx, client)
    await running.until(lambda: running.loads() == {"replica-0": 0, "replica-1": 0})


def _group(pgid: int) -> list[str]:
    """The processes of process group ``pgid`` (read from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            head, tail = (entry / "stat").read_text().rsplit(")", 1)
        except (OSError, ValueError):
            continue
        if int(tail.split()[2]) == pgid:
            found.append(head.split("(", 1)[1])
    return found


@pytest.mark.parametrize("asked_by", ["flag", "deploy_yaml"])
def test_serve_replicas_uses_child_processes_and_stops_as_one(
    asked_by: str, tmp_path: Path
) -> None:
    """``omniduplex serve --replicas 2`` (or a deploy YAML's ``cluster: {backend:
    processes}``), stopped as systemd stops it: SIGTERM to the whole process group. The
    children leave it to the front door, which stops them in order: no replica counted
    dead, none started again, none left behind."""
    port = free_port()
    log_path = tmp_path / "serve.log"
    command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve"]
    if asked_by == "flag":
        command += ["loopback-fast", "--replicas", "2"]
    else:
        deploy = tmp_path / "replicas.yaml"
        deploy.write_text(
            "base_config: loopback-fast\ncluster: {backend: processes, replicas: 2}\n"
        )
        command += [str(deploy)]
    command += ["--port", str(port)]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, start_new_session=True, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the server did not come up"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    health = json.load(r)
                    break
            except OSError:
                time.sleep(0.2)
        replicas = health["cluster"]["replicas"]
        assert [r["name"] for r in replicas] == ["replica-0", "replica-1"]
        assert all(r["alive"] for r in replicas)
        os.killpg(process.pid, signal.SIGTERM)
        status = process.wait(STARTUP_S)
        text = log_path.read_text()
        assert status == -signal.SIGTERM, text  # as the one-process server ends
        assert "Traceback" not in text and "died" not in text, text
        # multiprocessing's resource tracker ends a moment after the server, when it reads
        # the server's end of its pipe close.
        while (left := _group(process.pid)) and time.monotonic() < deadline + STARTUP_S:
            time.sleep(0.05)
        assert not left, f"outlived the server: {left}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(TIMEOUT_S)
