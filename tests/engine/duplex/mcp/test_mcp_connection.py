"""McpConnection against real MCP servers (tests/mcp_servers.py), over both transports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import mcp_types
import pytest
from openai.types.realtime import RealtimeMcpToolCall

from mcp_servers import WEATHER, closed_port_url, serve_mcp
from omniduplex.engine.duplex.mcp import (
    McpCallResult,
    McpConfig,
    McpConnection,
    McpOpenError,
    McpUrlPolicy,
)

TOOLS = {"get_weather", "add", "explode", "hang", "big", "request_headers", "fail_with"}


def policy_for(url: str) -> McpUrlPolicy:
    return McpUrlPolicy([url.rsplit("/", 1)[0] + "/"])


async def connect(url: str, **config: float) -> McpConnection:
    return await McpConnection.open(url, None, McpConfig(**config), policy_for(url))


def assert_openai_error(result: McpCallResult) -> None:
    """The error is one of the shapes OpenAI's RealtimeMcpToolCall.error takes."""
    call = RealtimeMcpToolCall.model_validate(
        {"id": "mcp_1", "type": "mcp_call", "name": "t", "arguments": "{}", "server_label": "s"}
        | {"error": result.error}
    )
    assert call.error is not None and call.error.model_dump() == result.error


@pytest.fixture(params=["streamable-http", "sse"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    async with serve_mcp(request.param) as url:
        yield url


async def test_open_lists_the_tools_over_each_transport(server: str) -> None:
    connection = await connect(server)
    try:
        assert connection.transport == ("sse" if server.endswith("/sse") else "streamable-http")
        assert {tool.name for tool in connection.tools} == TOOLS
        tools = {tool.name: tool for tool in connection.tools}
        assert tools["get_weather"].read_only and not tools["add"].read_only
        assert tools["add"].input_schema["properties"].keys() == {"a", "b"}
        assert tools["get_weather"].description == "The weather in a city (always the same)."
    finally:
        await connection.close()


async def test_a_call_returns_the_text_of_its_content(server: str) -> None:
    connection = await connect(server)
    try:
        weather = await connection.call("get_weather", {"city": "Paris"})
        assert weather == McpCallResult(output=WEATHER.format(city="Paris"), error=None)
        assert await connection.call("add", {"a": 2, "b": 40}) == McpCallResult("42", None)
    finally:
        await connection.close()


async def test_a_tool_that_raises_is_a_tool_execution_error(server: str) -> None:
    connection = await connect(server)
    try:
        result = await connection.call("explode", {})
        assert result.output is None and result.error is not None
        assert result.error["type"] == "tool_execution_error"
        assert "explode" in result.error["message"]
        assert_openai_error(result)
        told = await connection.call("fail_with", {"message": "no such city"})
        assert told == McpCallResult(
            None,
            {
                "type": "tool_execution_error",
                "message": "Error executing tool fail_with: no such city",
            },
        )
        bad_arguments = await connection.call("add", {"a": "two"})
        assert bad_arguments.error is not None
        assert bad_arguments.error["type"] == "tool_execution_error"
    finally:
        await connection.close()


async def test_an_unknown_tool_is_an_error_not_an_exception(server: str) -> None:
    connection = await connect(server)
    try:
        result = await connection.call("no_such_tool", {})
        assert result.output is None and result.error is not None
        assert_openai_error(result)
    finally:
        await connection.close()


async def test_a_call_past_its_timeout_is_a_protocol_error_and_the_next_call_works(
    server: str,
) -> None:
    connection = await connect(server, call_timeout_s=0.2)
    try:
        late = await connection.call("hang", {"seconds": 30})
        assert late.output is None
        assert late.error == {
            "type": "protocol_error",
            "code": mcp_types.REQUEST_TIMEOUT,
            "message": "the tool call timed out after 0.2 s",
        }
        assert_openai_error(late)
        assert await connection.call("add", {"a": 1, "b": 2}) == McpCallResult("3", None)
    finally:
        await connection.close()


async def until(condition: Callable[[], bool]) -> None:
    """Wait for the server thread to record something; the bound only stops a hang."""
    async with asyncio.timeout(60):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_a_cancelled_call_is_cancelled_on_the_server_and_the_connection_stays(
    transport: str,
) -> None:
    calls_seen: list[str] = []
    async with serve_mcp(transport, calls_seen=calls_seen) as url:
        connection = await connect(url)
        try:
            call = asyncio.create_task(connection.call("hang", {"seconds": 60}))
            await until(lambda: "hang started" in calls_seen)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await until(lambda: "hang cancelled" in calls_seen)
            assert await connection.call("add", {"a": 5, "b": 6}) == McpCallResult("11", None)
            calls = [connection.call("add", {"a": i, "b": i}) for i in range(5)]
            assert [r.output for r in await asyncio.gather(*calls)] == ["0", "2", "4", "6", "8"]
        finally:
            await connection.close()


async def test_big_output_is_truncated_with_a_note_for_the_model(server: str) -> None:
    connection = await connect(server, max_result_chars=100)
    try:
        result = await connection.call("big", {"n": 51234})
        assert result.output == "x" * 100 + "… [truncated: the tool returned 51234 characters]"
        exact = await connection.call("big", {"n": 100})
        assert exact.output == "x" * 100
    finally:
        await connection.close()


async def test_paginated_tool_lists_are_followed() -> None:
    async with serve_mcp(page_size=2) as url:
        connection = await connect(url)
        try:
            names = [tool.name for tool in connection.tools]
            assert set(names) == TOOLS and len(names) == len(TOOLS)
        finally:
            await connection.close()


async def test_a_server_that_is_down_fails_to_open() -> None:
    url = closed_port_url()
    with pytest.raises(McpOpenError) as caught:
        await connect(url, list_timeout_s=30)
    error = caught.value.error
    assert error["type"] == "protocol_error" and error["code"] == mcp_types.CONNECTION_CLOSED
    # Refused at once, not after the 30 s budget: the error says why, not "timed out".
    assert "could not connect" in caught.value.message


async def test_an_http_error_status_is_an_http_error() -> None:
    async with serve_mcp() as url:
        missing = url.rsplit("/", 1)[0] + "/not-here"
        with pytest.raises(McpOpenError) as caught:
            await connect(missing)
    # 404 on the POST reads as "SSE only"; the SSE GET then answers 404 too.
    assert caught.value.error == {
        "type": "http_error",
        "code": 404,
        "message": "the MCP server answered HTTP 404",
    }


async def test_a_server_that_never_answers_times_out_opening() -> None:
    # A listening socket that accepts and never answers: the open runs out of its budget.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        with pytest.raises(McpOpenError) as caught:
            await connect(url, list_timeout_s=0.3)
        assert caught.value.error["type"] == "protocol_error"
        assert caught.value.error["code"] == mcp_types.REQUEST_TIMEOUT
    finally:
        server.close()


async def test_close_from_another_task_than_open() -> None:
    async with serve_mcp() as url:
        opened = await asyncio.create_task(connect(url))
        assert await opened.call("add", {"a": 1, "b": 1}) == McpCallResult("2", None)
        await asyncio.create_task(opened.close())
        await opened.close()  # idempotent
        closed = await opened.call("add", {"a": 1, "b": 1})
        assert closed.error is not None and closed.error["code"] == mcp_types.CONNECTION_CLOSED
        assert "closed" in repr(opened)


async def test_a_server_that_goes_away_turns_calls_into_errors() -> None:
    server = serve_mcp()
    url = await server.__aenter__()
    connection = await connect(url, call_timeout_s=2)
    try:
        await server.__aexit__(None, None, None)
        result = await connection.call("add", {"a": 1, "b": 1})
        assert result.output is None and result.error is not None
        assert_openai_error(result)
    finally:
        await connection.close()


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_opening_and_closing_leaks_no_tasks(transport: str) -> None:
    async with serve_mcp(transport) as url:
        before = asyncio.all_tasks()
        for _ in range(20):
            connection = await connect(url)
            await connection.call("add", {"a": 1, "b": 2})
            await connection.close()
        for _ in range(3):
            with pytest.raises(McpOpenError):
                await connect(closed_port_url())
        await asyncio.sleep(0)
        assert asyncio.all_tasks() == before


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_a_server_that_wants_a_bearer_token_is_an_http_401_without_it(
    transport: str,
) -> None:
    async with serve_mcp(transport, bearer="let-me-in") as url:
        with pytest.raises(McpOpenError) as caught:
            await connect(url)
        assert caught.value.error == {
            "type": "http_error",
            "code": 401,
            "message": "the MCP server answered HTTP 401",
        }
        connection = await McpConnection.open(
            url, None, McpConfig(), policy_for(url), authorization="let-me-in"
        )
        try:
            assert await connection.call("add", {"a": 1, "b": 2}) == McpCallResult("3", None)
        finally:
            await connection.close()


async def test_a_call_answered_with_an_http_status_is_an_http_error() -> None:
    async with serve_mcp(refused_tool="add") as url:
        connection = await connect(url)
        try:
            refused = await connection.call("add", {"a": 1, "b": 2})
            assert refused == McpCallResult(
                None,
                {"type": "http_error", "code": 403, "message": "the MCP server answered HTTP 403"},
            )
            assert_openai_error(refused)
            # The status belongs to that call alone.
            weather = await connection.call("get_weather", {"city": "Oslo"})
            assert weather == McpCallResult(WEATHER.format(city="Oslo"), None)
        finally:
            await connection.close()


async def test_close_while_a_call_is_in_flight_ends_the_call_with_an_error() -> None:
    calls_seen: list[str] = []
    async with serve_mcp(calls_seen=calls_seen) as url:
        connection = await connect(url)
        call = asyncio.create_task(connection.call("hang", {"seconds": 60}))
        await until(lambda: "hang started" in calls_seen)
        await connection.close()
        result = await call
        assert result.output is None and result.error is not None
        assert result.error["code"] == mcp_types.CONNECTION_CLOSED


async def test_over_sse_a_call_answered_with_an_http_status_is_an_http_error_too() -> None:
    # The SDK's SSE transport stops sending once a POST fails: the call is answered at its
    # timeout, with the status it got, and the connection reads as closed from then on.
    async with serve_mcp("sse", refused_tool="add") as url:
        connection = await connect(url, call_timeout_s=0.3)
        try:
            refused = await connection.call("add", {"a": 1, "b": 2})
            assert refused.error == {
                "type": "http_error",
                "code": 403,
                "message": "the MCP server answered HTTP 403",
            }
            after = await connection.call("get_weather", {"city": "Oslo"})
            assert after.error is not None and after.error["code"] == mcp_types.CONNECTION_CLOSED
        finally:
            await connection.close()
