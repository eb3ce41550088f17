"""Headers sent to an MCP server reach it, and nothing else: no log record (ours, the mcp
SDK's, httpx2's, at DEBUG), exception message or repr carries a header value."""

from __future__ import annotations

import logging

import pytest

from mcp_servers import closed_port_url, serve_mcp
from omniduplex.engine.duplex.mcp import McpConfig, McpConnection, McpOpenError, McpUrlPolicy

TOKEN = "sk-test-7f3c9a1b5d"
API_KEY = "key-4e8d2c6a0f"


def policy_for(url: str) -> McpUrlPolicy:
    return McpUrlPolicy([url.rsplit("/", 1)[0] + "/"])


def assert_nowhere(texts: list[str]) -> None:
    for text in texts:
        assert TOKEN not in text and API_KEY not in text, text


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    for name in ("mcp", "httpx2", "httpcore2", "httpx", "httpcore", "omniduplex"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


# The test MCP server runs in this process; what it logs is the other end's, not ours.
_SERVER_LOGGERS = ("mcp.server", "sse_starlette", "uvicorn")


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    texts = []
    for record in caplog.records:
        if record.name.startswith(_SERVER_LOGGERS):
            continue
        texts.append(record.getMessage())
        texts.append(repr(record.args))
        if record.exc_info and record.exc_info[1] is not None:
            texts.append(repr(record.exc_info[1]))
    return texts


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_headers_reach_the_server_and_no_log_or_repr(
    transport: str, debug_logs: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, str]] = []
    tool_headers: list[dict[str, str]] = []
    async with serve_mcp(transport, seen, tool_headers=tool_headers) as url:
        connection = await McpConnection.open(
            url, {"X-Api-Key": API_KEY}, McpConfig(), policy_for(url), authorization=TOKEN
        )
        try:
            assert (await connection.call("request_headers", {})).error is None
            echoed = await connection.call(
                "fail_with", {"message": "denied for", "echo_header": "authorization"}
            )
            texts = [repr(connection), repr(echoed), repr(connection.tools)]
        finally:
            await connection.close()
    assert seen and all(h["authorization"] == f"Bearer {TOKEN}" for h in seen)
    assert all(h["x-api-key"] == API_KEY for h in seen)
    assert tool_headers[0]["authorization"] == f"Bearer {TOKEN}"
    assert echoed.error is not None and "[redacted]" in echoed.error["message"]
    assert any(r.name.startswith(("mcp.client", "httpx2")) for r in debug_logs.records)
    assert_nowhere(texts + logged(debug_logs))


async def test_a_failed_open_carries_no_header_value(debug_logs: pytest.LogCaptureFixture) -> None:
    url = closed_port_url()
    with pytest.raises(McpOpenError) as caught:
        await McpConnection.open(
            url, {"X-Api-Key": API_KEY}, McpConfig(), policy_for(url), authorization=TOKEN
        )
    assert_nowhere([str(caught.value), repr(caught.value), repr(caught.value.error)])
    assert_nowhere(logged(debug_logs))


@pytest.mark.parametrize(
    ("headers", "authorization"),
    [({"X-Api-Key": 7}, None), ({"X-Api-Key": f"{API_KEY}\r\nX-Evil: 1"}, None), ({}, 12)],
)
async def test_headers_that_are_not_strings_are_refused_without_their_value(
    headers: dict, authorization: object
) -> None:
    with pytest.raises(ValueError) as caught:
        await McpConnection.open(
            "http://127.0.0.1:9/mcp",
            headers,
            McpConfig(),
            McpUrlPolicy(["http://127.0.0.1:9/"]),
            authorization=authorization,  # type: ignore[arg-type]
        )
    assert_nowhere([str(caught.value)])
