"""Realistic payloads and one or more built instances of every Tier 1 event class.

The payloads follow wire.md §6/§7 (session object in both spellings, server-built items,
response objects as the projector builds them); the duplex tests load this module too.
"""

from __future__ import annotations

from typing import Any

from omniduplex.protocol.realtime import events as rt
from omniduplex.protocol.realtime.base import RealtimeEvent

SESSION_ID = "duplex-" + "ab" * 16
RESPONSE_ID = f"resp-{SESSION_ID}-0-1a2b3c4d"
ASSISTANT_ITEM_ID = f"item_{RESPONSE_ID}"
USER_ITEM_ID = "item_" + "cd" * 16

CAPABILITIES: dict[str, Any] = {
    "implementation_level": "model_native_duplex",
    "supports_barge_in": True,
    "supports_session_resume": True,
    "supports_audio_truncate": True,
    "supports_input_append": True,
    "supports_image_input": False,
    "supports_text_only_turn": False,
    "required_input_modalities": ["audio"],
    "optional_input_modalities": ["video"],
    "chunk_period_ms": 1000,
    "input_modes": ["append_audio_chunk"],
    "target_barge_in_latency_ms": None,
}


def session_object(**overrides: Any) -> dict[str, Any]:
    """The canonical (GA) session object with both spellings, as wire.md §6 lists it."""
    session: dict[str, Any] = {
        "object": "realtime.session",
        "type": "realtime",
        "id": SESSION_ID,
        "model": "minicpmo_4_5",
        "state": "open",
        "turn_state": "idle",
        "epoch": 0,
        "turn_id": 0,
        "active_request_id": None,
        "active_response_id": None,
        "active_response_turn_id": None,
        "modalities": ["text", "audio"],
        "output_modalities": ["text", "audio"],
        "instructions": None,
        "voice": None,
        "response_format": "pcm",
        "temperature": None,
        "max_tokens": None,
        "max_output_tokens": "inf",
        "speed": None,
        "idle_timeout_s": 300.0,
        "overlap_policy": "listen_only",
        "overlap_short_ack_ms": 700,
        "overlap_barge_in_ms": 1200,
        "overlap_silence_rms": 0.003,
        "playback_commit_policy": "ack_only",
        "playback": {"generated_ms": 0, "sent_ms": 0, "played_ms": 0, "committed_ms": 0},
        "capabilities": CAPABILITIES,
        "input_audio_format": "pcm16",
        "output_audio_format": "pcm16",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "sample_rate_hz": 24000,
                "turn_detection": None,
                "transcription": None,
                "noise_reduction": None,
            },
            "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": None},
        },
        "turn_detection": None,
        "input_audio_transcription": None,
        "tracing": None,
        "ref_audio": {"sha256": "0f" * 32, "bytes": 96044},
    }
    session.update(overrides)
    return session


SERVER_VAD = {
    "type": "server_vad",
    "interrupt_response": True,
    "create_response": True,
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "min_speech_duration_ms": 96,
}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def vad_g711_session() -> dict[str, Any]:
    """A server-VAD session with G.711 output, tools, a voice and a transcription config."""
    session = session_object(
        model="gpt-4o-realtime-preview",
        voice="alloy",
        instructions="Be brief.",
        temperature=0.8,
        overlap_policy="barge_in_on_speech",
        output_audio_format="g711_ulaw",
        turn_detection=SERVER_VAD,
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        metadata={"tenant": "acme"},
        input_audio_transcription={"language": "en"},
        tracing="auto",
    )
    session["audio"]["input"]["turn_detection"] = SERVER_VAD
    session["audio"]["input"]["transcription"] = {"language": "en"}
    session["audio"]["output"] = {"format": {"type": "audio/pcmu"}, "voice": "alloy", "speed": 1.0}
    return session


def user_audio_item(transcript: str = "what's the weather") -> dict[str, Any]:
    return {
        "id": USER_ITEM_ID,
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_audio", "transcript": transcript}],
    }


def silence_item() -> dict[str, Any]:
    item = user_audio_item("")
    item["content"][0]["is_speech"] = False
    return item


def user_text_image_item() -> dict[str, Any]:
    return {
        "id": "item_" + "ef" * 16,
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
        ],
    }


def system_item() -> dict[str, Any]:
    return {
        "id": "item_sys",
        "object": "realtime.item",
        "type": "message",
        "role": "system",
        "status": "completed",
        "content": [{"type": "input_text", "text": "You are terse."}],
    }


