"""Function calling through the real client libraries, on the shipped ``cascade-rules``.

The cascade's rule responder calls a declared tool when every word of its name is among
the user's words (``check_weather`` for "Check the weather in Paris please.") and, asked
to speak after the tool's output, speaks that output. So the whole OpenAI flow runs with
no LLM: the call (``response.function_call_arguments.*`` in a ``function_call`` item),
the client's ``function_call_output``, and the spoken answer that uses it. Every event
the ``openai`` SDK receives validates against its own server-event union; the Agents
SDK, LiveKit and Pipecat each run their own function-calling flow through their public
API, and their tool runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner
from livekit_tools import livekit_tool_turn
from openai import AsyncOpenAI
from server_harness import TIMEOUT_S, RunningServer, SdkEvents, run_server

WEATHER = {
    "type": "function",
    "name": "check_weather",
    "description": "The weather forecast for a place.",
    "parameters": {
        "type": "object",
        "properties": {"place": {"type": "string"}},
        "required": ["place"],
    },
}
ASK = "Check the weather in Paris please."
FORECAST = "sunny and warm"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with run_server("cascade-rules") as running:
        yield running


async def _ask_and_answer(conn: Any, wire: SdkEvents, tools: Any) -> dict[str, Any]:
    """The flow, as the SDK's user writes it; returns what it saw, by step."""
    await wire.until("session.created")
    await conn.session.update(session=tools)
    await wire.until("session.updated")
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]}
    )
    await conn.response.create()
    calling = await wire.until("response.done")
    call = next(i for i in calling[-1]["response"]["output"] if i["type"] == "function_call")
    await conn.conversation.item.create(
        item={
            "type": "function_call_output",
            "call_id": call["call_id"],
            "output": json.dumps({"forecast": FORECAST}),
        }
    )
    # GA says an item is done; beta only that it was created.
    answered_output = await wire.until(
        "conversation.item.done" if wire.dialect == "ga" else "conversation.item.created"
    )
    await conn.response.create()
    answer = await wire.until("response.done")
    return {"calling": calling, "call": call, "output": answered_output, "answer": answer}


def _check_flow(steps: dict[str, Any]) -> None:
    calling, call, answer = steps["calling"], steps["call"], steps["answer"]
    kinds = [e["type"] for e in calling]
    # OpenAI's order for a function call item.
    added = next(
        k
        for k, e in enumerate(calling)
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    )
    assert calling[added]["item"]["status"] == "in_progress"
    deltas = [e for e in calling if e["type"] == "response.function_call_arguments.delta"]
    done = next(e for e in calling if e["type"] == "response.function_call_arguments.done")
    assert added < kinds.index("response.function_call_arguments.delta")
    assert kinds.index("response.function_call_arguments.done") < len(kinds) - 1
    assert all(d["call_id"] == call["call_id"] for d in deltas)
    assert "".join(d["delta"] for d in deltas) == done["arguments"] == call["arguments"]
    assert done["name"] == "check_weather" and call["status"] == "completed"
    assert json.loads(call["arguments"]) == {"place": ASK}
    assert calling[-1]["response"]["status"] == "completed"
    # A response that only calls a tool carries the call alone (no empty message item).
    assert [i["type"] for i in calling[-1]["response"]["output"]] == ["function_call"]
    assert calling[added]["output_index"] == 0
    assert not [e for e in calling if e["type"] == "response.content_part.added"]
    # The output is stored and answered only when asked: no response of its own.
    assert not [e for e in steps["output"] if e["type"] == "response.created"]
    spoken = answer[-1]["response"]["output"][0]["content"][0]["transcript"]
    assert answer[-1]["response"]["status"] == "completed"
    assert spoken == f"{FORECAST}."


@pytest.mark.parametrize("dialect", ["ga", "beta"])
async def test_the_openai_sdk_calls_a_tool_and_hears_the_answer(server, dialect) -> None:
    if dialect == "ga":
        client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
        connection = client.realtime.connect(model="cascade-rules")
        tools = {"type": "realtime", "tools": [WEATHER], "tool_choice": "auto"}
    else:
        base = server.ws_url.rsplit("/", 1)[0]
        client = AsyncOpenAI(api_key="unused", websocket_base_url=base)
        connection = client.beta.realtime.connect(model="cascade-rules")
        tools = {"tools": [WEATHER], "tool_choice": "auto"}
    async with connection as conn:
        wire = SdkEvents(conn, dialect)
        steps = await _ask_and_answer(conn, wire, tools)
    _check_flow(steps)


async def test_a_function_call_output_for_an_unknown_call_is_refused(server) -> None:
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    async with client.realtime.connect(model="cascade-rules") as conn:
        wire = SdkEvents(conn, "ga")
        await wire.until("session.created")
        await conn.conversation.item.create(
            item={"type": "function_call_output", "call_id": "call_nope", "output": "{}"}
        )
        refused = (await wire.until("error"))[-1]["error"]
    assert refused["type"] == "invalid_request_error"
    assert refused["code"] == "function_call_not_found" and refused["param"] == "item.call_id"


