"""Engine replicas on a real local Ray cluster (2 CPUs, loopback only), two front ends.

One cluster for the module: two replicas of the loopback model (paced like a speaker, so
a reply takes as long as it sounds; ``max_sessions: 2`` each) and two front ends on their
own ports, each a ``build_cluster_app`` served in a thread; a third front end is
``omniduplex serve --ray`` in a subprocess, to be killed. Every test leaves no session
open. Waits are bounded polls (a hang guard), never timing assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.server
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ray = pytest.importorskip("ray")

from cluster_clients import close_session, open_session  # noqa: E402
from server_harness import TIMEOUT_S, RunningServer, free_port, run_app, wire  # noqa: E402

from omniduplex.config.pipeline import load_deploy_config  # noqa: E402
from omniduplex.entrypoints.cluster.app import build_cluster_app  # noqa: E402
from omniduplex.entrypoints.cluster.frontend import ReplicaUnavailable  # noqa: E402
from omniduplex.entrypoints.cluster.ray_backend import RayCluster  # noqa: E402

MAX_SESSIONS = 2


@dataclasses.dataclass
class Cluster:
    backends: list[RayCluster]
    front_ends: list[RunningServer]
    namespace: str
    deploy_yaml: Path

    async def replica_of(self, session_id: str) -> str | None:
        return await self.backends[0].locate(session_id)

    async def loads(self) -> dict[str, int]:
        view = await self.backends[0].view()
        return {r.name: r.sessions for r in view.replicas if r.alive}

    async def incarnation(self, replica: str) -> str | None:
        view = await self.backends[0].view()
        return next((r.incarnation for r in view.replicas if r.name == replica and r.alive), None)

    async def until_located(self, session_id: str, wanted: str | None) -> None:
        for _ in range(int(TIMEOUT_S / 0.05)):
            if await self.replica_of(session_id) == wanted:
                return
            await asyncio.sleep(0.05)
        assert await self.replica_of(session_id) == wanted

    async def until_detached(self, replica: str, session_id: str) -> None:
        """Until the replica's route holds the session with no socket (disconnect grace)."""
        handle = ray.get_actor(replica, namespace=self.namespace)
        for _ in range(int(TIMEOUT_S / 0.05)):
            info = await handle.start.remote()
            assert session_id in info.sessions, "the session is gone"
            if session_id in info.detached:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{session_id} is still attached on {replica}")

    async def until_loads(self, wanted: dict[str, int]) -> None:
        for _ in range(int(TIMEOUT_S / 0.05)):
            if await self.loads() == wanted:
                return
            await asyncio.sleep(0.05)
        assert await self.loads() == wanted


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    namespace = f"omniduplex-test-{uuid.uuid4().hex[:8]}"
    ray.init(num_cpus=2, include_dashboard=False, namespace=namespace, log_to_driver=False)
    deploy_yaml = tmp_path_factory.mktemp("deploy") / "cluster.yaml"
    deploy_yaml.write_text(
        "base_config: loopback\n"
        f"duplex_session: {{max_sessions: {MAX_SESSIONS}, disconnect_grace_s: 30}}\n"
        "cluster:\n"
        "  replicas: 2\n"
        "  resources_per_replica: {num_cpus: 1}\n"
        "  max_restarts: 2\n"
        f"  namespace: {namespace}\n"
    )
    pipeline = load_deploy_config(deploy_yaml)
    backends = [RayCluster.connect(None, pipeline) for _ in range(2)]
    try:
        with (
            run_app(build_cluster_app(backends[0], model_name="loopback")) as one,
            run_app(build_cluster_app(backends[1], model_name="loopback")) as two,
        ):
            yield Cluster(backends, [one, two], namespace, deploy_yaml)
    finally:
        backends[0].stop(replicas=True)
        ray.shutdown()


