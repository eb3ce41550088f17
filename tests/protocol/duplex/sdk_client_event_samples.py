"""Client events as the ``openai`` SDK builds them: its own TypedDicts, realistic values.

GA payloads use ``openai.types.realtime``, beta ones ``openai.types.beta.realtime``. Each
sample names the command class the decoder must produce.
"""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import openai.types.beta.realtime as beta
import openai.types.realtime as ga

from omniduplex.protocol.duplex import commands as cmd
from omniduplex.protocol.realtime.base import RealtimeCommand


def pcm16_tone(ms: int = 20, rate: int = 24_000, hz: float = 440.0) -> bytes:
    count = rate * ms // 1000
    samples = (int(8000 * math.sin(2 * math.pi * hz * n / rate)) for n in range(count))
    return struct.pack(f"<{count}h", *samples)


TONE_B64 = base64.b64encode(pcm16_tone()).decode()
# A 1x1 PNG, as bare base64 (the shape camera frames and input_image data URLs carry).
PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
    "AAAABJRU5ErkJggg=="
)

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
}


def ga_samples() -> list[tuple[str, dict[str, Any], type[RealtimeCommand]]]:
    """``(label, payload, expected class)`` for every GA client event type."""
    session_update = ga.SessionUpdateEventParam(
        type="session.update",
        event_id="evt_sess_1",
        session={
            "type": "realtime",
            "model": "gpt-realtime",
            "instructions": "You are a concise assistant.",
            "output_modalities": ["audio"],
            "max_output_tokens": 1024,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 24000},
                    "noise_reduction": {"type": "near_field"},
                    "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
                    "turn_detection": {
                        "type": "server_vad",
                        "threshold": 0.6,
                        "prefix_padding_ms": 300,
                        "silence_duration_ms": 700,
                        "create_response": True,
                        "interrupt_response": True,
                    },
                },
                "output": {"format": {"type": "audio/pcm"}, "voice": "marin", "speed": 1.1},
            },
            "tools": [WEATHER_TOOL],
            "tool_choice": "auto",
            "tracing": "auto",
            "truncation": "auto",
            "include": ["item.input_audio_transcription.logprobs"],
        },
    )
    session_update_g711 = ga.SessionUpdateEventParam(
        type="session.update",
        session={
            "type": "realtime",
            "audio": {
                "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None},
                "output": {"format": {"type": "audio/pcma"}, "voice": {"id": "voice_1234"}},
            },
        },
    )
    append = ga.InputAudioBufferAppendEventParam(
        type="input_audio_buffer.append", event_id="evt_app_1", audio=TONE_B64
    )
    commit = ga.InputAudioBufferCommitEventParam(
        type="input_audio_buffer.commit", event_id="evt_commit_1"
    )
    clear = ga.InputAudioBufferClearEventParam(type="input_audio_buffer.clear", event_id="c1")
    out_clear = ga.OutputAudioBufferClearEventParam(type="output_audio_buffer.clear")
    response_create = ga.ResponseCreateEventParam(
        type="response.create",
        event_id="evt_resp_1",
        response={
            "instructions": "Answer in one sentence.",
            "output_modalities": ["audio"],
            "max_output_tokens": "inf",
            "conversation": "auto",
            "metadata": {"topic": "weather"},
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "cedar"}},
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "input": [
                {"type": "item_reference", "id": "item_abc"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "And tomorrow?"}],
                },
            ],
        },
    )
    response_create_bare = ga.ResponseCreateEventParam(type="response.create")
    response_cancel = ga.ResponseCancelEventParam(
        type="response.cancel", event_id="evt_cancel", response_id="resp_123"
    )
    item_user = ga.ConversationItemCreateEventParam(
        type="conversation.item.create",
        event_id="evt_item_1",
        previous_item_id="item_prev",
        item={
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in this picture?"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}"},
                {"type": "input_audio", "audio": TONE_B64, "transcript": "hello"},
            ],
        },
    )
    item_system = ga.ConversationItemCreateEventParam(
        type="conversation.item.create",
        item={
            "type": "message",
            "role": "system",
            "content": [{"type": "input_text", "text": "Be brief."}],
        },
    )
    item_assistant = ga.ConversationItemCreateEventParam(
        type="conversation.item.create",
        item={
            "id": "item_a1",
            "object": "realtime.item",
            "status": "completed",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Sunny."}],
        },
    )
    item_call = ga.ConversationItemCreateEventParam(
        type="conversation.item.create",
        item={
            "type": "function_call",
            "name": "get_weather",
            "call_id": "call_1",
            "arguments": '{"city": "Paris"}',
        },
    )
    item_output = ga.ConversationItemCreateEventParam(
        type="conversation.item.create",
        item={"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 21}'},
    )
    item_mcp = ga.ConversationItemCreateEventParam(
        type="conversation.item.create",
        item={
            "type": "mcp_approval_response",
            "id": "mcpr_1",
            "approval_request_id": "mcpa_1",
            "approve": True,
            "reason": None,
        },
    )
    delete = ga.ConversationItemDeleteEventParam(
        type="conversation.item.delete", event_id="evt_del", item_id="item_abc"
    )
    retrieve = ga.ConversationItemRetrieveEventParam(
        type="conversation.item.retrieve", item_id="item_abc"
    )
    truncate = ga.ConversationItemTruncateEventParam(
        type="conversation.item.truncate",
        event_id="evt_trunc",
        item_id="item_resp_1",
        content_index=0,
        audio_end_ms=1500,
    )
    return [
        ("session.update", dict(session_update), cmd.UpdateSession),
        ("session.update g711", dict(session_update_g711), cmd.UpdateSession),
        ("input_audio_buffer.append", dict(append), cmd.AppendAudio),
        ("input_audio_buffer.commit", dict(commit), cmd.Commit),
        ("input_audio_buffer.clear", dict(clear), cmd.ClearInput),
        ("output_audio_buffer.clear", dict(out_clear), cmd.ClearOutputAudio),
        ("response.create", dict(response_create), cmd.CreateResponse),
        ("response.create bare", dict(response_create_bare), cmd.CreateResponse),
        ("response.cancel", dict(response_cancel), cmd.CancelResponse),
        ("item user", dict(item_user), cmd.CreateItem),
        ("item system", dict(item_system), cmd.CreateItem),
        ("item assistant", dict(item_assistant), cmd.CreateItem),
        ("item function_call", dict(item_call), cmd.CreateItem),
        ("item function_call_output", dict(item_output), cmd.CreateItem),
        ("item mcp_approval_response", dict(item_mcp), cmd.CreateItem),
        ("conversation.item.delete", dict(delete), cmd.DeleteItem),
        ("conversation.item.retrieve", dict(retrieve), cmd.RetrieveItem),
        ("conversation.item.truncate", dict(truncate), cmd.TruncateItem),
    ]


def beta_samples() -> list[tuple[str, dict[str, Any], type[RealtimeCommand]]]:
    """``(label, payload, expected class)`` for every beta client event we serve."""
    session_update = beta.SessionUpdateEventParam(
        type="session.update",
        event_id="evt_beta_sess",
        session={
            "model": "gpt-4o-realtime-preview",
            "modalities": ["text", "audio"],
            "instructions": "You are helpful.",
            "voice": "alloy",
            "input_audio_format": "pcm16",
            "output_audio_format": "g711_ulaw",
            "input_audio_transcription": {"model": "whisper-1"},
            "input_audio_noise_reduction": {"type": "far_field"},
            "turn_detection": {
                "type": "server_vad",
                "threshold": 0.5,
                "prefix_padding_ms": 300,
                "silence_duration_ms": 500,
                "create_response": False,
            },
            "tools": [WEATHER_TOOL],
            "tool_choice": "auto",
            "temperature": 0.8,
            "max_response_output_tokens": "inf",
            "speed": 1.0,
            "tracing": "auto",
            "client_secret": {"expires_after": {"anchor": "created_at", "seconds": 600}},
        },
    )
    session_no_vad = beta.SessionUpdateEventParam(
        type="session.update", session={"input_audio_format": "g711_alaw", "voice": "ash"}
    )
    append = beta.InputAudioBufferAppendEventParam(
        type="input_audio_buffer.append", event_id="b_app", audio=TONE_B64
    )
    commit = beta.InputAudioBufferCommitEventParam(type="input_audio_buffer.commit")
    clear = beta.InputAudioBufferClearEventParam(type="input_audio_buffer.clear")
    out_clear = beta.realtime_client_event_param.OutputAudioBufferClear(
        type="output_audio_buffer.clear", event_id="b_oclear"
    )
    response_create = beta.ResponseCreateEventParam(
        type="response.create",
        event_id="b_resp",
        response={
            "modalities": ["text"],
            "instructions": "Spell it out.",
            "voice": "verse",
            "output_audio_format": "pcm16",
            "temperature": 0.9,
            "max_response_output_tokens": 256,
            "conversation": "none",
            "metadata": {"purpose": "classification"},
            "tools": [WEATHER_TOOL],
            "tool_choice": "none",
            "input": [{"type": "item_reference", "id": "item_1"}],
        },
    )
    response_cancel = beta.ResponseCancelEventParam(type="response.cancel")
    item_text = beta.ConversationItemCreateEventParam(
        type="conversation.item.create",
        event_id="b_item",
        item={
            "id": "item_b1",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [
                {"type": "input_text", "text": "Hi"},
                {"type": "input_audio", "audio": TONE_B64, "transcript": "hi"},
            ],
        },
    )
    item_assistant = beta.ConversationItemCreateEventParam(
        type="conversation.item.create",
        item={
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "Hello there."}],
        },
    )
    item_output = beta.ConversationItemCreateEventParam(
        type="conversation.item.create",
        item={"type": "function_call_output", "call_id": "call_9", "output": "42"},
    )
    delete = beta.ConversationItemDeleteEventParam(
        type="conversation.item.delete", item_id="item_b1"
    )
    retrieve = beta.ConversationItemRetrieveEventParam(
        type="conversation.item.retrieve", event_id="b_get", item_id="item_b1"
    )
    truncate = beta.ConversationItemTruncateEventParam(
        type="conversation.item.truncate", item_id="item_resp", content_index=0, audio_end_ms=0
    )
    return [
        ("session.update", dict(session_update), cmd.UpdateSession),
        ("session.update no vad", dict(session_no_vad), cmd.UpdateSession),
        ("input_audio_buffer.append", dict(append), cmd.AppendAudio),
        ("input_audio_buffer.commit", dict(commit), cmd.Commit),
        ("input_audio_buffer.clear", dict(clear), cmd.ClearInput),
        ("output_audio_buffer.clear", dict(out_clear), cmd.ClearOutputAudio),
        ("response.create", dict(response_create), cmd.CreateResponse),
        ("response.cancel", dict(response_cancel), cmd.CancelResponse),
        ("item text+audio", dict(item_text), cmd.CreateItem),
        ("item assistant text", dict(item_assistant), cmd.CreateItem),
        ("item function_call_output", dict(item_output), cmd.CreateItem),
        ("conversation.item.delete", dict(delete), cmd.DeleteItem),
        ("conversation.item.retrieve", dict(retrieve), cmd.RetrieveItem),
        ("conversation.item.truncate", dict(truncate), cmd.TruncateItem),
    ]
