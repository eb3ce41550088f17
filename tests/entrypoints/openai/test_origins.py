"""Only the server's own page and allowed origins may call it from a browser, and a
loopback server answers only to loopback names (no DNS rebinding)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator

import httpx
import orjson
import pytest
import websockets
from server_harness import TIMEOUT_S, free_port

from omniduplex.entrypoints.openai.origins import OriginPolicy

ALLOWED = "https://app.example.com"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    port = free_port()
    command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve", "loopback-fast"]
    command += ["--port", str(port), "--allowed-origin", ALLOWED, "--log-level", "warning"]
    process = subprocess.Popen(command)
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            asyncio.run(asyncio.sleep(0.1))
        yield port
    finally:
        process.terminate()
        process.wait(TIMEOUT_S)


async def _first_event(
    port: int, headers: dict[str, str], *, name: str = "127.0.0.1"
) -> tuple[dict, int | None]:
    """The first event of a socket to ``name`` (it resolves to this server, as a
    rebinding name would) with ``headers``, and how the socket closed."""
    url = f"ws://{name}:{port}/v1/realtime?model=loopback"
    connection = websockets.connect(url, additional_headers=headers, host="127.0.0.1", port=port)
    async with connection as ws:
        event = orjson.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
        if event["type"] == "session.created":
            await ws.send(orjson.dumps({"type": "session.close"}).decode())
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), TIMEOUT_S)
        return event, ws.close_code


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ({}, True),  # no browser: no Origin
        ({"Origin": "http://127.0.0.1:{port}"}, True),  # the server's own page
        ({"Origin": ALLOWED}, True),
        ({"Origin": "https://evil.example"}, False),
        ({"Origin": "null"}, False),  # a sandboxed page or a file
    ],
)
async def test_websocket_origins(port, headers, allowed) -> None:
    headers = {key: value.format(port=port) for key, value in headers.items()}
    event, code = await _first_event(port, headers)
    if allowed:
        assert event["type"] == "session.created"
    else:
        assert event["error"]["code"] == "origin_not_allowed"
        assert event["error"]["type"] == "invalid_request_error"
        assert code == 1008


async def test_a_rebinding_host_is_refused_on_every_route(port) -> None:
    evil = {"Host": f"rebind.evil.example:{port}"}
    same_origin = {"Origin": f"http://rebind.evil.example:{port}"}
    event, code = await _first_event(port, same_origin, name="rebind.evil.example")
    assert event["error"]["code"] == "host_not_allowed" and code == 1008
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        answer = await http.get("/v1/models", headers=evil)
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "host_not_allowed"
        assert (await http.get("/v1/models", headers={"Host": f"localhost:{port}"})).is_success


async def test_cors_lets_allowed_origins_read_and_no_one_else(port) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        preflight = {"Access-Control-Request-Method": "POST"}
        good = await http.options("/v1/chat/completions", headers={"Origin": ALLOWED, **preflight})
        assert good.headers.get("access-control-allow-origin") == ALLOWED
        bad = await http.get("/v1/models", headers={"Origin": "https://evil.example"})
        assert bad.status_code == 403 and "access-control-allow-origin" not in bad.headers


def test_the_default_policy_follows_the_bind_address() -> None:
    local = OriginPolicy.for_bind("127.0.0.1")
    assert local.host_allowed({"host": "localhost:8000"})
    assert local.host_allowed({"host": "[::1]:8000"})
    assert not local.host_allowed({"host": "192.168.1.5:8000"})
    public = OriginPolicy.for_bind("0.0.0.0")
    assert public.host_allowed({"host": "voice.example.com"})
    # Either way a foreign page is refused unless allowed.
    assert not public.origin_allowed({"host": "voice.example.com", "origin": "https://x.example"})
    assert public.origin_allowed(
        {"host": "voice.example.com", "origin": "https://voice.example.com"}
    )
