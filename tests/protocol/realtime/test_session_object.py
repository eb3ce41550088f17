"""The public session object: both spellings, digests instead of reference audio, no
private keys, and a stock configuration that the ``openai`` models accept in either dialect."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import openai.types.beta.realtime as sdk_beta
import openai.types.realtime as sdk_ga
import orjson

from omniduplex.protocol.realtime.formats import G711_ALAW, G711_ULAW, PCM16, AudioFormat
from omniduplex.protocol.realtime.session import (
    RealtimeInputDefaults,
    build_session_object,
    next_input_defaults,
    ref_audio_digest,
    validate_turn_detection,
)

STATE = {
    "state": "open",
    "turn_state": "idle",
    "epoch": 0,
    "turn_id": 0,
    "active_response_id": None,
    "playback_commit_policy": "ack_only",
    "playback": {"generated_ms": 0, "sent_ms": 0, "played_ms": 0, "committed_ms": 0},
    "capabilities": {"implementation_level": "model_native_duplex", "chunk_period_ms": 1000},
    "_internal_lock": "never on the wire",
}


def stock_object(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": "gpt-realtime",
        "instructions": "Be brief.",
        "voice": "marin",
        "turn_detection": validate_turn_detection({"type": "server_vad"}),
        "state": STATE,
    }
    kwargs.update(overrides)
    return build_session_object("duplex-0123", **kwargs)


def test_identity_keys() -> None:
    obj = stock_object()
    assert (obj["object"], obj["type"], obj["id"], obj["model"]) == (
        "realtime.session",
        "realtime",
        "duplex-0123",
        "gpt-realtime",
    )


def test_ga_shape() -> None:
    obj = stock_object()
    assert obj["output_modalities"] == ["text", "audio"]
    assert obj["max_output_tokens"] == "inf"
    assert obj["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert obj["audio"]["output"]["format"] == {"type": "audio/pcm"}
    assert obj["audio"]["output"]["voice"] == "marin"
    assert obj["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert obj["audio"]["input"]["transcription"] is None


def test_beta_shape() -> None:
    obj = stock_object(max_output_tokens=512, temperature=0.8)
    assert obj["modalities"] == ["text", "audio"]
    assert obj["input_audio_format"] == "pcm16"
    assert obj["output_audio_format"] == "pcm16"
    assert obj["voice"] == "marin"
    assert obj["turn_detection"] == obj["audio"]["input"]["turn_detection"]
    assert obj["max_response_output_tokens"] == 512
    assert obj["temperature"] == 0.8
    assert obj["input_audio_transcription"] is None


def test_both_spellings_follow_the_negotiated_formats() -> None:
    formats = next_input_defaults(
        None, {"input_audio_format": "g711_ulaw", "output_audio_format": "g711_alaw"}
    )
    obj = stock_object(formats=formats)
    assert (obj["input_audio_format"], obj["output_audio_format"]) == (G711_ULAW, G711_ALAW)
    assert obj["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert obj["audio"]["output"]["format"] == {"type": "audio/pcma"}
    at_16k = RealtimeInputDefaults(
        input_format=AudioFormat(PCM16, 16000), output_format=AudioFormat(PCM16, 48000)
    )
    obj = stock_object(formats=at_16k)
    # OpenAI's schema allows rate 24000 only; other rates are stated beside the format.
    assert obj["audio"]["input"]["format"] == {"type": "audio/pcm"}
    assert obj["audio"]["input"]["sample_rate_hz"] == 16000
    assert obj["audio"]["output"]["format"] == {"type": "audio/pcm"}
    assert obj["audio"]["output"]["sample_rate_hz"] == 48000


def test_ref_audio_is_reported_by_digest() -> None:
    wav = b"RIFF" + bytes(range(256)) * 40
    data_url = "data:audio/wav;base64," + base64.b64encode(wav).decode()
    expected = {"sha256": hashlib.sha256(wav).hexdigest(), "bytes": len(wav)}
    assert stock_object(ref_audio=data_url)["ref_audio"] == expected
    assert stock_object(ref_audio=wav)["ref_audio"] == expected
    uri = "file:///voices/a.wav"
    assert ref_audio_digest(uri) == {
        "sha256": hashlib.sha256(uri.encode()).hexdigest(),
        "bytes": len(uri),
    }
    # A client session carrying the raw value never leaks it.
    obj = stock_object(ref_audio=wav, client={"ref_audio": data_url})
    assert data_url not in orjson.dumps(obj).decode()
    assert "ref_audio" not in stock_object()


def test_extra_body_internal_keys_and_ids_are_never_echoed() -> None:
    client = {
        "extra_body": {"auto_response": True, "secret": "x"},
        "_private": 1,
        "id": "client-chosen",
        "session_id": "client-session",
        "tools": [{"type": "function", "name": "f"}],
        "metadata": {"k": "v"},
        "instructions": "the client's stale value",
    }
    obj = stock_object(client=client)
    assert "extra_body" not in obj
    assert "_private" not in obj and "_internal_lock" not in obj
    assert obj["id"] == "duplex-0123"
    assert "session_id" not in obj
    # Pass-through for what we do not model; the effective value for what we do.
    assert obj["tools"] == [{"type": "function", "name": "f"}]
    assert obj["metadata"] == {"k": "v"}
    assert obj["instructions"] == "Be brief."


def test_engine_state_keys_are_included_but_cannot_override_realtime_keys() -> None:
    obj = stock_object(state={**STATE, "model": "engine-internal-name"})
    assert obj["state"] == "open"
    assert obj["capabilities"]["chunk_period_ms"] == 1000
    assert obj["model"] == "gpt-realtime"


def test_client_transcription_settings_are_echoed_in_both_places() -> None:
    obj = stock_object(client={"audio": {"input": {"transcription": {"model": "whisper-1"}}}})
    assert obj["input_audio_transcription"] == {"model": "whisper-1"}
    assert obj["audio"]["input"]["transcription"] == {"model": "whisper-1"}
    obj["audio"]["input"]["transcription"]["model"] = "changed"
    assert obj["input_audio_transcription"] == {"model": "whisper-1"}


def test_no_turn_detection() -> None:
    obj = stock_object(turn_detection=None)
    assert obj["turn_detection"] is None
    assert obj["audio"]["input"]["turn_detection"] is None


def test_output_is_plain_json() -> None:
    obj = stock_object(ref_audio=b"abc", client={"tracing": "auto"})
    assert orjson.loads(orjson.dumps(obj)) == obj


def test_stock_object_validates_as_ga_session_created() -> None:
    event = {"type": "session.created", "event_id": "event_1", "session": stock_object()}
    model = sdk_ga.SessionCreatedEvent.model_validate_json(orjson.dumps(event))
    assert model.session.type == "realtime"
    audio = model.session.audio
    assert audio is not None and audio.input is not None and audio.input.format is not None
    assert audio.input.format.type == "audio/pcm"
    g711 = next_input_defaults(
        None, {"input_audio_format": "g711_ulaw", "output_audio_format": "g711_alaw"}
    )
    event["session"] = stock_object(formats=g711, turn_detection=None)
    sdk_ga.SessionCreatedEvent.model_validate_json(orjson.dumps(event))


def test_stock_object_validates_as_beta_session_created() -> None:
    # The beta model types `model` as OpenAI's own names only.
    session = stock_object(model="gpt-4o-realtime-preview", max_output_tokens=1000, temperature=0.8)
    event = {"type": "session.created", "event_id": "event_1", "session": session}
    model = sdk_beta.SessionCreatedEvent.model_validate_json(orjson.dumps(event))
    assert model.session.input_audio_format == "pcm16"
    assert model.session.turn_detection is not None
    assert model.session.turn_detection.type == "server_vad"
    assert model.session.max_response_output_tokens == 1000


def test_a_client_may_send_the_object_back_as_its_update() -> None:
    from omniduplex.protocol.duplex.commands import UpdateSession, command_from_realtime

    formats = [
        RealtimeInputDefaults(),
        RealtimeInputDefaults(
            input_format=AudioFormat(PCM16, 16000), output_format=AudioFormat(PCM16, 48000)
        ),
        next_input_defaults(None, {"input_audio_format": "g711_ulaw"}),
    ]
    for negotiated in formats:
        for detection in (validate_turn_detection({"type": "server_vad"}), None):
            obj = stock_object(formats=negotiated, ref_audio=b"voice", turn_detection=detection)
            command = command_from_realtime({"type": "session.update", "session": obj})
            assert isinstance(command, UpdateSession)
            echoed = next_input_defaults(None, command.patch)
            assert echoed.input_sample_rate_hz == negotiated.input_sample_rate_hz
            assert echoed.input_format.name == negotiated.input_format.name
            assert echoed.output_format.name == negotiated.output_format.name
            assert echoed.output_format.effective_rate(24000) == (
                negotiated.output_format.effective_rate(24000)
            )
