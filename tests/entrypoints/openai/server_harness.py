"""A real omniduplex server on a free loopback port, run in a background thread."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import ipaddress
import json
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import openai.types.beta.realtime as beta_types
import openai.types.realtime as ga_types
import orjson
import pydantic
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.asyncio.client import connect

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.cli import uvicorn_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.entrypoints.openai.api_server import build_app

# Guards against hangs only; no assertion depends on how long anything takes.
TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """A certificate (PEM) and its key, as ``omniduplex serve --ssl-certfile/--ssl-keyfile``
    takes them."""

    certfile: str
    keyfile: str


def self_signed_tls(directory: Path) -> TlsFiles:
    """A fresh self-signed certificate for 127.0.0.1 and localhost, written to
    ``directory``; a client trusts it by taking ``certfile`` as its CA (Node:
    ``NODE_EXTRA_CA_CERTS``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = directory / "cert.pem", directory / "key.pem"
    certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return TlsFiles(str(certfile), str(keyfile))


@dataclasses.dataclass
class RunningServer:
    port: int
    app: Any
    server: uvicorn.Server
    thread: threading.Thread
    tls: bool = False

    @property
    def ws_url(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}/v1/realtime"

    @property
    def http_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def handler(self) -> Any:
        return self.app.state.handlers["handler"]


@contextlib.contextmanager
def run_server(
    deployment: str = "loopback-fast",
    *,
    api_key: str | None = None,
    tls: TlsFiles | None = None,
    mcp: Any = None,
    **duplex_session: Any,
) -> Iterator[RunningServer]:
    """Serve ``deployment`` (its ``duplex_session`` settings overridden by the keywords;
    ``mcp``: an ``McpConfig`` in place of the deployment's)."""
    pipeline = load_deploy_config(deployment)
    if mcp is not None:
        pipeline = dataclasses.replace(pipeline, mcp=mcp)
    if duplex_session:
        merged = {**pipeline.duplex_session, **duplex_session}
        pipeline = dataclasses.replace(pipeline, duplex_session=merged)
    model_name = pipeline.served_model_name or pipeline.name
    app = build_app(DuplexOmni(pipeline), api_key=api_key, model_name=model_name)
    with run_app(app, tls=tls) as running:
        yield running


@contextlib.contextmanager
def run_app(app: Any, *, tls: TlsFiles | None = None) -> Iterator[RunningServer]:
    """Serve an app built by ``build_app`` on a free loopback port, in a thread (over TLS
    with ``tls``)."""
    port = free_port()
    config = uvicorn_config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ssl_certfile=tls.certfile if tls else None,
        ssl_keyfile=tls.keyfile if tls else None,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    try:
        yield RunningServer(port, app, server, thread, tls=tls is not None)
    finally:
        server.should_exit = True
        thread.join(TIMEOUT_S)


def sine_pcm16(ms: int, *, rate: int = 24_000, freq: float = 300.0) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2").tobytes()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class WireClient:
    """A raw Realtime client: JSON text frames in, parsed dicts out."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.received: list[dict[str, Any]] = []

    async def send(self, obj: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps(obj).decode())

    async def recv(self) -> dict[str, Any]:
        raw = await asyncio.wait_for(self.ws.recv(), TIMEOUT_S)
        event = orjson.loads(raw)
        self.received.append(event)
        return event

    async def until(self, wanted: str | tuple[str, ...]) -> list[dict[str, Any]]:
        wanted = (wanted,) if isinstance(wanted, str) else wanted
        out = []
        while True:
            event = await self.recv()
            out.append(event)
            if event["type"] in wanted:
                return out

    async def speak(self, ms: int = 600, *, rate: int = 24_000) -> None:
        pcm = sine_pcm16(ms, rate=rate)
        step = rate * 2 // 10
        for i in range(0, len(pcm), step):
            await self.send({"type": "input_audio_buffer.append", "audio": b64(pcm[i : i + step])})


@contextlib.asynccontextmanager
async def wire(url: str, **kwargs: Any):
    async with connect(url, max_size=None, open_timeout=TIMEOUT_S, **kwargs) as ws:
        yield WireClient(ws)


#: The ``openai`` SDK's server-event unions, by dialect: what a stock client parses.
SDK_EVENT_UNIONS = {
    "ga": pydantic.TypeAdapter(ga_types.RealtimeServerEvent),
    "beta": pydantic.TypeAdapter(beta_types.RealtimeServerEvent),
}


class SdkEvents:
    """The events one ``openai`` SDK connection receives, each validated by its dialect's
    SDK union as it is read (``seen`` keeps them all)."""

    def __init__(self, conn: Any, dialect: str = "ga") -> None:
        self.conn = conn
        self.dialect = dialect
        self.union = SDK_EVENT_UNIONS[dialect]
        self.seen: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any]:
        event = orjson.loads(await asyncio.wait_for(self.conn.recv_bytes(), TIMEOUT_S))
        assert self.union.validate_python(event).type == event["type"]
        self.seen.append(event)
        return event

    async def until(self, wanted: str, **match: Any) -> list[dict[str, Any]]:
        """The events read up to and including the next ``wanted`` one (whose fields
        equal ``match``)."""
        out = []
        while True:
            event = await self.next()
            out.append(event)
            if event["type"] == wanted and all(event.get(k) == v for k, v in match.items()):
                return out

    def types(self) -> list[str]:
        return [event["type"] for event in self.seen]


class ChatServerDouble(ABC):
    """Test double of an OpenAI-compatible ``/v1/chat/completions`` on a free port: each
    POST is recorded in ``requests`` and answered with the SSE deltas ``answer`` sends,
    then ``[DONE]``. A client that hangs up (a cancelled response) ends the answer."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                double.requests.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()

                def send(delta: dict[str, Any]) -> None:
                    chunk = {"choices": [{"index": 0, "delta": delta}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()

                try:
                    double.answer(body, send)
                    self.wfile.write(b"data: [DONE]\n\n")
                except OSError:
                    pass  # the responder hung up: its response was cancelled

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @abstractmethod
    def answer(self, body: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        """Stream the answer to one request as chat deltas (``{"content": ...}``, ...)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
