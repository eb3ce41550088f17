"""The OpenAI Agents SDK's voice agent (``RealtimeAgent`` + ``RealtimeRunner``, default
session settings: ``semantic_vad``, voice ``ash``, input transcription) holds a whole
spoken conversation with loopback and the default cascade, barge-in included, and the
SDK surfaces no ``RealtimeError`` and raises nothing."""

from __future__ import annotations

from client_compat import openai_agents
from client_compat.report import Target


async def test_openai_agents_default_conversation(target: Target) -> None:
    report = await openai_agents.run_conversation(target)
    assert report.ok, report.summary()
