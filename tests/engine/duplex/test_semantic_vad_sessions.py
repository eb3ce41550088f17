"""semantic_vad on a plugin without a turn-completion model (loopback), and partial updates.

Loopback declares no turn model: semantic_vad is served as server VAD with the eagerness's
fallback silence (low 1000 ms, medium/auto 500 ms, high 250 ms) and session.updated says
so under ``turn_detection.served_as``. A session.update with a turn-detection field we
cannot honour still applies everything else, answering the field with an error.
"""

from __future__ import annotations

import asyncio

from duplex_helpers import TIMEOUT_S, EventReader, append, command, deployment, sine_pcm16

from omniduplex.entrypoints.duplex_omni import DuplexOmni


def _silence(ms: int) -> bytes:
    return bytes(16000 * 2 * ms // 1000)


async def test_semantic_vad_is_mapped_onto_server_vad_and_reported() -> None:
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session({})
        reader = EventReader(handle)
        await reader.until(lambda e: e.type == "session.created")
        handle.submit(
            command(
                {
                    "type": "session.update",
                    "session": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}},
                }
            )
        )
        updated = (await reader.until(lambda e: e.type == "session.updated"))[-1]
        detection = updated.session["turn_detection"]
        assert detection["type"] == "semantic_vad"
        assert detection["eagerness"] == "low"
        assert detection["served_as"]["type"] == "server_vad"
        assert detection["served_as"]["silence_duration_ms"] == 1000
        assert updated.session["capabilities"]["supports_semantic_vad"] is False
        # 300 ms of tone after 200 ms of silence, then 900 ms of silence: not yet a turn end.
        handle.submit(append(_silence(200)))
        handle.submit(append(sine_pcm16(300)))
        handle.submit(append(_silence(900)))
        handle.submit(append(_silence(200)))  # 1100 ms of silence: past the 1000 ms rule
        events = await reader.until(lambda e: e.type == "input_audio_buffer.speech_stopped")
        started = next(e for e in events if e.type == "input_audio_buffer.speech_started")
        assert started.audio_start_ms == 0  # 200 ms onset less 300 ms of padding, floored
        assert abs(events[-1].audio_end_ms - 500) <= 40
        await reader.until(lambda e: e.type == "response.done")
        await asyncio.wait_for(handle.close(), TIMEOUT_S)


async def test_fallback_silence_follows_eagerness() -> None:
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session(
            {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}
        )
        reader = EventReader(handle)
        created = (await reader.until(lambda e: e.type == "session.created"))[-1]
        assert created.session["turn_detection"]["served_as"]["silence_duration_ms"] == 250
        handle.submit(append(sine_pcm16(300)))
        handle.submit(append(_silence(300)))
        events = await reader.until(lambda e: e.type == "input_audio_buffer.speech_stopped")
        assert abs(events[-1].audio_end_ms - 300) <= 40
        await asyncio.wait_for(handle.close(), TIMEOUT_S)


async def test_an_unsupported_turn_detection_field_does_not_drop_the_update() -> None:
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session({})
        reader = EventReader(handle)
        await reader.until(lambda e: e.type == "session.created")
        handle.submit(
            command(
                {
                    "type": "session.update",
                    "event_id": "evt_1",
                    "session": {
                        "instructions": "answer like a pirate",
                        "turn_detection": {
                            "type": "semantic_vad",
                            "eagerness": "high",
                            "idle_timeout_ms": 5000,
                            "interrupt_response": False,
                        },
                    },
                }
            )
        )
        events = await reader.until(lambda e: e.type == "session.updated")
        errors = [e for e in events if e.type == "error"]
        assert [e.param for e in errors] == [
            "turn_detection.interrupt_response",
            "turn_detection.idle_timeout_ms",
        ]
        assert {e.code for e in errors} == {"unsupported_turn_detection"}
        assert all(e.client_event_id == "evt_1" for e in errors)
        session = events[-1].session
        assert session["instructions"] == "answer like a pirate"
        assert session["turn_detection"]["type"] == "semantic_vad"
        assert session["turn_detection"]["eagerness"] == "high"
        await asyncio.wait_for(handle.close(), TIMEOUT_S)


async def test_engine_refusals_are_partial_too() -> None:
    # Reference audio is fixed when the session opens: that field alone is refused.
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session({})
        reader = EventReader(handle)
        await reader.until(lambda e: e.type == "session.created")
        handle.submit(
            command(
                {
                    "type": "session.update",
                    "session": {"ref_audio": "file:///voice.wav", "instructions": "short answers"},
                }
            )
        )
        events = await reader.until(lambda e: e.type == "session.updated")
        errors = [e for e in events if e.type == "error"]
        assert [(e.code, e.param) for e in errors] == [
            ("ref_audio_update_unsupported", "ref_audio")
        ]
        assert events[-1].session["instructions"] == "short answers"
        # Nothing usable at all: an error and no session.updated, as before.
        handle.submit(
            command({"type": "session.update", "session": {"ref_audio": "file:///voice.wav"}})
        )
        handle.submit(command({"type": "session.update", "session": {"instructions": "x"}}))
        events = await reader.until(lambda e: e.type == "session.updated")
        assert [e.type for e in events].count("error") == 1
        assert [e.type for e in events].count("session.updated") == 1
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
