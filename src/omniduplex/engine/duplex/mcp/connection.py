"""One connection from the server to one remote MCP server, on the ``mcp`` SDK.

The SDK's transports and ``ClientSession`` are anyio context managers that must be entered
and left in one task, so each connection runs them in an owner task of its own: ``open``
starts it and waits until the handshake and the tool listing are done, ``close`` tells it
to leave them, and calls from any task on the same event loop go through its
``ClientSession`` meanwhile.

Streamable HTTP is tried first; a server that answers its POST with 404 or 405 speaks only
the older SSE transport, and the same URL is opened with that. The SDK reports an HTTP
error status as a JSON-RPC error without the status, so a response hook records each
POST's status of 400 or more into a list the awaiting task holds in a context variable (the
SDK's transport runs each request's POST in the sender's context), which lets an error
name its status as OpenAI's ``http_error`` does.

Headers (an ``Authorization`` among them) reach the MCP server and nothing else: they are
not logged, not in any ``repr``, and any message built here has their values replaced,
even when the server echoes one back; the SDK's transports, which log whole messages at
DEBUG, are held at INFO unless their own level was set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from typing import Any

import httpx2
import mcp_types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT
from mcp.shared.exceptions import MCPError

from .config import McpConfig
from .policy import McpUrlPolicy, normalise_url
from .results import (
    McpCallResult,
    McpTool,
    call_result,
    http_error,
    protocol_error,
    timeout_error,
)

logger = logging.getLogger(__name__)

# The SDK's transports log every JSON-RPC message whole at DEBUG: tool arguments and
# results, and whatever a server echoes back (a credential among them). Nothing set for
# these loggers themselves means nobody asked for that, so they are held at INFO.
_SDK_MESSAGE_LOGGERS = ("mcp.client.streamable_http", "mcp.client.sse")

# Statuses that say the URL has no streamable HTTP endpoint, only the older SSE one.
_SSE_ONLY_STATUSES = frozenset({404, 405})
# What the SDK's transports yield: its (read stream, write stream) pair.
_Streams = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


class McpOpenError(Exception):
    """An MCP server could not be connected to, initialised or listed.

    ``error`` is in one of the shapes of OpenAI's ``RealtimeMcpToolCall.error``."""

    def __init__(self, message: str, error: dict[str, Any]) -> None:
        super().__init__(message)
        self.message = message
        self.error = error


def request_headers(headers: Mapping[str, str] | None, authorization: str | None) -> dict[str, str]:
    """The headers sent to the MCP server: the session's, plus OpenAI's ``authorization``
    field as a bearer token. ``ValueError`` (naming no value) when one is not a string."""
    sent: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ValueError("MCP headers must map header names to string values")
        if any(c in "\r\n" for c in name + value) or not name:
            raise ValueError("an MCP header name or value contains a line break or is empty")
        sent[name] = value
    if authorization is not None:
        if not isinstance(authorization, str) or any(c in "\r\n" for c in authorization):
            raise ValueError("the MCP authorization must be a string without line breaks")
        sent["Authorization"] = f"Bearer {authorization}"
    return sent


