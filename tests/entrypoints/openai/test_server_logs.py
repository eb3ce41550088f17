"""The server's logs: no API key at any level, however the client sent it, and no
traceback for a client's bad frame."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys

import httpx
import orjson
import websockets
from server_harness import TIMEOUT_S, free_port

from omniduplex.entrypoints.server_logging import REDACTED, RedactingFilter, redact

KEY = "sk-test-0123456789abcdef"


def test_redact_hides_the_key_and_what_follows_the_usual_carriers() -> None:
    assert redact(f"< authorization: Bearer {KEY}") == f"< authorization: Bearer {REDACTED}"
    assert redact("GET /v1/realtime?model=x&api_key=other-secret HTTP/1.1") == (
        f"GET /v1/realtime?model=x&api_key={REDACTED} HTTP/1.1"
    )
    assert redact("realtime, openai-insecure-api-key.abc") == (
        f"realtime, openai-insecure-api-key.{REDACTED}"
    )
    assert redact(f"the key {KEY} in prose", [KEY]) == f"the key {REDACTED} in prose"
    assert redact("nothing secret here") == "nothing secret here"


def test_the_filter_rewrites_arguments_and_keeps_the_record() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s %s", ("GET", KEY), None)
    assert RedactingFilter([KEY]).filter(record)
    assert record.getMessage() == f"GET {REDACTED}"


async def test_a_debug_level_server_logs_no_key() -> None:
    port = free_port()
    command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve", "loopback-fast"]
    command += ["--port", str(port), "--api-key", KEY, "--log-level", "debug"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"ws://127.0.0.1:{port}/v1/realtime?model=loopback"
    try:
        for _ in range(300):
            try:
                async with websockets.connect(
                    url, additional_headers={"Authorization": f"Bearer {KEY}"}
                ) as ws:
                    await asyncio.wait_for(ws.recv(), TIMEOUT_S)
                break
            except OSError:
                await asyncio.sleep(0.1)
        protocols = ["realtime", f"openai-insecure-api-key.{KEY}"]
        async with websockets.connect(url, subprotocols=protocols) as ws:
            await asyncio.wait_for(ws.recv(), TIMEOUT_S)
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
            answer = await http.get(
                f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {KEY}"}
            )
            assert answer.status_code == 200
            await http.get(f"http://127.0.0.1:{port}/v1/models?api_key={KEY}")
    finally:
        process.terminate()
        output = process.communicate(timeout=TIMEOUT_S)[0].decode()
    assert "authorization" in output.lower()  # the headers were logged...
    assert KEY not in output  # ...without the key


async def test_frames_that_are_not_utf8_close_1007_with_one_line_each_no_traceback() -> None:
    port = free_port()
    command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve", "loopback-fast"]
    command += ["--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"ws://127.0.0.1:{port}/v1/realtime?model=loopback"
    codes = []
    try:
        for _ in range(300):
            try:
                async with websockets.connect(url) as ws:
                    await asyncio.wait_for(ws.recv(), TIMEOUT_S)
                break
            except OSError:
                await asyncio.sleep(0.1)
        for queued in (1, 5):
            async with websockets.connect(url) as ws:
                await asyncio.wait_for(ws.recv(), TIMEOUT_S)
                for _ in range(queued):
                    await ws.send(b"\xff", text=True)
                with contextlib.suppress(websockets.ConnectionClosed):
                    while True:
                        await asyncio.wait_for(ws.recv(), TIMEOUT_S)
                codes.append(ws.close_code)
        async with websockets.connect(url) as ws:
            # The bad frame and the client's close in one read: the close handshake is
            # under way when the bad frame is seen.
            await asyncio.wait_for(ws.recv(), TIMEOUT_S)
            ws.protocol.send_text(b"\xff")
            ws.protocol.send_close(1000)
            ws.transport.write(b"".join(ws.protocol.data_to_send()))
            await asyncio.wait_for(ws.wait_closed(), TIMEOUT_S)
            codes.append(ws.close_code)
        async with websockets.connect(url) as ws:  # the server goes on
            assert orjson.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))["type"] == (
                "session.created"
            )
    finally:
        process.terminate()
        output = process.communicate(timeout=TIMEOUT_S)[0].decode()
    assert codes[:2] == [1007, 1007]
    assert codes[2] in (1000, 1007)  # the client's own close may be answered first
    assert "Traceback" not in output
    assert output.count("not UTF-8") == 3, output
