"""Remote MCP tools through the ``openai`` SDK, against real MCP servers, on ``cascade-rules``.

The test MCP servers are the ``mcp`` SDK's own (``tests/mcp_servers.py``) on loopback,
which the test deployment allows (``mcp.allowed_urls``); by default a loopback URL is
refused. The cascade's rule responder calls a tool when every word of its name is among
the user's words ("Get the weather in Paris." calls ``get_weather``) and speaks a tool's
output when asked to answer it, so the whole flow runs with no LLM: the server lists the
tools, the model calls one, the server makes the call and the same response speaks it.
Every event the SDK receives validates against its own GA server-event union (``SdkEvents``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from openai import AsyncOpenAI
from server_harness import TIMEOUT_S, RunningServer, SdkEvents, run_server

from client_compat.report import question_pcm16, silence_pcm16
from mcp_servers import closed_port_url, serve_mcp
from omniduplex.engine.duplex.mcp import McpConfig

TOKEN = "sk-test-secret-token-8d1c"
ASK_WEATHER = "Get the weather in Paris."
WEATHER_WORDS = "18 degrees and sunny"


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with serve_mcp() as url:
        yield url


@pytest.fixture(scope="module")
def down_url() -> str:
    """An allowed URL where no MCP server listens."""
    return closed_port_url()


@pytest.fixture(scope="module")
def server(mcp_url: str, down_url: str) -> Iterator[RunningServer]:
    allowed = (_prefix(mcp_url), _prefix(down_url))
    with run_server(
        "cascade-rules", mcp=McpConfig(allowed_urls=allowed, call_timeout_s=3.0)
    ) as running:
        yield running


def _prefix(url: str) -> str:
    return url.rsplit("/", 1)[0] + "/"


def mcp_tool(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "weather", "server_url": url, **extra}


async def _open(server: RunningServer, tools: list[dict[str, Any]], **session: Any):
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    manager = client.realtime.connect(model="cascade-rules")
    conn = await manager.enter()
    events = SdkEvents(conn)
    await events.until("session.created")
    await conn.session.update(session={"type": "realtime", "tools": tools, **session})
    return conn, events


async def _say(conn: Any, text: str) -> None:
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await conn.response.create()


def _spoken(done: dict[str, Any]) -> str:
    messages = [o for o in done["response"]["output"] if o["type"] == "message"]
    return " ".join(part.get("transcript") or "" for m in messages for part in m["content"])


async def test_the_servers_tools_are_listed_into_the_session(server, mcp_url) -> None:
    conn, events = await _open(
        server, [mcp_tool(mcp_url, allowed_tools=["get_weather", "add"], headers={"X-Key": TOKEN})]
    )
    try:
        seen = await events.until("mcp_list_tools.completed")
        done = await events.until("conversation.item.done")
    finally:
        await conn.close()
    updated = next(e for e in seen if e["type"] == "session.updated")
    (echoed,) = updated["session"]["tools"]
    assert echoed["server_label"] == "weather" and "headers" not in echoed
    added = next(e for e in seen if e["type"] == "conversation.item.added")
    assert added["item"]["type"] == "mcp_list_tools" and added["item"]["tools"] == []
    kinds = [e["type"] for e in seen]
    assert kinds.index("conversation.item.added") < kinds.index("mcp_list_tools.in_progress")
    listing = done[-1]["item"]
    assert listing["id"] == added["item"]["id"] == seen[-1]["item_id"]
    assert sorted(t["name"] for t in listing["tools"]) == ["add", "get_weather"]
    weather = next(t for t in listing["tools"] if t["name"] == "get_weather")
    assert weather["input_schema"]["properties"]["city"]["type"] == "string"
    assert weather["annotations"]["readOnlyHint"] is True


async def test_a_call_is_made_by_the_server_and_spoken_in_the_same_response(
    server, mcp_url
) -> None:
    conn, events = await _open(server, [mcp_tool(mcp_url, require_approval="never")])
    try:
        await events.until("conversation.item.done")  # the listing
        await _say(conn, ASK_WEATHER)
        seen = await events.until("response.done")
        call_id = next(o["id"] for o in seen[-1]["response"]["output"] if o["type"] == "mcp_call")
        await conn.conversation.item.retrieve(item_id=call_id)
        retrieved = await events.until("conversation.item.retrieved")
    finally:
        await conn.close()
    kinds = [e["type"] for e in seen]
    order = [
        "response.created",
        "response.output_item.added",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.output_item.done",
    ]
    assert [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order)
    assert kinds.count("response.created") == 1  # one response: call, then answer
    done = seen[-1]["response"]
    assert done["status"] == "completed"
    call, message = done["output"]
    assert call["type"] == "mcp_call" and message["type"] == "message"
    assert call["name"] == "get_weather" and call["server_label"] == "weather"
    assert WEATHER_WORDS in call["output"] and call.get("error") is None
    assert WEATHER_WORDS in _spoken(seen[-1])
    deltas = "".join(e["delta"] for e in seen if e["type"] == "response.mcp_call_arguments.delta")
    assert orjson.loads(deltas) == orjson.loads(call["arguments"]) == {"city": ASK_WEATHER}
    # The call is in history, with its output, for the client and for later turns.
    assert retrieved[-1]["item"]["output"] == call["output"]


async def test_approval_granted_runs_the_call_and_denied_does_not(server, mcp_url) -> None:
    conn, events = await _open(server, [mcp_tool(mcp_url, require_approval="always")])
    try:
        await events.until("conversation.item.done")
        await _say(conn, ASK_WEATHER)
        asked = await events.until("response.done")
        (request,) = asked[-1]["response"]["output"]
        assert request["type"] == "mcp_approval_request" and request["name"] == "get_weather"
        assert not [e for e in asked if e["type"].startswith("response.mcp_call")]
        await conn.conversation.item.create(
            item={
                "type": "mcp_approval_response",
                "approval_request_id": request["id"],
                "approve": True,
            }
        )
        granted = await events.until("response.done")
        await _say(conn, ASK_WEATHER)
        second = await events.until("response.done")
        (refused_request,) = second[-1]["response"]["output"]
        await conn.conversation.item.create(
            item={
                "type": "mcp_approval_response",
                "approval_request_id": refused_request["id"],
                "approve": False,
                "reason": "not now",
            }
        )
        denied = await events.until("response.done")
        # An approval request is answered once.
        await conn.conversation.item.create(
            item={
                "type": "mcp_approval_response",
                "approval_request_id": refused_request["id"],
                "approve": True,
            }
        )
        again = await events.until("error")
    finally:
        await conn.close()
    call = next(o for o in granted[-1]["response"]["output"] if o["type"] == "mcp_call")
    assert call["approval_request_id"] == request["id"] and WEATHER_WORDS in call["output"]
    assert WEATHER_WORDS in _spoken(granted[-1])
    assert not [o for o in denied[-1]["response"]["output"] if o["type"] == "mcp_call"]
    assert "declined" in _spoken(denied[-1])
    assert again[-1]["error"]["type"] == "invalid_request_error"
    assert again[-1]["error"]["param"] == "item.approval_request_id"


async def test_a_tool_that_raises_fails_its_call_and_the_response_says_so(server, mcp_url) -> None:
    conn, events = await _open(server, [mcp_tool(mcp_url, require_approval="never")])
    try:
        await events.until("conversation.item.done")
        await _say(conn, "Explode it.")
        seen = await events.until("response.done")
    finally:
        await conn.close()
    assert "response.mcp_call.failed" in [e["type"] for e in seen]
    call = next(o for o in seen[-1]["response"]["output"] if o["type"] == "mcp_call")
    assert call["error"]["type"] == "tool_execution_error"
    # The MCP SDK's server reports a tool's exception without its text.
    assert "explode" in call["error"]["message"] and call.get("output") is None
    assert seen[-1]["response"]["status"] == "completed"
    assert call["error"]["message"] in _spoken(seen[-1])


async def test_a_hanging_tool_times_out_and_the_session_goes_on(server, mcp_url) -> None:
    conn, events = await _open(server, [mcp_tool(mcp_url, require_approval="never")])
    try:
        await events.until("conversation.item.done")
        await _say(conn, "Hang on.")
        timed_out = await events.until("response.done")
        await _say(conn, ASK_WEATHER)
        after = await events.until("response.done")
    finally:
        await conn.close()
    call = next(o for o in timed_out[-1]["response"]["output"] if o["type"] == "mcp_call")
    assert call["name"] == "hang" and call["error"]["type"] == "protocol_error"
    assert "response.mcp_call.failed" in [e["type"] for e in timed_out]
    assert WEATHER_WORDS in _spoken(after[-1])


async def test_talking_over_a_call_in_flight_cancels_it_and_nothing_follows(mcp_url) -> None:
    with run_server("cascade-rules", mcp=McpConfig(allowed_urls=(_prefix(mcp_url),))) as own:
        await _talk_over_a_call(own, mcp_url)


async def _talk_over_a_call(server: RunningServer, mcp_url: str) -> None:
    conn, events = await _open(
        server,
        [mcp_tool(mcp_url, require_approval="never")],
        audio={"input": {"turn_detection": {"type": "server_vad"}}},
    )
    try:
        await events.until("conversation.item.done")
        await _say(conn, "Hang on.")
        started = await events.until("response.mcp_call.in_progress")
        response_id = next(e for e in started if e["type"] == "response.created")["response"]["id"]
        speech = silence_pcm16(200) + question_pcm16(text="Stop, what is your name?")
        for start in range(0, len(speech), 1920):
            await conn.input_audio_buffer.append(audio=_b64(speech[start : start + 1920]))
        cancelled = await events.until("response.done")
        await conn.input_audio_buffer.append(audio=_b64(silence_pcm16(1200)))
        later = await events.until("response.done")
    finally:
        await conn.close()
    done = cancelled[-1]["response"]
    assert done["id"] == response_id and done["status"] == "cancelled"
    call = next(o for o in done["output"] if o["type"] == "mcp_call")
    assert call["error"]["type"] == "protocol_error"
    assert "response.mcp_call.failed" in [e["type"] for e in cancelled]
    # Nothing of the cancelled response after its response.done, the call's end included.
    assert not [e for e in later if e.get("response_id") == response_id]
    assert not [e for e in later if e.get("item_id") == call["id"]]
    assert later[-1]["response"]["status"] == "completed"


async def test_a_server_that_is_down_fails_its_listing_only(server, down_url) -> None:
    conn, events = await _open(server, [mcp_tool(down_url)])
    try:
        seen = await events.until("mcp_list_tools.failed")
        await _say(conn, "Hello there.")
        answered = await events.until("response.done")
    finally:
        await conn.close()
    assert not [e for e in seen if e["type"] == "error"]
    assert answered[-1]["response"]["status"] == "completed"


async def test_a_url_outside_the_allow_list_is_refused_with_a_typed_error(server) -> None:
    conn, events = await _open(server, [mcp_tool("http://10.1.2.3:9000/mcp")])
    try:
        seen = await events.until("error")
        await conn.session.update(session={"type": "realtime", "instructions": "Be brief."})
        updated = await events.until("session.updated")
    finally:
        await conn.close()
    error = seen[-1]["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "mcp_server_url_not_allowed"
    assert error["param"].endswith("tools[0].server_url")
    assert not updated[-1]["session"].get("tools")


async def test_headers_reach_the_mcp_server_and_nowhere_else(
    server, caplog: pytest.LogCaptureFixture
) -> None:
    seen_headers: list[dict[str, str]] = []
    caplog.set_level(logging.DEBUG)
    async with serve_mcp(headers_seen=seen_headers) as url:
        with run_server("cascade-rules", mcp=McpConfig(allowed_urls=(_prefix(url),))) as own:
            tool = mcp_tool(
                url, headers={"X-Api-Key": TOKEN}, authorization=TOKEN, require_approval="never"
            )
            conn, events = await _open(own, [tool])
            try:
                await events.until("mcp_list_tools.completed")
                await _say(conn, ASK_WEATHER)
                await events.until("response.done")
            finally:
                await conn.close()
    assert any(h.get("x-api-key") == TOKEN for h in seen_headers)
    assert any(h.get("authorization") == f"Bearer {TOKEN}" for h in seen_headers)
    assert TOKEN not in orjson.dumps(events.seen).decode()
    assert not [r for r in caplog.records if TOKEN in r.getMessage()]


def _b64(pcm: bytes) -> str:
    return base64.b64encode(pcm).decode()


async def test_what_a_session_may_not_declare_is_refused_and_the_session_goes_on(
    server, mcp_url
) -> None:
    five = [mcp_tool(mcp_url, server_label=f"server{i}") for i in range(5)]
    conn, events = await _open(server, five)
    try:
        too_many = await events.until("error")
        await conn.response.create(
            response={"tools": [mcp_tool(mcp_url, server_label="elsewhere")]}
        )
        undeclared = await events.until("error")
        await conn.conversation.item.create(
            item={"type": "mcp_approval_response", "approval_request_id": "item_none"}
        )
        no_answer = await events.until("error")
        await conn.conversation.item.create(
            item={
                "type": "mcp_approval_response",
                "approval_request_id": "item_no",
                "approve": True,
            }
        )
        no_request = await events.until("error")
        await _say(conn, "Hello there.")
        answered = await events.until("response.done")
    finally:
        await conn.close()
    errors = [e[-1]["error"] for e in (too_many, undeclared, no_answer, no_request)]
    assert all(error["type"] == "invalid_request_error" for error in errors)
    assert [error["param"] for error in errors] == [
        "tools[4]",
        "response.tools[0].server_label",
        "item.approve",
        "item.approval_request_id",
    ]
    assert answered[-1]["response"]["status"] == "completed"


async def test_a_beta_client_is_told_mcp_tools_need_the_ga_interface(server, mcp_url) -> None:
    base = server.ws_url.rsplit("/", 1)[0]
    client = AsyncOpenAI(api_key="unused", websocket_base_url=base)
    async with client.beta.realtime.connect(model="cascade-rules") as conn:
        await conn.session.update(session={"tools": [mcp_tool(mcp_url)]})
        while (event := orjson.loads(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S)))[
            "type"
        ] != "error":
            assert not event["type"].startswith("mcp_")
    assert event["error"]["type"] == "invalid_request_error"
    assert event["error"]["param"] == "session.tools[0].type"
    assert "GA" in event["error"]["message"]
