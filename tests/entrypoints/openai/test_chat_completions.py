"""``POST /v1/chat/completions`` on a duplex deployment, over real HTTP against loopback.

Loopback answers audio with the utterance reversed and pitch-shifted, one unit per 100 ms,
transcribed "loop back unit-3 ..."; it echoes text split across units. A chat request is
one turn-based request on the engine's stage workers: no session, no admission slot.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from typing import Any

import httpx
import numpy as np
import openai
import orjson
import pytest
from openai import OpenAI
from server_harness import TIMEOUT_S, run_server

from omniduplex.engine.duplex.plugin import ModelError
from omniduplex.protocol.duplex import decode_wav, encode_wav

INPUT_RATE = 16_000
OUTPUT_RATE = 24_000
ONE_SECOND_TRANSCRIPT = "loop back " + " ".join(f"unit-{k}" for k in range(3, 11))


@pytest.fixture(scope="module")
def server():
    with run_server("loopback-fast") as running:
        yield running


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.http_url, timeout=TIMEOUT_S) as client:
        yield client


@pytest.fixture
def plugin(server):
    return server.app.state.omni.engine.plugin


def tone(ms: int, rate: int = INPUT_RATE, freq: float = 300.0) -> np.ndarray:
    t = np.arange(rate * ms // 1000) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def wav_b64(ms: int = 1000, rate: int = INPUT_RATE) -> str:
    return base64.b64encode(encode_wav(tone(ms, rate), rate)).decode()


def audio_message(data: str, fmt: str = "wav", **extra: Any) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "input_audio", "input_audio": {"data": data, "format": fmt, **extra}}],
    }


def audio_request(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "loopback",
        "modalities": ["text", "audio"],
        "audio": {"voice": "alloy", "format": "wav"},
        "messages": [audio_message(wav_b64())],
    }
    body.update(overrides)
    return body


def sse_events(client: httpx.Client, body: dict[str, Any]) -> tuple[list[Any], httpx.Response]:
    """Every ``data:`` payload of a streamed answer (``"[DONE]"`` kept as a string)."""
    events: list[Any] = []
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            response.read()
            return events, response
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else orjson.loads(payload))
    return events, response


def assert_error(response: httpx.Response, status: int, code: str, param: str | None = None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == ("invalid_request_error" if status < 500 else "server_error")
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param
    return error


# ---- audio in, audio out ---------------------------------------------------------------


def test_audio_question_gets_audio_and_transcript(http):
    response = http.post("/v1/chat/completions", json=audio_request())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "loopback"
    assert body["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "stop"
    message = choice["message"]
    assert message["role"] == "assistant"
    assert message["content"] is None
    audio = message["audio"]
    assert audio["id"].startswith("audio_")
    assert audio["transcript"] == ONE_SECOND_TRANSCRIPT
    assert audio["expires_at"] > body["created"]
    samples, rate = decode_wav(base64.b64decode(audio["data"]))
    # One second in (16 kHz) is one second out (24 kHz), and it is not silence.
    assert rate == OUTPUT_RATE
    assert samples.size == OUTPUT_RATE
    assert float(np.sqrt(np.mean(samples**2))) > 0.05


def test_pcm16_in_and_out(http):
    pcm = (tone(500, OUTPUT_RATE) * 32767).astype("<i2").tobytes()
    body = audio_request(
        audio={"voice": "alloy", "format": "pcm16"},
        messages=[audio_message(base64.b64encode(pcm).decode(), "pcm16")],
    )
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    audio = response.json()["choices"][0]["message"]["audio"]
    raw = base64.b64decode(audio["data"])
    assert raw[:4] != b"RIFF"
    assert len(raw) == 2 * OUTPUT_RATE // 2  # half a second of 24 kHz PCM16
    assert audio["transcript"] == "loop back unit-3 unit-4 unit-5"


def test_audio_streams_as_chunks(http):
    events, response = sse_events(
        http, audio_request(stream=True, stream_options={"include_usage": True})
    )
    assert response.status_code == 200
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 0
    final = chunks[-2]["choices"][0]
    assert final["delta"] == {} and final["finish_reason"] == "stop"
    audio = [c["choices"][0]["delta"]["audio"] for c in chunks[1:-2]]
    assert len(audio) == 10  # one chunk per 100 ms unit
    assert len({a["id"] for a in audio}) == 1
    assert "expires_at" in audio[0]
    assert "".join(a["transcript"] for a in audio) == ONE_SECOND_TRANSCRIPT
    # The chunks' bytes concatenate to one (streamed) WAV file.
    samples, rate = decode_wav(b"".join(base64.b64decode(a["data"]) for a in audio))
    assert rate == OUTPUT_RATE and samples.size == OUTPUT_RATE
    # The stream carries the same audio as the non-streaming answer.
    whole = http.post("/v1/chat/completions", json=audio_request()).json()
    expected, _ = decode_wav(base64.b64decode(whole["choices"][0]["message"]["audio"]["data"]))
    np.testing.assert_array_equal(samples, expected)


def test_pcm16_streams_raw_chunks(http):
    events, _ = sse_events(
        http, audio_request(stream=True, audio={"voice": "alloy", "format": "pcm16"})
    )
    audio = [
        e["choices"][0]["delta"]["audio"]
        for e in events
        if e != "[DONE]" and "audio" in e["choices"][0]["delta"]
    ]
    raw = [base64.b64decode(a["data"]) for a in audio]
    assert all(len(chunk) == 2 * OUTPUT_RATE // 10 for chunk in raw)
    assert b"RIFF" not in raw[0][:4]


# ---- text -------------------------------------------------------------------------------


def test_text_question_gets_text(http):
    body = {"model": "loopback", "messages": [{"role": "user", "content": "how are you today"}]}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert message["content"] == "how are you today"
    assert message["audio"] is None


def test_text_streams_content_deltas(http):
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "one two three"}]}],
        "stream": True,
    }
    events, _ = sse_events(http, body)
    assert events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[-1] == {}
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert "".join(d["content"] for d in deltas[1:-1]) == "one two three"
    assert all("audio" not in d for d in deltas)


def test_history_and_instructions_leave_the_last_user_turn(http):
    body = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "and now?"},
        ]
    }
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "and now?"


def test_text_question_with_audio_modality_is_voiced(http):
    body = audio_request(messages=[{"role": "user", "content": "say it out loud"}])
    message = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert message["audio"]["transcript"] == "say it out loud"
    samples, _ = decode_wav(base64.b64decode(message["audio"]["data"]))
    assert samples.size == 4 * OUTPUT_RATE // 10  # one tone unit per word


def test_silence_gets_an_empty_answer(http):
    silence = base64.b64encode(encode_wav(np.zeros(INPUT_RATE, np.float32), INPUT_RATE)).decode()
    response = http.post(
        "/v1/chat/completions", json=audio_request(messages=[audio_message(silence)])
    )
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["audio"] is None and choice["message"]["content"] == ""


# ---- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"model": "loopback"}, "missing_required_parameter", "messages"),
        ({"messages": []}, "invalid_value", "messages"),
        ({"messages": "hi"}, "invalid_type", "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "invalid_value", "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
            "invalid_value",
            "messages",
        ),
        (
            {"messages": [audio_message("not base64!!")]},
            "invalid_base64",
            "messages[0].content[0].input_audio.data",
        ),
        (
            {"messages": [audio_message(base64.b64encode(b"RIFFnope").decode())]},
            "bad_audio",
            "messages[0].content[0].input_audio.data",
        ),
        (
            {"messages": [audio_message(wav_b64(), "mp3")]},
            "unsupported_audio_format",
            "messages[0].content[0].input_audio.format",
        ),
        (
            {"messages": [audio_message(wav_b64(), "pcm16", sample_rate_hz=5)]},
            "invalid_value",
            "messages[0].content[0].input_audio.sample_rate_hz",
        ),
        (
            {
                "modalities": ["text", "audio"],
                "audio": {"voice": "alloy", "format": "mp3"},
                "messages": [{"role": "user", "content": "hi"}],
            },
            "unsupported_audio_format",
            "audio.format",
        ),
        (
            {"modalities": ["image"], "messages": [{"role": "user", "content": "hi"}]},
            "unsupported_value",
            "modalities",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
                    }
                ]
            },
            "unsupported_content_type",
            "messages[0].content[0].type",
        ),
        ({"n": 2, "messages": [{"role": "user", "content": "hi"}]}, "unsupported_value", "n"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "messages": [{"role": "user", "content": "hi"}],
            },
            "unsupported_parameter",
            "tools",
        ),
        (
            {"logprobs": True, "messages": [{"role": "user", "content": "hi"}]},
            "unsupported_parameter",
            "logprobs",
        ),
        (
            {"temperature": "hot", "messages": [{"role": "user", "content": "hi"}]},
            "invalid_value",
            "temperature",
        ),
        (
            {"stream": "yes", "messages": [{"role": "user", "content": "hi"}]},
            "invalid_type",
            "stream",
        ),
    ],
)
def test_bad_requests_are_400(http, body, code, param):
    assert_error(http.post("/v1/chat/completions", json=body), 400, code, param)


def test_invalid_json_is_400(http):
    response = http.post(
        "/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert_error(response, 400, "invalid_json")


def test_unknown_model_is_404(http):
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    assert_error(http.post("/v1/chat/completions", json=body), 404, "model_not_found", "model")


def test_route_is_404_when_the_plugin_declares_no_chat(http, plugin, monkeypatch):
    original = plugin.capabilities

    def no_chat(*, max_sessions: int):
        return dataclasses.replace(
            original(max_sessions=max_sessions), supports_chat_completions=False
        )

    monkeypatch.setattr(plugin, "capabilities", no_chat)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert_error(http.post("/v1/chat/completions", json=body), 404, "route_not_available")


def test_text_turn_refused_when_the_model_takes_speech_only(http, plugin, monkeypatch):
    original = plugin.capabilities

    def speech_only(*, max_sessions: int):
        return dataclasses.replace(
            original(max_sessions=max_sessions), supports_text_only_turn=False
        )

    monkeypatch.setattr(plugin, "capabilities", speech_only)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert_error(http.post("/v1/chat/completions", json=body), 400, "unsupported_input")
    assert http.post("/v1/chat/completions", json=audio_request()).status_code == 200


# ---- model failures ----------------------------------------------------------------------


def _fail_in_stage(plugin, monkeypatch):
    original = plugin.plan_response

    def broken(state, request):
        data = original(state, request)
        data["audio"] = np.zeros((2, 2), dtype=np.float32)  # not mono: the stage fails it
        return data

    monkeypatch.setattr(plugin, "plan_response", broken)


def test_stage_failure_is_500(http, plugin, monkeypatch):
    _fail_in_stage(plugin, monkeypatch)
    error = assert_error(
        http.post("/v1/chat/completions", json=audio_request()), 500, "model_backend_failed"
    )
    assert "mono" in error["message"]
    # A stream that fails before its first chunk still gets the status.
    _, response = sse_events(http, audio_request(stream=True))
    assert_error(response, 500, "model_backend_failed")
    monkeypatch.undo()
    assert http.post("/v1/chat/completions", json=audio_request()).status_code == 200


def _fail_after(plugin, monkeypatch, units: int):
    data_plane = plugin.data_plane
    original = data_plane.project
    seen = {"n": 0}

    def project(data):
        seen["n"] += 1
        if seen["n"] > units:
            return [ModelError(code="loopback_exploded", message="boom")]
        return original(data)

    monkeypatch.setattr(data_plane, "project", project)


def test_mid_stream_failure_is_an_error_chunk(http, plugin, monkeypatch):
    _fail_after(plugin, monkeypatch, units=3)
    events, response = sse_events(http, audio_request(stream=True))
    assert response.status_code == 200
    assert events[-1] == "[DONE]"
    error = events[-2]["error"]
    assert error["type"] == "server_error" and error["code"] == "loopback_exploded"
    assert "boom" in error["message"]
    finishes = [
        c["choices"][0]["finish_reason"]
        for c in events[:-1]
        if c.get("choices") and "error" not in c
    ]
    assert "stop" not in finishes
    assert sum("audio" in c["choices"][0]["delta"] for c in events[:-2]) == 3


def test_model_error_result_is_500(http, plugin, monkeypatch):
    _fail_after(plugin, monkeypatch, units=0)
    assert_error(http.post("/v1/chat/completions", json=audio_request()), 500, "loopback_exploded")


# ---- no session, no slot -----------------------------------------------------------------


async def test_requests_hold_no_session_slot():
    with run_server("loopback-fast", max_sessions=1) as running:
        async with httpx.AsyncClient(base_url=running.http_url, timeout=TIMEOUT_S) as client:
            bodies = [
                {"messages": [{"role": "user", "content": f"request number {i}"}]} for i in range(6)
            ]
            responses = await asyncio.gather(
                *(client.post("/v1/chat/completions", json=body) for body in bodies)
            )
        contents = [r.json()["choices"][0]["message"]["content"] for r in responses]
        assert contents == [f"request number {i}" for i in range(6)]


def test_api_key_guards_the_route():
    with run_server("loopback-fast", api_key="sekret") as running:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(base_url=running.http_url, timeout=TIMEOUT_S) as client:
            assert client.post("/v1/chat/completions", json=body).status_code == 401
            headers = {"Authorization": "Bearer sekret"}
            ok = client.post("/v1/chat/completions", json=body, headers=headers)
            assert ok.status_code == 200


# ---- the OpenAI SDK ------------------------------------------------------------------------


@pytest.fixture
def sdk(server):
    with OpenAI(base_url=f"{server.http_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


def test_openai_sdk_parses_audio_answer(sdk):
    completion = sdk.chat.completions.create(
        model="loopback",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "wav"},
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": wav_b64(), "format": "wav"}}
                ],
            }
        ],
    )
    message = completion.choices[0].message
    assert message.audio is not None
    assert message.audio.transcript == ONE_SECOND_TRANSCRIPT
    samples, rate = decode_wav(base64.b64decode(message.audio.data))
    assert (samples.size, rate) == (OUTPUT_RATE, OUTPUT_RATE)
    assert completion.usage is not None and completion.usage.total_tokens == 0


def test_openai_sdk_streams_audio(sdk):
    stream = sdk.chat.completions.create(
        model="loopback",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "pcm16"},
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": wav_b64(), "format": "wav"}}
                ],
            }
        ],
        stream=True,
    )
    transcript, pcm, finish = [], [], None
    for chunk in stream:
        choice = chunk.choices[0]
        if choice.delta.audio is not None:
            transcript.append(choice.delta.audio.transcript or "")
            pcm.append(base64.b64decode(choice.delta.audio.data or ""))
        finish = choice.finish_reason or finish
    assert "".join(transcript) == ONE_SECOND_TRANSCRIPT
    assert len(b"".join(pcm)) == 2 * OUTPUT_RATE
    assert finish == "stop"


def test_openai_sdk_text_and_errors(sdk, plugin, monkeypatch):
    completion = sdk.chat.completions.create(
        model="loopback", messages=[{"role": "user", "content": "plain text please"}]
    )
    assert completion.choices[0].message.content == "plain text please"
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.chat.completions.create(model="loopback", messages=[])
    assert bad.value.code == "invalid_value"
    _fail_after(plugin, monkeypatch, units=2)
    stream = sdk.chat.completions.create(
        model="loopback", messages=[{"role": "user", "content": "a b c d e"}], stream=True
    )
    with pytest.raises(openai.APIError, match="boom"):
        for _ in stream:
            pass


def test_client_leaving_a_stream_aborts_the_request():
    with run_server("loopback") as running:  # paced: 100 ms per unit
        omni = running.app.state.omni
        body = audio_request(stream=True, messages=[audio_message(wav_b64(8000))])
        with httpx.Client(base_url=running.http_url, timeout=TIMEOUT_S) as client:
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                lines = response.iter_lines()
                first = orjson.loads(next(line for line in lines if line)[len("data: ") :])
                request_id = first["id"]
                assert omni.engine._orchestrator.get_request(request_id) is not None
            # The reply has 80 units (8 s): only an abort releases it this soon.
            deadline = time.monotonic() + 5.0
            while omni.engine._orchestrator.get_request(request_id) is not None:
                assert time.monotonic() < deadline, "the request outlived its client"
                time.sleep(0.02)
            assert request_id not in omni._streams
