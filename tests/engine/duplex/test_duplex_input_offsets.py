"""Speech offsets are in audio time, and speech the resampler releases late still counts."""

from __future__ import annotations

import asyncio
import base64

from duplex_helpers import TIMEOUT_S, EventReader, deployment, sine_pcm16

from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import command_from_realtime


def _append(pcm: bytes, fmt: dict) -> object:
    return command_from_realtime(
        {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(pcm).decode(),
            "format": fmt,
        }
    )


def _commit() -> object:
    return command_from_realtime({"type": "input_audio_buffer.commit", "create_response": False})


async def test_speech_offsets_count_leading_silence_once() -> None:
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session({})
        reader = EventReader(handle)
        fmt = {"type": "audio/pcm", "rate": 16000}
        handle.submit(_append(bytes(16000 * 2 * 200 // 1000), fmt))  # 200 ms of silence
        handle.submit(_append(sine_pcm16(300), fmt))  # then 300 ms of tone
        handle.submit(_commit())
        events = await reader.until(lambda e: e.type == "input_audio_buffer.committed")
        started = next(e for e in events if e.type == "input_audio_buffer.speech_started")
        stopped = next(e for e in events if e.type == "input_audio_buffer.speech_stopped")
        assert started.audio_start_ms == 200
        assert stopped.audio_end_ms == 500
        await asyncio.wait_for(handle.close(), TIMEOUT_S)


async def test_a_short_append_at_another_rate_is_still_speech() -> None:
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session({})
        reader = EventReader(handle)
        tone = sine_pcm16(100, rate=8000)
        handle.submit(_append(tone, {"type": "audio/pcm", "rate": 8000}))
        handle.submit(_commit())
        events = await reader.until(lambda e: e.type == "conversation.item.done")
        types = [e.type for e in events]
        assert "input_audio_buffer.speech_started" in types
        assert "input_audio_buffer.speech_stopped" in types
        assert "response.listen" not in types
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
