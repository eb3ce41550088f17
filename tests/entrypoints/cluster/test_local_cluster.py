"""The front end's rules on replicas in this process (``LocalCluster``, no Ray): a
placement on a replica that turned out dead, and resume through the other front end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from cluster_clients import open_session
from server_harness import free_port, wire

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.cli import uvicorn_config
from omniduplex.entrypoints.cluster.app import build_cluster_app
from omniduplex.entrypoints.cluster.local import LocalCluster


@contextlib.asynccontextmanager
async def local_cluster(replicas: int = 2) -> AsyncIterator[LocalCluster]:
    cluster = LocalCluster(load_deploy_config("loopback-fast"), replicas)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.shutdown()


@contextlib.asynccontextmanager
async def front_end(cluster: LocalCluster) -> AsyncIterator[str]:
    """A front end on this loop (the replicas' loop), on a free loopback port."""
    port = free_port()
    app = build_cluster_app(cluster, model_name="loopback")
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the front end did not start"
        await asyncio.sleep(0.01)
    try:
        yield f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        server.should_exit = True
        await task


async def test_a_session_placed_on_a_dead_replica_goes_to_a_live_one() -> None:
    async with local_cluster() as cluster, front_end(cluster) as url:
        cluster.take_down("replica-0")  # dead, and the directory does not know it yet
        opened = [await open_session(url) for _ in range(2)]  # ties rotate: one is placed there
        for _, _, created in opened:
            assert cluster.directory.locate(created["session"]["id"]) == "replica-1"
        assert [r.alive for r in cluster.directory.view().replicas] == [False, True]
        for ctx, client, _ in opened:
            await client.send({"type": "session.close"})
            await client.until("session.closed")
            await ctx.__aexit__(None, None, None)


async def test_resume_through_the_other_front_end() -> None:
    async with local_cluster() as cluster, front_end(cluster) as one, front_end(cluster) as two:
        ctx, client, created = await open_session(one)
        session_id = created["session"]["id"]
        await client.speak(400)
        await client.send({"type": "input_audio_buffer.commit"})
        await client.send({"type": "response.create"})
        kept = [created, await client.recv(), await client.recv()]
        await ctx.__aexit__(None, None, None)
        async with wire(two + "?resume=1&duplex=1") as again:
            await again.send(
                {
                    "type": "session.resume",
                    "session_id": session_id,
                    "resume_token": created["resume_token"],
                    "last_received_server_event_seq": kept[-1]["server_event_seq"],
                }
            )
            assert (await again.recv())["type"] == "session.resumed"
            kept.extend(await again.until("response.done"))
            await again.send({"type": "session.close"})
            kept.extend(await again.until("session.closed"))
        seqs = [e["server_event_seq"] for e in kept]
        assert seqs == list(range(1, len(seqs) + 1))
        assert cluster.directory.locate(session_id) is None