def assistant_item(status: str = "in_progress", transcript: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if transcript is not None:
        content.append(
            {
                "type": "output_audio",
                "transcript": transcript,
                "audio_duration_ms": 2000,
                "audio_text_marks": [{"text_chars": 5, "audio_end_ms": 1000}],
            }
        )
        content.append({"type": "output_text", "text": transcript})
    return {
        "id": ASSISTANT_ITEM_ID,
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def function_call_item() -> dict[str, Any]:
    return {
        "id": "item_fc",
        "object": "realtime.item",
        "type": "function_call",
        "status": "completed",
        "name": "get_weather",
        "call_id": "call_1",
        "arguments": '{"city": "Paris"}',
    }


def function_call_output_item() -> dict[str, Any]:
    return {
        "id": "item_fco",
        "object": "realtime.item",
        "type": "function_call_output",
        "status": "completed",
        "call_id": "call_1",
        "output": '{"temp_c": 21}',
    }


ITEMS = {
    "user_audio": user_audio_item,
    "silence": silence_item,
    "user_text_image": user_text_image_item,
    "system": system_item,
    "assistant_in_progress": assistant_item,
    "assistant_completed": lambda: assistant_item("completed", "Hello there"),
    "assistant_cancelled": lambda: assistant_item("cancelled", "Hel"),
    "assistant_failed": lambda: assistant_item("failed", ""),
    "function_call": function_call_item,
    "function_call_output": function_call_output_item,
}


def response_object(
    status: str = "in_progress",
    status_details: dict[str, Any] | None = None,
    output: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A response object as the projector builds it (wire.md §2.4), reference reasons."""
    return {
        "id": RESPONSE_ID,
        "object": "realtime.response",
        "status": status,
        "status_details": status_details,
        "output": output if output is not None else [],
        "modalities": ["audio", "text"],
        "metadata": {"request_id": "req-7", "epoch": 1, "end_of_turn": True},
    }


RESPONSES = {
    "created": lambda: response_object(),
    "completed_stop": lambda: response_object(
        "completed",
        {"type": "completed", "reason": "stop"},
        [assistant_item("completed", "Hello there")],
    ),
    "completed_null": lambda: response_object(
        "completed", None, [assistant_item("completed", "Hi")]
    ),
    "cancelled_barge_in": lambda: response_object(
        "cancelled", {"type": "cancelled", "reason": "barge_in"}, [assistant_item("cancelled", "")]
    ),
    "cancelled_client": lambda: response_object(
        "cancelled",
        {"type": "cancelled", "reason": "client_cancelled"},
        [assistant_item("cancelled", "Hel")],
    ),
    "cancelled_vad": lambda: response_object(
        "cancelled",
        {"type": "cancelled", "reason": "turn_detected"},
        [assistant_item("cancelled", "Hel")],
    ),
    "cancelled_clear": lambda: response_object(
        "cancelled",
        {"type": "cancelled", "reason": "output_audio_buffer_clear"},
        [assistant_item("cancelled", "Hel")],
    ),
    "failed": lambda: response_object(
        "failed",
        {"type": "failed", "reason": "runtime_data_plane_stream_failed"},
        [assistant_item("failed", "")],
    ),
    "function_call": lambda: {
        "id": "resp_" + "12" * 16,
        "object": "realtime.response",
        "status": "completed",
        "status_details": {"type": "completed", "reason": "completed"},
        "output": [function_call_item()],
        "metadata": {},
    },
}

AUDIO_100MS_B64 = "AAAA" * 1600  # 4800 zero bytes: 100 ms of 24 kHz pcm16
_CONTENT = {"response_id": RESPONSE_ID, "item_id": ASSISTANT_ITEM_ID}


def tier1_samples() -> list[RealtimeEvent]:
    """At least one realistic instance of each of OpenAI's 34 events."""
    samples: list[RealtimeEvent] = [
        rt.SessionCreated(session=session_object()),
        rt.SessionCreated(session=vad_g711_session()),
        rt.SessionUpdated(session=session_object()),
        rt.SessionUpdated(session=vad_g711_session()),
        rt.InputAudioBufferSpeechStarted(audio_start_ms=120, item_id=USER_ITEM_ID),
        rt.InputAudioBufferSpeechStopped(audio_end_ms=0, item_id=USER_ITEM_ID),
        rt.InputAudioBufferCommitted(previous_item_id=None, item_id=USER_ITEM_ID),
        rt.InputAudioBufferCommitted(previous_item_id="item_prev", item_id=USER_ITEM_ID),
        rt.InputAudioBufferTimeoutTriggered(
            audio_start_ms=4200, audio_end_ms=9220, item_id=USER_ITEM_ID
        ),
        rt.InputAudioBufferCleared(),
        rt.OutputAudioBufferStarted(response_id=RESPONSE_ID),
        rt.OutputAudioBufferStopped(response_id=RESPONSE_ID),
        rt.OutputAudioBufferCleared(response_id=RESPONSE_ID),
        rt.ConversationItemRetrieved(item=assistant_item("completed", "Hello")),
        rt.ConversationItemDeleted(item_id=USER_ITEM_ID),
        rt.ConversationItemTruncated(item_id=ASSISTANT_ITEM_ID, content_index=0, audio_end_ms=1500),
        rt.ConversationItemInputAudioTranscriptionDelta(item_id=USER_ITEM_ID, delta="what's"),
        rt.ConversationItemInputAudioTranscriptionDelta(
            item_id=USER_ITEM_ID, content_index=0, delta=" the weather"
        ),
        rt.ConversationItemInputAudioTranscriptionCompleted(
            item_id=USER_ITEM_ID, transcript="what's the weather"
        ),
        rt.RateLimitsUpdated(),
        rt.RealtimeErrorEvent(code="bad_event", message="malformed"),
        rt.RealtimeErrorEvent(
            code="invalid_function_call_output",
            message="no matching call",
            error_class="invalid_request_error",
            param="item.call_id",
            client_event_id="evt_client_1",
        ),
        rt.ResponseOutputItemAdded(response_id=RESPONSE_ID, item=assistant_item()),
        rt.ResponseContentPartAdded(**_CONTENT, part={"type": "audio", "transcript": ""}),
        rt.ResponseContentPartAdded(**_CONTENT, content_index=1, part={"type": "text", "text": ""}),
        rt.ResponseOutputAudioDelta(**_CONTENT, delta=AUDIO_100MS_B64),
        rt.ResponseOutputAudioTranscriptDelta(**_CONTENT, delta="Hello "),
        rt.ResponseOutputAudioTranscriptDelta(**_CONTENT, delta=""),
        rt.ResponseOutputTextDelta(**_CONTENT, content_index=1, delta="Hello"),
        rt.ResponseOutputAudioDone(**_CONTENT),
        rt.ResponseOutputAudioTranscriptDone(**_CONTENT, transcript="Hello there"),
        rt.ResponseOutputTextDone(**_CONTENT, content_index=1, text="Hello there"),
        rt.ResponseContentPartDone(**_CONTENT, part={"type": "audio", "transcript": "Hello there"}),
        rt.ResponseFunctionCallArgumentsDelta(
            response_id="resp_fc", item_id="item_fc", call_id="call_1", delta='{"city": "Paris"}'
        ),
        rt.ResponseFunctionCallArgumentsDone(
            response_id="resp_fc",
            item_id="item_fc",
            call_id="call_1",
            name="get_weather",
            arguments='{"city": "Paris"}',
        ),
        *mcp_samples(),
    ]
    for name, make in ITEMS.items():
        previous = None if name == "user_audio" else USER_ITEM_ID
        samples.append(rt.ConversationItemAdded(previous_item_id=previous, item=make()))
        samples.append(rt.ConversationItemCreated(previous_item_id=previous, item=make()))
        samples.append(rt.ConversationItemDone(previous_item_id=previous, item=make()))
    for name, make in ITEMS.items():
        if name.startswith("assistant") or name == "function_call":
            samples.append(rt.ResponseOutputItemDone(response_id=RESPONSE_ID, item=make()))
    samples.append(rt.ResponseCreated(response=RESPONSES["created"]()))
    samples.extend(rt.ResponseDone(response=make()) for make in RESPONSES.values())
    return samples


MCP_ITEM_TYPES = frozenset({"mcp_list_tools", "mcp_call", "mcp_approval_request"})


def carries_mcp_item(event: RealtimeEvent) -> bool:
    """An event about a remote MCP item: GA only, since a beta connection cannot declare
    an MCP server (the beta interface had none, so its SDK has no such item)."""
    item = getattr(event, "item", None)
    return isinstance(item, dict) and item.get("type") in MCP_ITEM_TYPES


def mcp_samples() -> list[RealtimeEvent]:
    """A remote MCP server's listing and one call of its tool, as a session sends them."""
    listing = {
        "id": "item_mcp_list",
        "type": "mcp_list_tools",
        "server_label": "weather",
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
    }
    call = {
        "id": "item_mcp_call",
        "type": "mcp_call",
        "server_label": "weather",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "approval_request_id": None,
        "output": "It is sunny in Paris.",
        "error": None,
    }
    failed = {
        **call,
        "output": None,
        "error": {"type": "tool_execution_error", "message": "the tool failed"},
    }
    where = {"item_id": "item_mcp_call", "output_index": 0}
    return [
        rt.McpListToolsInProgress(item_id="item_mcp_list"),
        rt.McpListToolsCompleted(item_id="item_mcp_list"),
        rt.McpListToolsFailed(item_id="item_mcp_list"),
        rt.ConversationItemDone(previous_item_id=None, item=listing),
        rt.ResponseMcpCallArgumentsDelta(response_id=RESPONSE_ID, **where, delta='{"city": '),
        rt.ResponseMcpCallArgumentsDone(
            response_id=RESPONSE_ID, **where, arguments='{"city": "Paris"}'
        ),
        rt.ResponseMcpCallInProgress(**where),
        rt.ResponseMcpCallCompleted(**where),
        rt.ResponseMcpCallFailed(**where),
        rt.ResponseOutputItemDone(response_id=RESPONSE_ID, item=call),
        rt.ResponseOutputItemDone(response_id=RESPONSE_ID, item=failed),
    ]


def test_samples_cover_every_tier1_class() -> None:
    assert {type(event) for event in tier1_samples()} == set(rt.REALTIME_EVENT_CLASSES)
