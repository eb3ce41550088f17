"""Whatever JSON arrives, the decoder answers with a command or a ``RealtimeProtocolError``.

Hypothesis drives arbitrary JSON values, arbitrary objects with a valid ``type`` and random
fields (including every key the decoder reads, with values of every JSON type), and raw
frames. No wall-clock limits: ``deadline=None``.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omniduplex.protocol.duplex import commands as cmd
from omniduplex.protocol.realtime.capabilities import RealtimeProtocolCapabilities
from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.session import next_input_defaults

SETTINGS = settings(
    # Raise for a deeper search: OMNIDUPLEX_FUZZ_EXAMPLES=5000 pytest ...
    max_examples=int(os.environ.get("OMNIDUPLEX_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)

# Keys the decoders read, so random objects hit real code paths, not just "unknown key".
READ_KEYS = [
    "event_id", "session", "audio", "delta", "format", "input_audio_format", "sample_rate_hz",
    "sample_rate", "video_frames", "max_slice_nums", "is_speech", "speech", "vad",
    "speech_probability", "transcript", "text", "duration_ms", "final", "create_response",
    "response_create", "item_id", "response_id", "response", "item", "previous_item_id",
    "content_index", "audio_end_ms", "event", "payload", "played_ms", "committed_ms",
    "truncate", "reason", "session_id", "resume_token", "last_received_server_event_seq",
    "server_event_seq", "turn_detection", "output_audio_format", "voice", "modalities",
    "instructions", "temperature", "max_output_tokens", "extra_body", "type",
]  # fmt: skip
SESSION_KEYS = [
    "type", "input_audio_format", "output_audio_format", "response_format", "audio",
    "turn_detection", "voice", "modalities", "output_modalities", "instructions",
    "temperature", "speed", "max_output_tokens", "max_response_output_tokens", "sample_rate_hz",
    "overlap_policy", "overlap_silence_rms", "extra_body", "ref_audio",
]  # fmt: skip
B64 = base64.b64encode(b"\x00\x01" * 8).decode()

interesting = json_values | st.sampled_from(
    [B64, "pcm16", "g711_ulaw", {"type": "audio/pcm", "rate": 24000}, {"type": "server_vad"},
     [B64], "item_1", 0, -1, 2**70, 1e308, "", "inf", ["text"], {"id": "v"}]
)  # fmt: skip
session_objects = st.dictionaries(st.sampled_from(SESSION_KEYS), interesting, max_size=6)
item_objects = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["message", "function_call_output", "function_call", "x"])
        | json_values,
        "role": st.sampled_from(["user", "assistant", "robot"]) | json_values,
        "id": interesting,
        "content": st.lists(
            st.dictionaries(
                st.sampled_from(["type", "text", "audio", "format", "transcript"]),
                st.sampled_from(["input_audio", "audio", "input_text", "opus", "pcm16"])
                | interesting,
                max_size=4,
            ),
            max_size=3,
        )
        | json_values,
        "call_id": interesting,
        "output": interesting,
    },
)
wire_types = st.sampled_from(sorted(cmd.COMMAND_TYPES))
random_fields = st.dictionaries(
    st.sampled_from(READ_KEYS) | st.text(max_size=6),
    interesting | session_objects | item_objects,
    max_size=8,
)
capabilities = st.sampled_from(
    [
        None,
        RealtimeProtocolCapabilities(),
        RealtimeProtocolCapabilities(input_audio_formats={"pcm16"}, text_input=False),
    ]
)


def decode_or_refuse(obj: Any, **kwargs: Any) -> None:
    try:
        command = cmd.command_from_realtime(obj, **kwargs)
    except RealtimeProtocolError as exc:
        assert exc.code
        event_id = obj.get("event_id") if isinstance(obj, dict) else None
        assert exc.event_id in (None, event_id)
        return
    # Whatever decodes renders, and the rendering decodes to the same command.
    rendered = command.to_realtime()
    orjson.dumps(rendered)
    assert cmd.command_from_realtime(rendered, **kwargs) == command


@SETTINGS
@given(json_values)
def test_arbitrary_json_values(obj: Any) -> None:
    decode_or_refuse(obj)


@SETTINGS
@given(wire_types, random_fields, capabilities)
def test_valid_type_with_random_fields(wire_type: str, fields: dict[str, Any], caps: Any) -> None:
    decode_or_refuse({**fields, "type": wire_type}, capabilities=caps)


@SETTINGS
@given(st.sampled_from(["session.update", "turn.signal"]), session_objects, st.text(max_size=5))
def test_random_session_objects(wire_type: str, session: dict[str, Any], event_id: str) -> None:
    obj = {"type": wire_type, "event_id": event_id, "session": session}
    if wire_type == "turn.signal":
        obj = {
            "type": wire_type,
            "event_id": event_id,
            "event": "session.update",
            "payload": session,
        }
    decode_or_refuse(obj)
    # Deriving defaults from any session object never fails.
    next_input_defaults(None, session)


@SETTINGS
@given(item_objects, interesting)
def test_random_items(item: dict[str, Any], previous: Any) -> None:
    decode_or_refuse(
        {"type": "conversation.item.create", "item": item, "previous_item_id": previous}
    )


@SETTINGS
@given(st.binary(max_size=64) | st.text(max_size=64))
def test_random_frames(frame: bytes | str) -> None:
    try:
        obj = cmd.parse_client_frame(frame)
    except RealtimeProtocolError:
        return
    decode_or_refuse(obj)


@SETTINGS
@given(wire_types, random_fields)
def test_random_frames_of_valid_events(wire_type: str, fields: dict[str, Any]) -> None:
    try:
        frame = orjson.dumps({**fields, "type": wire_type})
    except (TypeError, orjson.JSONEncodeError):
        return  # not representable as JSON (e.g. an int beyond 64 bits)
    try:
        command = cmd.decode_client_frame(frame)
    except RealtimeProtocolError:
        return
    assert cmd.command_from_realtime(command.to_realtime()) == command
