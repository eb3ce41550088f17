"""Engine replicas on a real local Ray cluster (2 CPUs, loopback only), two front ends.

One cluster for the module: two replicas of the loopback model (``max_sessions: 2`` each)
and two front ends on their own ports, each a ``build_cluster_app`` served in a thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from server_harness import RunningServer, run_app, wire  # noqa: E402

from omniduplex.config.pipeline import load_deploy_config  # noqa: E402
from omniduplex.entrypoints.cluster.app import build_cluster_app  # noqa: E402
from omniduplex.entrypoints.cluster.ray_backend import RayCluster  # noqa: E402

MAX_SESSIONS = 2


@dataclasses.dataclass
class Cluster:
    backends: list[RayCluster]
    front_ends: list[RunningServer]

    async def replica_of(self, session_id: str) -> str | None:
        return await self.backends[0].locate(session_id)

    async def loads(self) -> dict[str, int]:
        view = await self.backends[0].view()
        return {r.name: r.sessions for r in view.replicas if r.alive}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    namespace = f"omniduplex-test-{uuid.uuid4().hex[:8]}"
    ray.init(num_cpus=2, include_dashboard=False, namespace=namespace, log_to_driver=False)
    pipeline = load_deploy_config("loopback-fast")
    pipeline = dataclasses.replace(
        pipeline,
        duplex_session={**pipeline.duplex_session, "max_sessions": MAX_SESSIONS},
        cluster={
            "replicas": 2,
            "resources_per_replica": {"num_cpus": 1},
            "max_restarts": 2,
            "namespace": namespace,
        },
    )
    backends = [RayCluster.connect(None, pipeline) for _ in range(2)]
    try:
        with (
            run_app(build_cluster_app(backends[0], model_name="loopback")) as one,
            run_app(build_cluster_app(backends[1], model_name="loopback")) as two,
        ):
            yield Cluster(backends, [one, two])
    finally:
        backends[0].stop(replicas=True)
        ray.shutdown()


async def _open(url: str) -> tuple[Any, Any, dict[str, Any]]:
    ctx = wire(url + "?duplex=1")
    client = await ctx.__aenter__()
    await client.send(
        {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}
    )
    created = await client.recv()
    assert created["type"] == "session.created", created
    return ctx, client, created


def _assert_exactly_once(events: list[dict[str, Any]]) -> None:
    seqs = [e["server_event_seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), "every event once, in order, no gap"
    ids = [e["event_id"] for e in events]
    assert len(set(ids)) == len(ids)


async def test_sessions_spread_and_resume_through_the_other_front_end(cluster: Cluster) -> None:
    one, two = cluster.front_ends
    ctx_a, a, created_a = await _open(one.ws_url)
    ctx_b, b, created_b = await _open(one.ws_url)
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
    assert await cluster.replica_of(id_a) is None  # closed: the directory forgot it
    assert replica_a in {"replica-0", "replica-1"}

    await b.send({"type": "session.close"})
    await b.until("session.closed")
    await ctx_b.__aexit__(None, None, None)
    for _ in range(100):
        if sum((await cluster.loads()).values()) == 0:
            break
        await asyncio.sleep(0.05)
    assert await cluster.loads() == {"replica-0": 0, "replica-1": 0}
