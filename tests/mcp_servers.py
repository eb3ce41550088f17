"""Real MCP servers for tests: the ``mcp`` SDK's ``MCPServer`` on uvicorn, on 127.0.0.1.

``serve_mcp`` is both a context manager and an async context manager, so sync and async
tests use it alike: the server runs on its own event loop in a thread, on a socket bound
before the server starts (no port race). It yields the URL a client connects to: the
streamable HTTP endpoint (``/mcp``), or the SSE one (``/sse``) of a server that speaks
only SSE. ``headers_seen``, when given, receives the headers of every HTTP request the
server gets (lower-case names), so a test can check a bearer token arrived;
``tool_headers`` those the ``request_headers`` tool saw; ``calls_seen`` when ``hang`` started
and whether it was cancelled (the server runs in another thread: poll it). ``bearer``
makes the server answer 401 to a request without that bearer token, ``refused_tool``
answers 403 to each call of that tool (``_Gate``).

Import it as other shared helpers are (``sys.path`` holds ``tests/``, see
tests/engine/duplex/mcp/conftest.py): ``from mcp_servers import serve_mcp``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any, Literal

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ListToolsResult, PaginatedRequestParams, ToolAnnotations

WEATHER = "It is 18 degrees and sunny in {city}."
TOOL_FAILURE = "the tool failed on purpose"
Transport = Literal["streamable-http", "sse"]


class _PagedServer(MCPServer):
    """An MCPServer that lists its tools ``page_size`` at a time (MCPServer lists them all
    in one page), so a client's pagination meets real cursors."""

    def __init__(self, page_size: int | None) -> None:
        super().__init__(name="omniduplex-test-tools", log_level="WARNING")
        self._page_size = page_size

    async def _handle_list_tools(
        self, ctx: Any, params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        tools = await self.list_tools()
        if self._page_size is None:
            return ListToolsResult(tools=tools)
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + self._page_size
        return ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )


def build_server(
    *,
    page_size: int | None = None,
    tool_headers: list[dict[str, str]] | None = None,
    calls_seen: list[str] | None = None,
) -> MCPServer:
    server = _PagedServer(page_size)

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def get_weather(city: str) -> str:
        """The weather in a city (always the same)."""
        return WEATHER.format(city=city)

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
    def add(a: int, b: int) -> int:
        """The sum of two integers."""
        return a + b

    @server.tool()
    def explode() -> str:
        """Always fails."""
        raise ValueError(TOOL_FAILURE)

    @server.tool()
    async def hang(seconds: float = 600.0) -> str:
        """Sleeps, then answers; ``calls_seen`` gets "hang started" and "hang cancelled"."""
        if calls_seen is not None:
            calls_seen.append("hang started")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            if calls_seen is not None:
                calls_seen.append("hang cancelled")
            raise
        return f"slept {seconds} s"

    @server.tool()
    def fail_with(message: str, ctx: Context, echo_header: str = "") -> str:
        """Fails with the message given (a ToolError's text reaches the client), followed by
        the value of the request header ``echo_header`` when one is named: a server that
        echoes a credential back."""
        echoed = (ctx.headers or {}).get(echo_header, "") if echo_header else ""
        raise ToolError(f"{message} {echoed}".strip())

    @server.tool()
    def big(n: int) -> str:
        """Returns n characters."""
        return "x" * n

    @server.tool()
    def request_headers(ctx: Context) -> str:
        """Records the headers of the request that called it; answers their names."""
        headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        if tool_headers is not None:
            tool_headers.append(headers)
        return ", ".join(sorted(headers))

    return server


class _RecordHeaders:
    """ASGI middleware: every HTTP request's headers into a list."""

    def __init__(self, app: Any, seen: list[dict[str, str]]) -> None:
        self._app = app
        self._seen = seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self._seen.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
        await self._app(scope, receive, send)


class _Gate:
    """ASGI middleware that answers some requests with an HTTP error instead of the MCP
    server: each without ``Authorization: Bearer <bearer>`` (401), and each POST that calls
    the tool ``refused_tool`` (403, plain text, as a gateway in front of a server would)."""

    def __init__(self, app: Any, bearer: str | None, refused_tool: str | None) -> None:
        self._app = app
        self._bearer = bearer
        self._refused_tool = refused_tool

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self._app(scope, receive, send)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if self._bearer is not None and headers.get("authorization") != f"Bearer {self._bearer}":
            return await _answer(send, 401)
        if self._refused_tool is None or scope["method"] != "POST":
            return await self._app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if (
            isinstance(request, dict)
            and request.get("method") == "tools/call"
            and request.get("params", {}).get("name") == self._refused_tool
        ):
            return await _answer(send, 403)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self._app(scope, replay, send)


async def _answer(send: Any, status: int) -> None:
    text = f"refused with {status}".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(text)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": text})


def closed_port_url(path: str = "/mcp") -> str:
    """A URL on 127.0.0.1 where nothing listens (a free port, closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


class serve_mcp:
    """Run a test MCP server for the ``with`` / ``async with`` block; yields its URL."""

    def __init__(
        self,
        transport: Transport = "streamable-http",
        headers_seen: list[dict[str, str]] | None = None,
        *,
        page_size: int | None = None,
        tool_headers: list[dict[str, str]] | None = None,
        calls_seen: list[str] | None = None,
        bearer: str | None = None,
        refused_tool: str | None = None,
    ) -> None:
        server = build_server(page_size=page_size, tool_headers=tool_headers, calls_seen=calls_seen)
        app: Any = (
            server.streamable_http_app() if transport == "streamable-http" else server.sse_app()
        )
        if bearer is not None or refused_tool is not None:
            app = _Gate(app, bearer, refused_tool)
        if headers_seen is not None:
            app = _RecordHeaders(app, headers_seen)
        self._path = "/mcp" if transport == "streamable-http" else "/sse"
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        # A client that is still connected (an SSE stream) must not hold the test up.
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=0.5
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="test-mcp-server", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def __enter__(self) -> str:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the test MCP server did not start")
            self._thread.join(0.01)
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}{self._path}"

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()

    async def __aenter__(self) -> str:
        return await asyncio.to_thread(self.__enter__)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.__exit__, *exc)