async def test_a_malformed_tool_is_refused_alone(server) -> None:
    client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
    bad = {**WEATHER, "name": "no spaces allowed"}
    async with client.realtime.connect(model="cascade-rules") as conn:
        wire = SdkEvents(conn, "ga")
        await wire.until("session.created")
        update = {"type": "realtime", "tools": [WEATHER, bad], "instructions": "Be brief."}
        await conn.session.update(session=update)
        seen = await wire.until("session.updated")
    errors = [e["error"] for e in seen if e["type"] == "error"]
    assert [(e["code"], e["param"]) for e in errors] == [("invalid_tool", "tools[1].name")]
    assert seen[-1]["session"]["instructions"] == "Be brief."


async def test_an_agents_sdk_function_tool_runs_and_the_agent_speaks_its_result(server) -> None:
    ran: list[str] = []

    @function_tool
    def check_weather(place: str) -> str:
        """The weather forecast for a place."""
        ran.append(place)
        return FORECAST

    agent: RealtimeAgent[Any] = RealtimeAgent(
        name="Assistant", instructions="Answer briefly.", tools=[check_weather]
    )
    runner = RealtimeRunner(agent)
    session = await runner.run(
        model_config={"url": f"{server.ws_url}?model=cascade-rules", "api_key": "unused"}
    )
    errors: list[Any] = []
    spoken: list[str] = []
    async with session:
        await session.send_message(ASK)

        async def listen() -> None:
            async for event in session:
                if event.type == "error":
                    errors.append(event.error)
                elif event.type == "raw_model_event" and event.data.type == "raw_server_event":
                    raw = event.data.data
                    if raw.get("type") == "response.output_audio_transcript.done":
                        spoken.append(raw["transcript"])
                        if FORECAST in raw["transcript"]:
                            return

        await asyncio.wait_for(listen(), TIMEOUT_S)
    assert ran == [ASK]
    assert any(FORECAST in text for text in spoken), spoken
    assert not errors, errors


async def test_a_livekit_function_tool_runs_and_the_model_speaks_its_result(server) -> None:
    from livekit.agents import llm

    ran: list[str] = []

    @llm.function_tool
    async def check_weather(place: str) -> str:
        """The weather forecast for a place."""
        ran.append(place)
        return FORECAST

    turn = await livekit_tool_turn(server.http_url, "cascade-rules", check_weather, ASK)
    calls, spoken, errors = turn.calls, turn.spoken, turn.errors
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("check_weather", {"place": ASK})]
    assert ran == [ASK]
    assert spoken == f"{FORECAST}."
    assert not errors, errors


async def test_a_pipecat_registered_function_runs_and_the_answer_speaks_its_result(
    server,
) -> None:
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    from pipecat.frames.frames import EndFrame, LLMRunFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
    from pipecat.workers.runner import WorkerRunner

    from client_compat.pipecat import _processors, _Tally

    ran: list[Any] = []

    async def check_weather(params: Any) -> None:
        ran.append(params.arguments)
        await params.result_callback({"forecast": FORECAST})

    settings = OpenAIRealtimeLLMService.Settings(
        model="cascade-rules", system_instruction="Answer briefly."
    )
    llm = OpenAIRealtimeLLMService(api_key="unused", base_url=server.ws_url, settings=settings)
    llm.register_function("check_weather", check_weather)
    schema = FunctionSchema(
        name="check_weather",
        description="The weather forecast for a place.",
        properties={"place": {"type": "string"}},
        required=["place"],
    )
    context = LLMContext(
        messages=[{"role": "user", "content": ASK}],
        tools=ToolsSchema(standard_tools=[schema]),
    )
    user, assistant = LLMContextAggregatorPair(context)
    tally = _Tally()
    source, sink, watcher = _processors(tally)
    worker = PipelineWorker(
        Pipeline([source, user, llm, sink, assistant]),
        params=PipelineParams(audio_in_sample_rate=16_000, audio_out_sample_rate=24_000),
        observers=[watcher],
        idle_timeout_secs=None,
    )
    errors: list[Any] = []

    @worker.event_handler("on_pipeline_error")
    async def _on_error(_worker: Any, frame: Any) -> None:
        errors.append(frame.error)

    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _on_started(_worker: Any, _frame: Any) -> None:
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(started.wait(), TIMEOUT_S)
        await worker.queue_frame(LLMRunFrame())  # a bot's first turn, on this context
        heard = await tally.until(lambda: FORECAST in "".join(tally.text))
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(run, TIMEOUT_S)
    assert ran == [{"place": ASK}]
    assert heard, tally.text
    assert not errors, errors
