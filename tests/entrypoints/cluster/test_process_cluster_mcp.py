"""A remote MCP tool through a replica in a child process (``ProcessCluster``): the
replica that holds the session lists the MCP server's tools and makes the call, with the
deploy file's ``mcp:`` block (the front door only relays the events). The MCP server is
the ``mcp`` SDK's own, in this process, on loopback (allowed by the deploy file)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from cluster_clients import close_session, open_session
from server_harness import TIMEOUT_S, free_port

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.cli import uvicorn_config
from omniduplex.entrypoints.cluster.app import build_cluster_app
from omniduplex.entrypoints.cluster.processes import ProcessCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from mcp_servers import WEATHER, serve_mcp

STARTUP_S = 8 * TIMEOUT_S


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with serve_mcp() as url:
        yield url


@pytest.fixture(scope="module")
def front_door(tmp_path_factory: pytest.TempPathFactory, mcp_url: str) -> Iterator[str]:
    prefix = mcp_url.rsplit("/", 1)[0] + "/"
    deploy_yaml = tmp_path_factory.mktemp("deploy") / "mcp.yaml"
    deploy_yaml.write_text(f"base_config: cascade-rules\nmcp: {{allowed_urls: ['{prefix}']}}\n")
    cluster = ProcessCluster(load_deploy_config(deploy_yaml), 1, startup_timeout_s=STARTUP_S)
    app = build_cluster_app(
        cluster, model_name="cascade-rules", on_startup=cluster.start, on_shutdown=cluster.shutdown
    )
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the replica did not come up"
        time.sleep(0.05)
    try:
        yield f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        server.should_exit = True
        thread.join(STARTUP_S)


async def test_the_replica_holding_the_session_makes_the_mcp_call(front_door, mcp_url) -> None:
    ctx, client, _ = await open_session(front_door)
    tool = {"type": "mcp", "server_label": "weather", "server_url": mcp_url}
    await client.send(
        {"type": "session.update", "session": {"tools": [tool], "output_audio_pacing": "none"}}
    )
    await client.until("mcp_list_tools.completed")
    await client.send(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Get the weather in Paris."}],
            },
        }
    )
    await client.send({"type": "response.create"})
    asked = (await client.until("response.done"))[-1]["response"]
    (request,) = asked["output"]
    assert request["type"] == "mcp_approval_request"  # OpenAI's default: always ask
    await client.send(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "mcp_approval_response",
                "approval_request_id": request["id"],
                "approve": True,
            },
        }
    )
    done = (await client.until("response.done"))[-1]["response"]
    await close_session(ctx, client)
    call, message = done["output"]
    assert call["type"] == "mcp_call" and call["approval_request_id"] == request["id"]
    assert call["output"] == WEATHER.format(city="Get the weather in Paris.")
    assert "18 degrees" in message["content"][0]["transcript"]
