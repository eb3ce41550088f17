"""A realistic instance (or several) of every one of the 46 duplex event classes.

Tier 1 payloads come from the realtime samples module, loaded by path: test folders
are not packages, and the duplex vocabulary builds on the realtime one anyway.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from omniduplex.protocol.duplex import events as dx
from omniduplex.protocol.realtime.base import RealtimeEvent
from omniduplex.protocol.realtime.errors import RealtimeProtocolError


def _load_realtime_samples() -> ModuleType:
    name = "test_events_realtime_samples"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).parents[1] / "realtime" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


rs = _load_realtime_samples()

SESSION_ID = rs.SESSION_ID
RESPONSE_ID = rs.RESPONSE_ID
ITEM_ID = rs.ASSISTANT_ITEM_ID
PLAYBACK = {"generated_ms": 2000, "sent_ms": 2000, "played_ms": 1500, "committed_ms": 1500}


def _tier1_from_realtime() -> list[RealtimeEvent]:
    # The duplex surface re-exports these classes unchanged.
    tier1 = set(dx.TIER1_EVENT_CLASSES)
    return [event for event in rs.tier1_samples() if type(event) in tier1]


def tier2_samples() -> list[RealtimeEvent]:
    committed_event = {
        "type": "input.committed",
        "turn_id": 3,
        "history_len": 4,
        "native_audio": True,
        "transcript": "what's the weather",
        "realtime_item_id": rs.USER_ITEM_ID,
    }
    return [
        dx.SessionCreated(session=rs.session_object()),
        dx.SessionCreated(
            session=rs.vad_g711_session(),
            attachment_generation=1,
            resume_token="Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycGx5",
        ),
        dx.ResponseCreated(response=rs.RESPONSES["created"]()),
        *(dx.ResponseDone(response=make()) for make in rs.RESPONSES.values()),
        dx.ResponseOutputAudioDelta(
            response_id=RESPONSE_ID, item_id=ITEM_ID, delta=rs.AUDIO_100MS_B64
        ),
        dx.ResponseOutputAudioDelta(
            response_id=RESPONSE_ID,
            item_id=ITEM_ID,
            delta=rs.AUDIO_100MS_B64,
            format="g711_ulaw",
            sample_rate_hz=8000,
            metadata={
                "model_speak": True,
                "end_of_turn": False,
                "playback": PLAYBACK,
                "audio_duration_ms": 2000,
                "audio_text_marks": [{"text_chars": 5, "audio_end_ms": 1000}],
            },
        ),
        dx.InputAudioBufferCommitted(
            previous_item_id=None, item_id=rs.USER_ITEM_ID, event=committed_event
        ),
        dx.ConversationItemDeleted(
            item_id=rs.USER_ITEM_ID,
            event={
                "type": "conversation.item.deleted",
                "item_id": rs.USER_ITEM_ID,
                "deleted": True,
            },
        ),
        dx.ConversationItemTruncated(
            item_id=ITEM_ID,
            content_index=0,
            audio_end_ms=1500,
            event={"type": "conversation.item.truncated", "item_id": ITEM_ID, "truncated": True},
        ),
        dx.ErrorEvent(
            code="runtime_append_failed", message="append failed", extra={"retryable": False}
        ),
        dx.ErrorEvent.from_exception(
            RealtimeProtocolError(
                "Unsupported input_audio_format: 'opus'",
                "unsupported_audio_format",
                event_id="evt_7",
                param="input_audio_format",
            )
        ),
        dx.ErrorEvent(
            code="resource_exhausted", message="duplex_session_capacity_exhausted: limit=4"
        ),
    ]


def tier3_samples() -> list[RealtimeEvent]:
    return [
        dx.SessionResumed(
            session_id=SESSION_ID,
            session=rs.session_object(),
            attachment_generation=2,
            resume_token="cm90YXRlZHRva2Vucm90YXRlZHRva2Vucm90YXRlZHRv",
        ),
        dx.SessionResumed(session_id=SESSION_ID, session=rs.vad_g711_session()),
        dx.SessionReplaced(session_id=SESSION_ID, attachment_generation=1),
        dx.SessionResyncRequired(session_id=SESSION_ID, reason="journal_overflow"),
        dx.SessionClosed(session_id=SESSION_ID, reason="client_close"),
        dx.SessionClosed(
            session_id=SESSION_ID,
            reason="runtime_append_task_failed",
            event={"type": "session.closed", "reason": "runtime_append_task_failed"},
        ),
        dx.SessionExpired(session_id=SESSION_ID, reason="idle_ttl_expired"),
        dx.SessionHeartbeatAck(session_id=SESSION_ID),
        dx.TurnEvent(
            session_id=SESSION_ID, epoch=2, event="user_started", turn_state="user_speaking"
        ),
        dx.ResponseListen(
            session_id=SESSION_ID,
            epoch=0,
            metadata={"reason": "model_listen", "model_listen": True},
        ),
        dx.ResponseListen(
            session_id=SESSION_ID,
            epoch=1,
            response_id=RESPONSE_ID,
            metadata={"reason": "model_turn_completed_without_output", "model_listen": True},
        ),
        dx.ResponseSpeak(
            response_id=RESPONSE_ID,
            item_id=ITEM_ID,
            metadata={"session_id": SESSION_ID, "epoch": 1, "model_speak": True},
        ),
        dx.OverlapDecision(
            session_id=SESSION_ID,
            epoch=1,
            policy="barge_in_on_speech",
            action="barge_in",
            reason="server_vad_speech_started",
            metadata={"duration_ms": 320, "buffer_audio": True, "cancel_reason": "turn_detected"},
        ),
        dx.PlaybackAcknowledged(
            event={
                "item_id": ITEM_ID,
                "played_ms": 1500,
                "committed_ms": 1500,
                "truncate": False,
                "playback": PLAYBACK,
                "history_committed": True,
            }
        ),
        dx.RawDuplexEvent(event={"type": "function_call.done", "arguments": "{}"}),
    ]


def all_samples() -> list[RealtimeEvent]:
    return _tier1_from_realtime() + tier2_samples() + tier3_samples()


def test_samples_cover_all_54_classes() -> None:
    assert {type(event) for event in all_samples()} == set(dx.DUPLEX_EVENT_CLASSES)