def _assert_exactly_once(events: list[dict[str, Any]]) -> None:
    seqs = [e["server_event_seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), "every event once, in order, no gap"
    ids = [e["event_id"] for e in events]
    assert len(set(ids)) == len(ids)


async def test_sessions_spread_and_resume_through_the_other_front_end(cluster: Cluster) -> None:
    one, two = cluster.front_ends
    ctx_a, a, created_a = await open_session(one.ws_url)
    ctx_b, b, created_b = await open_session(one.ws_url)
    id_a, id_b = created_a["session"]["id"], created_b["session"]["id"]
    replica_a = await cluster.replica_of(id_a)
    replica_b = await cluster.replica_of(id_b)
    assert {replica_a, replica_b} == {"replica-0", "replica-1"}, "one session on each"

    kept = [created_a]
    await a.speak(700)
    await a.send({"type": "input_audio_buffer.commit"})
    await a.send({"type": "response.create"})
    for _ in range(6):  # part of the reply, then the socket is cut
        kept.append(await a.recv())
    assert all(e["type"] != "response.done" for e in kept)
    await ctx_a.__aexit__(None, None, None)

    async with wire(two.ws_url + "?resume=1&duplex=1") as again:
        await again.send(
            {
                "type": "session.resume",
                "session_id": id_a,
                "resume_token": created_a["resume_token"],
                "last_received_server_event_seq": kept[-1]["server_event_seq"],
            }
        )
        resumed = await again.recv()
        assert resumed["type"] == "session.resumed", resumed
        assert resumed["resume_token"] != created_a["resume_token"]
        kept.extend(await again.until("response.done"))
        assert await cluster.replica_of(id_a) == replica_a  # same replica, same session
        await again.send({"type": "session.close"})
        kept.extend(await again.until("session.closed"))
    _assert_exactly_once(kept)
    await cluster.until_located(id_a, None)  # closed: the directory forgets it

    await b.send({"type": "session.close"})
    await b.until("session.closed")
    await ctx_b.__aexit__(None, None, None)
    for _ in range(100):
        if sum((await cluster.loads()).values()) == 0:
            break
        await asyncio.sleep(0.05)
    assert await cluster.loads() == {"replica-0": 0, "replica-1": 0}


async def test_admission_is_cluster_wide(cluster: Cluster) -> None:
    one, two = cluster.front_ends
    opened = [await open_session(url) for url in (one.ws_url, two.ws_url, one.ws_url, two.ws_url)]
    await cluster.until_loads({"replica-0": MAX_SESSIONS, "replica-1": MAX_SESSIONS})
    async with wire(one.ws_url + "?duplex=1") as refused:
        await refused.send({"type": "session.update", "session": {}})
        error = await refused.recv()
        assert error["type"] == "error"
        assert error["error"]["code"] == "resource_exhausted"
    ctx, client, _ = opened.pop()
    await close_session(ctx, client)
    ctx, client, _ = await open_session(two.ws_url)  # a slot came free: admitted again
    opened.append((ctx, client, _))
    for ctx, client, _ in opened:
        await close_session(ctx, client)
    await cluster.until_loads({"replica-0": 0, "replica-1": 0})


async def _reply_started(client: Any, ms: int = 3000) -> None:
    await client.speak(ms)
    await client.send({"type": "input_audio_buffer.commit"})
    await client.send({"type": "response.create"})
    await client.until("response.output_audio.delta")


async def test_a_killed_replica_ends_its_sessions_and_comes_back(cluster: Cluster) -> None:
    one, two = cluster.front_ends
    ctx_a, a, created_a = await open_session(one.ws_url)
    ctx_b, b, created_b = await open_session(two.ws_url)
    doomed = await cluster.replica_of(created_a["session"]["id"])
    survivor = await cluster.replica_of(created_b["session"]["id"])
    assert doomed is not None and survivor is not None and doomed != survivor
    killed = await cluster.incarnation(doomed)
    await _reply_started(a)
    ray.kill(ray.get_actor(doomed, namespace=cluster.namespace), no_restart=False)

    await a.until("session.closed")
    events = a.received
    assert events[-1]["reason"] == "replica_failed"
    assert all(e["type"] != "response.done" for e in events), "cut mid-reply"
    seqs = [e["server_event_seq"] for e in events if "server_event_seq" in e]
    assert seqs == list(range(1, len(seqs) + 1))
    await ctx_a.__aexit__(None, None, None)

    # The other replica's session never noticed.
    await b.speak(300)
    await b.send({"type": "input_audio_buffer.commit"})
    await b.send({"type": "response.create"})
    await b.until("response.done")

    # The incarnation that died left admission as its session was told (Ray may have
    # restarted it already): a new session goes to a live replica, never to the dead one.
    assert await cluster.incarnation(doomed) != killed
    ctx_c, c, created_c = await open_session(one.ws_url)
    placed = await cluster.replica_of(created_c["session"]["id"])
    assert placed == survivor or await cluster.incarnation(doomed) not in (None, killed)

    # Ray restarts it; it takes sessions again.
    await cluster.until_loads({survivor: 1 + (placed == survivor), doomed: int(placed == doomed)})
    assert await cluster.incarnation(doomed) not in (None, killed)
    ctx_d, d, created_d = await open_session(two.ws_url)
    if placed == survivor:  # the survivor is full: the restarted replica takes it
        assert await cluster.replica_of(created_d["session"]["id"]) == doomed
    for ctx, client in ((ctx_b, b), (ctx_c, c), (ctx_d, d)):
        await close_session(ctx, client)
    await cluster.until_loads({"replica-0": 0, "replica-1": 0})


@dataclasses.dataclass
class FrontEndProcess:
    ws_url: str
    process: subprocess.Popen[bytes]


@pytest.fixture
def doomed_front_end(cluster: Cluster) -> Iterator[FrontEndProcess]:
    """``omniduplex serve --ray`` in a subprocess, joined to the test's cluster."""
    port = free_port()
    address = ray.get_runtime_context().gcs_address
    command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve"]
    command += [str(cluster.deploy_yaml), "--ray", address, "--port", str(port)]
    process = subprocess.Popen([*command, "--log-level", "warning"])
    try:
        deadline = time.monotonic() + 4 * TIMEOUT_S
        while True:
            assert process.poll() is None, "the front end exited"
            assert time.monotonic() < deadline, "the front end did not come up"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        yield FrontEndProcess(f"ws://127.0.0.1:{port}/v1/realtime", process)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(TIMEOUT_S)


async def test_front_end_killed_mid_reply_resumes_through_another(
    cluster: Cluster, doomed_front_end: FrontEndProcess
) -> None:
    ctx, client, created = await open_session(doomed_front_end.ws_url)
    session_id = created["session"]["id"]
    replica = await cluster.replica_of(session_id)
    await _reply_started(client)
    doomed_front_end.process.send_signal(signal.SIGKILL)
    doomed_front_end.process.wait(TIMEOUT_S)
    kept = list(client.received)
    with contextlib.suppress(Exception):
        await ctx.__aexit__(None, None, None)
    assert all(e["type"] != "response.done" for e in kept), "cut mid-reply"
    assert replica is not None
    await cluster.until_detached(replica, session_id)  # in its disconnect grace

    async with wire(cluster.front_ends[1].ws_url + "?resume=1&duplex=1") as again:
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
        assert await cluster.replica_of(session_id) == replica
        await again.send({"type": "session.close"})
        kept.extend(await again.until("session.closed"))
    _assert_exactly_once(kept)
    await cluster.until_loads({"replica-0": 0, "replica-1": 0})


def test_an_unreachable_ray_head_is_a_clear_error(cluster: Cluster) -> None:
    command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve"]
    command += [str(cluster.deploy_yaml), "--ray"]
    port = free_port()  # nothing listens there
    done = subprocess.run(
        [*command, f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=4 * TIMEOUT_S
    )
    assert done.returncode == 2
    assert "unreachable" in done.stderr
    # Something answers, but not Ray (a wrong port): refused as quickly.
    not_ray = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=not_ray.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{not_ray.server_address[1]}"
        done = subprocess.run(
            [*command, address], capture_output=True, text=True, timeout=4 * TIMEOUT_S
        )
    finally:
        not_ray.shutdown()
        not_ray.server_close()
    assert done.returncode == 2
    assert "not a Ray head" in done.stderr


async def test_every_front_end_reports_the_cluster(cluster: Cluster) -> None:
    for front_end in cluster.front_ends:
        async with httpx.AsyncClient(base_url=front_end.http_url) as http:
            health = await http.get("/health")
            assert health.status_code == 200
            replicas = health.json()["cluster"]["replicas"]
            assert [(r["name"], r["alive"]) for r in replicas] == [
                ("replica-0", True),
                ("replica-1", True),
            ]
            models = (await http.get("/v1/models")).json()["data"][0]
            assert models["id"] == "loopback"
            assert models["metadata"]["cluster"]["capacity"] == 2 * MAX_SESSIONS
            metrics = (await http.get("/metrics")).text
            assert "omniduplex_frontend_tunnels 0.0" in metrics
            assert "omniduplex_frontend_placed_total" in metrics


async def test_what_a_client_sent_before_its_socket_died_is_not_lost(cluster: Cluster) -> None:
    one, two = cluster.front_ends
    ctx, client, created = await open_session(one.ws_url)
    session_id, token = created["session"]["id"], created["resume_token"]
    last = created["server_event_seq"]
    for attempt in range(4):
        await client.send({"type": "session.heartbeat", "event_id": f"hb{attempt}"})
        client.ws.transport.abort()  # right after the frame: no close handshake
        with contextlib.suppress(Exception):
            await ctx.__aexit__(None, None, None)
        url = (two if attempt % 2 == 0 else one).ws_url
        ctx = wire(url + "?resume=1&duplex=1")
        client = await ctx.__aenter__()
        await client.send(
            {
                "type": "session.resume",
                "session_id": session_id,
                "resume_token": token,
                "last_received_server_event_seq": last,
            }
        )
        resumed = await client.recv()
        assert resumed["type"] == "session.resumed", resumed
        token = resumed["resume_token"]
        ack = (await client.until("session.heartbeat_ack"))[-1]
        assert ack["server_event_seq"] == last + 1
        last = ack["server_event_seq"]
    await close_session(ctx, client)
    await cluster.until_loads({"replica-0": 0, "replica-1": 0})


async def test_a_cancel_through_ray_ends_the_reply(cluster: Cluster) -> None:
    """An unpaced reply far larger than the tunnel's window, cancelled at its first audio:
    ``response.done`` (cancelled) comes, nothing of that response follows it, and the
    stream stays exactly numbered."""
    ctx, client, _ = await open_session(cluster.front_ends[0].ws_url)
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
    await cluster.until_loads({"replica-0": 0, "replica-1": 0})


async def test_a_restarted_directory_rebuilds_itself_from_the_replicas(cluster: Cluster) -> None:
    ctx, _, created = await open_session(cluster.front_ends[0].ws_url)
    session_id = created["session"]["id"]
    replica = await cluster.replica_of(session_id)
    before = (await cluster.backends[0].view()).directory
    directory = ray.get_actor("session-directory", namespace=cluster.namespace)
    ray.kill(directory, no_restart=False)
    for _ in range(int(TIMEOUT_S / 0.05)):  # its first call after the restart probes them
        with contextlib.suppress(ReplicaUnavailable):  # while it restarts
            restarted = (await cluster.backends[0].view()).directory != before
            if restarted and await cluster.replica_of(session_id) == replica:
                break
        await asyncio.sleep(0.05)
    assert (await cluster.backends[0].view()).directory != before
    assert await cluster.replica_of(session_id) == replica
    await ctx.__aexit__(None, None, None)  # dropped; resumed through the other front end
    async with wire(cluster.front_ends[1].ws_url + "?resume=1&duplex=1") as again:
        await again.send(
            {
                "type": "session.resume",
                "session_id": session_id,
                "resume_token": created["resume_token"],
                "last_received_server_event_seq": created["server_event_seq"],
            }
        )
        resumed = await again.recv()
        assert resumed["type"] == "session.resumed", resumed
        await again.send({"type": "session.close"})
        await again.until("session.closed")
    await cluster.until_loads({"replica-0": 0, "replica-1": 0})
