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


async def test_server_vad_offsets_stay_in_session_time_across_updates_and_commits() -> None:
    # The detector is replaced by a session.update that changes turn detection, and
    # reset by every commit; its offsets must still count from the session's first sample.
    vad = {"type": "server_vad", "prefix_padding_ms": 300, "silence_duration_ms": 300}
    quiet = bytes(16000 * 2 * 500 // 1000)  # 500 ms of silence
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session({"turn_detection": vad})
        reader = EventReader(handle)
        fmt = {"type": "audio/pcm", "rate": 16000}
        handle.submit(_append(quiet, fmt))
        handle.submit(command_from_realtime({"type": "session.update", "session": {}}))
        handle.submit(_append(quiet, fmt))
        changed = {**vad, "silence_duration_ms": 400}
        handle.submit(
            command_from_realtime(
                {"type": "session.update", "session": {"turn_detection": changed}}
            )
        )
        handle.submit(_append(quiet, fmt))  # speech begins at 1500 ms
        handle.submit(_append(sine_pcm16(600), fmt))
        handle.submit(_append(quiet, fmt))
        first = await reader.until(lambda e: e.type == "input_audio_buffer.committed")
        handle.submit(_append(quiet, fmt))  # second speech begins at 3100 ms
        handle.submit(_append(sine_pcm16(400), fmt))
        handle.submit(_append(quiet, fmt))
        second = await reader.until(lambda e: e.type == "input_audio_buffer.committed")
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
    starts = [e.audio_start_ms for e in first + second if e.type.endswith("speech_started")]
    stops = [e.audio_end_ms for e in first + second if e.type.endswith("speech_stopped")]
    assert starts == [1500 - 300, 3100 - 300]
    assert all(abs(stop - end) <= 40 for stop, end in zip(stops, [2100, 3500], strict=True)), stops


async def test_server_vad_keeps_no_more_silence_than_a_turn_can_use() -> None:
    # Loopback answers with as much audio as the committed turn held: after 20 s of
    # silence, a turn must still hold only its padding, its speech and its closing silence.
    vad = {"type": "server_vad", "prefix_padding_ms": 300, "silence_duration_ms": 300}
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session({"turn_detection": vad})
        reader = EventReader(handle)
        fmt = {"type": "audio/pcm", "rate": 16000}
        for _ in range(20):
            handle.submit(_append(bytes(16000 * 2), fmt))  # 1 s of silence
        handle.submit(_append(sine_pcm16(600), fmt))
        handle.submit(_append(bytes(16000 * 2 * 500 // 1000), fmt))
        events = await reader.until(lambda e: e.type == "response.done")
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
    started = next(e for e in events if e.type == "input_audio_buffer.speech_started")
    assert started.audio_start_ms == 20_000 - 300  # offsets still count the whole stream
    reply_bytes = sum(
        len(base64.b64decode(e.delta)) for e in events if e.type == "response.output_audio.delta"
    )
    # 24 kHz pcm16 out: 48 bytes per ms. Kept: <= 800 ms before speech + 600 + 500.
    assert 0 < reply_bytes / 48 < 2500


async def test_a_turn_holds_at_most_max_input_turn_s_and_says_so() -> None:
    # A client that streams without committing gets a typed error for what does not fit,
    # and the turn it committed keeps exactly what was accepted.
    async with DuplexOmni(deployment(max_input_turn_s=1.0)) as omni:
        handle = await omni.open_session({})
        reader = EventReader(handle)
        fmt = {"type": "audio/pcm", "rate": 16000}
        handle.submit(_append(sine_pcm16(600), fmt))
        refused = command_from_realtime(
            {
                "type": "input_audio_buffer.append",
                "event_id": "evt_too_much",
                "audio": base64.b64encode(sine_pcm16(600)).decode(),
                "format": fmt,
            }
        )
        handle.submit(refused)
        handle.submit(_append(sine_pcm16(300), fmt))  # still fits: 900 ms in all
        handle.submit(command_from_realtime({"type": "input_audio_buffer.commit"}))
        handle.submit(command_from_realtime({"type": "response.create"}))
        events = await reader.until(lambda e: e.type == "response.done")
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
    errors = [e for e in events if e.type == "error"]
    assert [(e.code, e.client_event_id) for e in errors] == [
        ("input_audio_buffer_full", "evt_too_much")
    ]
    stopped = next(e for e in events if e.type == "input_audio_buffer.speech_stopped")
    assert stopped.audio_end_ms == 900
    assert events[-1].response["status"] == "completed"
