"""The 46-class duplex vocabulary: tiers, Tier 2 purity, registry and engine constants."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from omniduplex.protocol.duplex import events as dx
from omniduplex.protocol.duplex.errors import ERROR_CLASS_BY_CODE
from omniduplex.protocol.realtime import events as rt
from omniduplex.protocol.realtime.base import RealtimeEvent
from omniduplex.protocol.realtime.errors import RealtimeProtocolError

TIER2_ADDED = {
    dx.SessionCreated: {"attachment_generation", "resume_token"},
    dx.ResponseCreated: {"response_id"},
    dx.ResponseDone: {"response_id"},
    dx.ResponseOutputAudioDelta: {"format", "sample_rate_hz", "metadata"},
    dx.InputAudioBufferCommitted: {"event"},
    dx.ConversationItemDeleted: {"event"},
    dx.ConversationItemTruncated: {"event"},
    dx.ErrorEvent: {"extra"},
}
TIER2_TWIN = {
    dx.SessionCreated: rt.SessionCreated,
    dx.ResponseCreated: rt.ResponseCreated,
    dx.ResponseDone: rt.ResponseDone,
    dx.ResponseOutputAudioDelta: rt.ResponseOutputAudioDelta,
    dx.InputAudioBufferCommitted: rt.InputAudioBufferCommitted,
    dx.ConversationItemDeleted: rt.ConversationItemDeleted,
    dx.ConversationItemTruncated: rt.ConversationItemTruncated,
    dx.ErrorEvent: rt.RealtimeErrorEvent,
}
TIER3_TYPES = {
    dx.SessionResumed: "session.resumed",
    dx.SessionReplaced: "session.replaced",
    dx.SessionResyncRequired: "session.resync_required",
    dx.SessionClosed: "session.closed",
    dx.SessionExpired: "session.expired",
    dx.SessionHeartbeatAck: "session.heartbeat_ack",
    dx.TurnEvent: "turn.event",
    dx.ResponseListen: "response.listen",
    dx.ResponseSpeak: "response.speak",
    dx.OverlapDecision: "overlap.decision",
    dx.PlaybackAcknowledged: "playback.acknowledged",
}


def test_tier_counts() -> None:
    classes = dx.DUPLEX_EVENT_CLASSES
    assert len(classes) == len(set(classes)) == 54
    counts = {tier: sum(cls.tier == tier for cls in classes) for tier in (1, 2, 3)}
    assert counts == {1: 34, 2: 8, 3: 12}
    assert set(dx.TIER1_EVENT_CLASSES) | set(TIER2_TWIN.values()) == set(rt.REALTIME_EVENT_CLASSES)


def test_tier1_classes_are_re_exported_unchanged() -> None:
    for cls in dx.TIER1_EVENT_CLASSES:
        assert getattr(rt, cls.__name__) is cls
        assert getattr(dx, cls.__name__) is cls


@pytest.mark.parametrize("cls", list(TIER2_ADDED), ids=lambda c: c.type)
def test_tier2_subclasses_its_twin_and_declares_only_what_it_adds(cls: type[RealtimeEvent]) -> None:
    twin = TIER2_TWIN[cls]
    assert cls.__mro__[1] is twin and twin.tier == 1 and cls.tier == 2
    assert cls.__name__ == twin.__name__ or twin is rt.RealtimeErrorEvent
    assert (cls.type, cls.beta_type) == (twin.type, twin.beta_type)
    own = {f.name for f in fields(cls)} - {f.name for f in fields(twin)}
    assert own == TIER2_ADDED[cls] == dx.TIER2_ADDED_FIELDS[cls]
    # Declared here, not redeclared: the class body annotates exactly the added fields.
    assert (
        set(inspect.get_annotations(cls))
        - {
            "type",
            "beta_type",
            "tier",
            "optional_fields",
        }
        == TIER2_ADDED[cls]
    )
    assert [f.name for f in fields(twin)] == [f.name for f in fields(cls)][: len(fields(twin))]


def test_tier3_types_and_terminals() -> None:
    for cls, wire_type in TIER3_TYPES.items():
        assert cls.tier == 3 and cls.type == cls.beta_type == wire_type
    assert issubclass(dx.SessionExpired, dx.SessionClosed)
    assert dx.SessionClosed.terminal and dx.SessionExpired.terminal
    assert {dx.SessionClosed, dx.SessionExpired} == dx.TERMINAL_SESSION_EVENTS
    assert not any(
        cls.terminal for cls in dx.DUPLEX_EVENT_CLASSES if cls not in dx.TERMINAL_SESSION_EVENTS
    )


def test_raw_event_type_is_dynamic() -> None:
    raw = dx.RawDuplexEvent(event={"type": "function_call.done"})
    assert (
        raw.to_realtime("ga")["type"]
        == raw.to_realtime("beta")["type"]
        == "duplex.function_call.done"
    )
    assert dx.RawDuplexEvent(internal_type="x.y", event={}).to_realtime()["type"] == "duplex.x.y"
    with pytest.raises(ValueError):
        dx.RawDuplexEvent(event={})


def test_duplex_event_is_the_realtime_base() -> None:
    assert dx.DuplexEvent is RealtimeEvent is dx.RealtimeEvent


def test_registry_maps_every_spelling_to_the_duplex_class() -> None:
    registry = dx.DUPLEX_EVENT_TYPES
    for cls in dx.DUPLEX_EVENT_CLASSES:
        if cls is dx.RawDuplexEvent:
            continue
        assert registry[cls.type] is cls
        if cls.beta_type is not None:
            assert registry[cls.beta_type] is cls
    assert registry["response.audio.delta"] is dx.ResponseOutputAudioDelta
    assert registry["error"] is dx.ErrorEvent
    assert not any(name.startswith("duplex.") for name in registry)


def test_model_output_events_are_response_scoped() -> None:
    names = {cls.type for cls in dx.MODEL_OUTPUT_EVENTS}
    assert {"response.created", "response.done", "response.output_audio.delta"} <= names
    assert {"response.listen", "response.speak"} <= names
    assert "session.closed" not in names and "error" not in names
    # Both tiers of a shadowed event count, whichever the engine happens to build.
    assert {rt.ResponseOutputAudioDelta, dx.ResponseOutputAudioDelta} <= dx.MODEL_OUTPUT_EVENTS


@pytest.mark.parametrize("code", sorted(ERROR_CLASS_BY_CODE))
def test_error_event_classes_code_by_the_table(code: str) -> None:
    body = dx.ErrorEvent(code=code, message="m").to_realtime()["error"]
    assert body["type"] == ERROR_CLASS_BY_CODE[code]


def test_error_event_from_exception() -> None:
    exc = RealtimeProtocolError("nope", "input_backpressure", event_id="c9", param="audio")
    rendered = dx.ErrorEvent.from_exception(exc, retryable=True).to_realtime()
    assert rendered["error"] == {
        "type": "rate_limit_error",
        "code": "input_backpressure",
        "message": "nope",
        "param": "audio",
        "event_id": "c9",
        "retryable": True,
    }
    assert rendered["event_id"] != "c9"
    unlisted = dx.ErrorEvent.from_exception(RealtimeProtocolError("x", "brand_new_code"))
    assert unlisted.to_realtime()["error"]["type"] == "server_error"


def test_error_extra_never_overrides_the_envelope() -> None:
    event = dx.ErrorEvent(code="bad_event", message="m", extra={"code": "x", "retryable": False})
    assert event.to_realtime()["error"]["code"] == "bad_event"


def test_tier2_response_id_defaults_to_the_response_id() -> None:
    done = dx.ResponseDone(response={"id": "resp-1", "status": "completed"})
    assert done.response_id == "resp-1"
    assert done.to_realtime()["response_id"] == "resp-1"


def test_failed_response_error_class_comes_from_the_table() -> None:
    response = {
        "id": "r",
        "status": "failed",
        "status_details": {"type": "failed", "reason": "input_backpressure"},
    }
    tier2 = dx.ResponseDone(response=response).to_realtime()["response"]["status_details"]
    tier1 = rt.ResponseDone(response=response).to_realtime()["response"]["status_details"]
    assert tier2["error"] == {"type": "rate_limit_error", "code": "input_backpressure"}
    assert tier1["error"] == {"type": "server_error", "code": "input_backpressure"}


def test_empty_delta_metadata_is_left_off() -> None:
    delta = dx.ResponseOutputAudioDelta(response_id="r", item_id="i", delta="", metadata={})
    rendered = delta.to_realtime()
    assert rendered["format"] == "pcm16"
    assert "metadata" not in rendered and "sample_rate_hz" not in rendered


def test_tier2_credentials_only_when_given() -> None:
    plain = dx.SessionCreated(session={"type": "realtime"}).to_realtime()
    assert "resume_token" not in plain and "attachment_generation" not in plain


def test_error_event_build_takes_the_clients_event_id() -> None:
    event = dx.ErrorEvent.build("item_not_found", "no such item", event_id="c3", extra={"a": 1})
    assert event.event_id.startswith("event_") and event.client_event_id == "c3"
    assert event.to_realtime()["error"]["event_id"] == "c3"
    assert event.to_realtime()["error"]["a"] == 1


@pytest.mark.parametrize("cls", dx.DUPLEX_EVENT_CLASSES, ids=lambda c: c.__name__)
def test_class_names_follow_the_ga_wire_type(cls: type[RealtimeEvent]) -> None:
    if cls in (dx.ErrorEvent, dx.RawDuplexEvent):
        return
    expected = "".join(part.title() for part in cls.type.replace(".", "_").split("_"))
    assert cls.__name__ == expected
