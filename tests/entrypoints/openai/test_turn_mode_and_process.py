"""A turn-based deployment, SIGTERM on a real server process, and oversized frames."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import signal
import subprocess
import sys
import wave

import httpx
import numpy as np
import websockets
from server_harness import TIMEOUT_S, free_port, run_app, run_server, wire

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.engine.duplex.plugin import load_duplex_plugin
from omniduplex.entrypoints.async_omni import AsyncOmni
from omniduplex.entrypoints.cli import MAX_FRAME_BYTES
from omniduplex.entrypoints.openai.api_server import build_app


def _wav(ms: int, rate: int = 16_000) -> str:
    t = np.arange(rate * ms // 1000) / rate
    pcm = (0.3 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    return base64.b64encode(buffer.getvalue()).decode()


async def test_a_turn_deployment_serves_chat_completions_and_no_sessions() -> None:
    pipeline = load_deploy_config("loopback-turn")
    plugin = load_duplex_plugin(pipeline.duplex_plugin, pipeline.stages[0].model.kwargs)
    app = build_app(AsyncOmni(pipeline), model_name="loopback-turn", plugin=plugin)
    with run_app(app) as server:
        async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
            assert (await http.get("/health")).json() == {"status": "ok"}
            body = {
                "model": "loopback-turn",
                "modalities": ["text", "audio"],
                "audio": {"voice": "alloy", "format": "wav"},
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "input_audio",
                                "input_audio": {"data": _wav(600), "format": "wav"},
                            }
                        ],
                    }
                ],
            }
            answer = (await http.post("/v1/chat/completions", json=body)).json()
            audio = answer["choices"][0]["message"]["audio"]
            assert audio["transcript"] and base64.b64decode(audio["data"])[:4] == b"RIFF"
        async with wire(server.ws_url + "?model=loopback-turn") as client:
            refused = await client.recv()
            assert refused["error"]["code"] == "route_not_available"


async def test_sigterm_closes_every_session_with_reason_shutdown() -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "omniduplex.entrypoints.cli",
            "serve",
            "loopback-fast",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
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
            os.kill(process.pid, signal.SIGTERM)
            closed = await client.until("session.closed")
            assert closed[-1]["reason"] == "shutdown"
        # uvicorn re-raises the signal once its graceful shutdown is done
        assert process.wait(TIMEOUT_S) in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()


async def test_a_frame_above_the_limit_is_refused_and_the_socket_lives() -> None:
    with run_server("loopback-fast") as server:
        async with wire(server.ws_url + "?model=loopback") as client:
            await client.recv()
            huge = '{"type":"input_audio_buffer.append","audio":"' + "A" * (15 * 1024 * 1024) + '"}'
            await client.ws.send(huge)
            error = await client.recv()
            assert error["error"]["code"] == "event_too_large"
            await client.send({"type": "session.heartbeat"})
            assert (await client.until("session.heartbeat_ack"))[-1]["type"] == (
                "session.heartbeat_ack"
            )


async def test_a_frame_above_the_websocket_limit_closes_the_socket_1009() -> None:
    with run_server("loopback-fast") as server:
        async with wire(server.ws_url + "?model=loopback") as client:
            await client.recv()
            huge = "A" * (MAX_FRAME_BYTES + 1)
            with contextlib.suppress(websockets.ConnectionClosed):
                await client.ws.send(huge)
                await client.recv()
            assert client.ws.close_code == 1009
        # Only that socket: the server goes on.
        async with wire(server.ws_url + "?model=loopback") as other:
            assert (await other.recv())["type"] == "session.created"