class McpConnection:
    """A connected, initialised MCP server and the tools it listed (see the module docstring)."""

    def __init__(self, url: str, headers: dict[str, str], config: McpConfig) -> None:
        self._url = url
        self._origin = normalise_url(url).origin
        self._headers = headers
        self._config = config
        self._statuses: ContextVar[list[int] | None] = ContextVar("mcp_http_statuses", default=None)
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self._session: ClientSession | None = None
        self.transport = "streamable-http"
        self.tools: list[McpTool] = []

    def __repr__(self) -> str:
        state = "open" if self._session is not None else "closed"
        return (
            f"McpConnection({self._origin!r}, {self.transport}, {state}, {len(self.tools)} tools)"
        )

    @classmethod
    async def open(
        cls,
        url: str,
        headers: Mapping[str, str] | None,
        config: McpConfig,
        policy: McpUrlPolicy,
        *,
        authorization: str | None = None,
    ) -> McpConnection:
        """Connect, initialise and list the tools within ``config.list_timeout_s``.

        Raises ``McpUrlRefused`` when the policy refuses the URL, ``ValueError`` for headers
        that are not strings, and ``McpOpenError`` for everything that went wrong after."""
        await policy.check(url)
        _quiet_sdk_message_logs()
        connection = cls(url, request_headers(headers, authorization), config)
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        connection._owner = loop.create_task(
            connection._own(ready), name=f"mcp {connection._origin}"
        )
        try:
            async with asyncio.timeout(config.list_timeout_s):
                await asyncio.shield(ready)
        except TimeoutError:
            await connection.close()
            what = "connecting to the MCP server and listing its tools"
            error = timeout_error(what, config.list_timeout_s)
            raise McpOpenError(error["message"], error) from None
        except BaseException:
            await connection.close()
            raise
        return connection

    async def call(self, name: str, arguments: dict[str, Any]) -> McpCallResult:
        """Call a tool within ``config.call_timeout_s``; every failure is a result, not an
        exception (cancelling the awaiting task cancels the call, and the connection stays)."""
        session = self._session
        if session is None:
            return McpCallResult(None, self._closed_error())
        statuses: list[int] = []
        token = self._statuses.set(statuses)
        try:
            result = await session.call_tool(
                name, arguments, read_timeout_seconds=self._config.call_timeout_s
            )
        except MCPError as exc:
            if statuses:  # an HTTP error status answered this call's POST
                return McpCallResult(None, self._error_for(exc, statuses))
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                return McpCallResult(
                    None, timeout_error("the tool call", self._config.call_timeout_s)
                )
            if exc.code == mcp_types.CONNECTION_CLOSED:
                return McpCallResult(None, self._closed_error())
            return McpCallResult(None, self._error_for(exc, statuses))
        except Exception as exc:  # a result that fails the SDK's checks (output schema, shape)
            logger.info("MCP tool %r on %s failed: %s", name, self._origin, type(exc).__name__)
            message = self._redact(f"the MCP tool call failed: {exc}")
            return McpCallResult(None, protocol_error(mcp_types.INTERNAL_ERROR, message))
        finally:
            self._statuses.reset(token)
        if not isinstance(result, mcp_types.CallToolResult):  # the SDK raises for the others
            return McpCallResult(
                None, protocol_error(mcp_types.INTERNAL_ERROR, "unexpected result")
            )
        return self._redacted(call_result(result, self._config.max_result_chars))

    async def close(self) -> None:
        """Leave the SDK's contexts in the owner task; idempotent, never raises."""
        owner = self._owner
        self._session = None
        if owner is None:
            return
        self._stop.set()
        with contextlib.suppress(Exception):
            # Leaving ends the server's session with a DELETE; a server that no longer
            # answers is not waited for longer than a connect would be.
            done, _ = await asyncio.wait({owner}, timeout=self._config.list_timeout_s)
            if not done:
                owner.cancel()
                await asyncio.wait({owner})

    # ---- the owner task ----------------------------------------------------------------

    async def _own(self, ready: asyncio.Future[None]) -> None:
        statuses: list[int] = []
        self._statuses.set(statuses)
        try:
            try:
                await self._serve(self._streamable_streams, ready)
            except Exception:
                if ready.done() or not _SSE_ONLY_STATUSES.intersection(statuses):
                    raise
                logger.info("MCP server %s speaks only SSE; connecting with it", self._origin)
                statuses.clear()
                self.transport = "sse"
                await self._serve(self._sse_streams, ready)
        except asyncio.CancelledError:
            ready.cancel()  # no-op once open returned; else open is the one cancelling
            raise
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(self._open_error(exc, statuses))
            else:
                message = self._redact(_describe(exc))
                logger.warning("MCP server %s connection ended: %s", self._origin, message)
        finally:
            self._session = None

    async def _serve(self, streams: _Streams, ready: asyncio.Future[None]) -> None:
        async with streams() as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            self.tools = await _list_tools(session)
            self._session = session
            ready.set_result(None)
            await self._stop.wait()

    @contextlib.asynccontextmanager
    async def _streamable_streams(self) -> AsyncIterator[Any]:
        async with (
            self._http_client() as client,
            streamable_http_client(self._url, http_client=client) as streams,
        ):
            yield streams

    @contextlib.asynccontextmanager
    async def _sse_streams(self) -> AsyncIterator[Any]:
        async with sse_client(
            self._url,
            timeout=self._config.list_timeout_s,
            httpx_client_factory=self._sse_client_factory,
        ) as streams:
            yield streams

    def _http_client(self) -> httpx2.AsyncClient:
        timeout = httpx2.Timeout(self._config.list_timeout_s, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
        return self._sse_client_factory(timeout=timeout)

    def _sse_client_factory(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        # The SDK passes no headers of its own here; ours are the session's.
        return httpx2.AsyncClient(
            headers={**(headers or {}), **self._headers},
            timeout=timeout,
            auth=auth,
            event_hooks={"response": [self._record_status]},
        )

    async def _record_status(self, response: httpx2.Response) -> None:
        # Only a POST carries a request; a GET (the streams the server may push on) that
        # fails is the SDK's to retry, or raises with its status (SSE).
        statuses = self._statuses.get()
        failed_post = response.status_code >= 400 and response.request.method == "POST"
        if statuses is not None and failed_post:
            statuses.append(response.status_code)

    # ---- errors ------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        for value in self._headers.values():
            secret = value.removeprefix("Bearer ")
            for hidden in (value, secret):
                if hidden:
                    text = text.replace(hidden, "[redacted]")
        return text

    def _redacted(self, result: McpCallResult) -> McpCallResult:
        if result.error is None:
            return result
        return McpCallResult(
            None, {**result.error, "message": self._redact(result.error["message"])}
        )

    def _closed_error(self) -> dict[str, Any]:
        return protocol_error(mcp_types.CONNECTION_CLOSED, "the MCP server connection is closed")

    def _error_for(self, exc: MCPError, statuses: list[int]) -> dict[str, Any]:
        if statuses:
            status = statuses[-1]
            return http_error(status, f"the MCP server answered HTTP {status}")
        return protocol_error(exc.code, self._redact(f"the MCP server answered: {exc.message}"))

    def _open_error(self, exc: BaseException, statuses: list[int]) -> McpOpenError:
        cause = _root_cause(exc)
        if isinstance(cause, httpx2.HTTPStatusError):
            status = cause.response.status_code
            error = http_error(status, f"the MCP server answered HTTP {status}")
        elif isinstance(cause, MCPError):
            error = self._error_for(cause, statuses)
        elif isinstance(cause, httpx2.TimeoutException):
            error = timeout_error("connecting to the MCP server", self._config.list_timeout_s)
        elif isinstance(cause, httpx2.TransportError | OSError):
            message = (
                f"could not connect to the MCP server at {self._origin} ({type(cause).__name__})"
            )
            error = protocol_error(mcp_types.CONNECTION_CLOSED, message)
        else:
            message = self._redact(f"the MCP server handshake failed: {_describe(cause)}")
            error = protocol_error(mcp_types.INTERNAL_ERROR, message)
        logger.info("MCP server %s could not be opened: %s", self._origin, error["message"])
        return McpOpenError(error["message"], error)


def _quiet_sdk_message_logs() -> None:
    for name in _SDK_MESSAGE_LOGGERS:
        sdk_logger = logging.getLogger(name)
        if sdk_logger.level == logging.NOTSET:
            sdk_logger.setLevel(logging.INFO)


async def _list_tools(session: ClientSession) -> list[McpTool]:
    tools: list[McpTool] = []
    cursor: str | None = None
    while True:
        params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        tools.extend(McpTool.from_sdk(tool) for tool in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _root_cause(exc: BaseException) -> BaseException:
    """The first exception in a (nested) group that is not a cancellation: anyio's task
    groups wrap a transport's failure together with the cancellations it caused."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_root_cause(inner) for inner in exc.exceptions]
        for leaf in leaves:
            if not isinstance(leaf, asyncio.CancelledError):
                return leaf
        return leaves[0]
    return exc


def _describe(exc: BaseException) -> str:
    cause = _root_cause(exc)
    text = str(cause)
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__
