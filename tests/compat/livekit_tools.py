"""LiveKit's own function-calling flow against a Realtime server, for the tool tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from server_harness import TIMEOUT_S


@dataclass
class ToolTurn:
    """What one asked-for tool round gave: the model's calls, its spoken answer after the
    tool's result, and the session's error events."""

    calls: list[Any]
    spoken: str
    errors: list[Any]


async def livekit_tool_turn(http_url: str, model_name: str, tool: Any, ask: str) -> ToolTurn:
    """``ask`` with ``tool`` declared; LiveKit runs the first call and puts its result in
    the chat context, and the model answers from it."""
    from livekit.agents import llm
    from livekit.plugins import openai as lk_openai

    model = lk_openai.realtime.RealtimeModel(
        base_url=http_url + "/v1", api_key="unused", model=model_name
    )
    session = model.session()
    errors: list[Any] = []
    session.on("error", errors.append)
    try:
        await session.update_instructions("Answer briefly.")
        await session.update_tools([tool])
        asked = session.chat_ctx.copy()
        asked.add_message(role="user", content=ask)
        await session.update_chat_ctx(asked)
        calls = await asyncio.wait_for(_calls(await session.generate_reply()), TIMEOUT_S)
        # The framework runs the tool and puts its result in the chat context.
        result = await llm.execute_function_call(calls[0], llm.ToolContext([tool]))
        answered = session.chat_ctx.copy()
        answered.items.append(result.fnc_call_out)
        await session.update_chat_ctx(answered)
        spoken = await asyncio.wait_for(_text(await session.generate_reply()), TIMEOUT_S)
    finally:
        await session.aclose()
        await model.aclose()
    return ToolTurn(calls, spoken, errors)


async def _calls(generation: Any) -> list[Any]:
    async for message in generation.message_stream:
        async for _ in message.text_stream:
            pass
    return [call async for call in generation.function_stream]


async def _text(generation: Any) -> str:
    text = ""
    async for message in generation.message_stream:
        async for piece in message.text_stream:
            text += piece
    return text
