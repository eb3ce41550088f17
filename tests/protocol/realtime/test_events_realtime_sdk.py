"""Tier 1 renderings validate against the ``openai`` package's own server-event models.

The SDK's union is discriminated by its own metadata, which pydantic does not read, so a
match is checked for the right member too: the validated instance's ``type`` is ours.
"""

from __future__ import annotations

from typing import Any

import openai.types.beta.realtime as sdk_beta
import openai.types.realtime as sdk_ga
import orjson
import pydantic
import pytest
from test_events_realtime_samples import carries_mcp_item, tier1_samples

from omniduplex.protocol.realtime import events as rt
from omniduplex.protocol.realtime.base import DIALECTS, RealtimeEvent

GA = pydantic.TypeAdapter(sdk_ga.RealtimeServerEvent)
BETA = pydantic.TypeAdapter(sdk_beta.RealtimeServerEvent)
ADAPTERS = {"ga": GA, "beta": BETA}

SAMPLES = tier1_samples()
# A beta connection never carries a remote MCP item (it cannot declare an MCP server).
BETA_SAMPLES = [event for event in SAMPLES if not carries_mcp_item(event)]


def _id(event: RealtimeEvent) -> str:
    return event.type


def validate(dialect: str, rendered: dict[str, Any]) -> Any:
    # Through JSON, as a client would see it.
    model = ADAPTERS[dialect].validate_json(orjson.dumps(rendered))
    assert model.type == rendered["type"]
    return model


@pytest.mark.parametrize("event", SAMPLES, ids=_id)
def test_ga_rendering_validates(event: RealtimeEvent) -> None:
    rendered = event.to_realtime("ga")
    assert rendered is not None
    assert rendered["type"] == type(event).type
    validate("ga", rendered)


@pytest.mark.parametrize("event", BETA_SAMPLES, ids=_id)
def test_beta_rendering_validates(event: RealtimeEvent) -> None:
    rendered = event.to_realtime("beta")
    if type(event).beta_type is None:
        assert rendered is None
        return
    assert rendered is not None
    assert rendered["type"] == type(event).beta_type
    validate("beta", rendered)


def test_every_openai_event_class_has_a_ga_name_in_the_sdk_union() -> None:
    ga_names = {
        member.model_fields["type"].annotation.__args__[0]
        for member in sdk_ga.RealtimeServerEvent.__origin__.__args__
    }
    beta_names = {
        member.model_fields["type"].annotation.__args__[0]
        for member in sdk_beta.RealtimeServerEvent.__origin__.__args__
    }
    for cls in rt.REALTIME_EVENT_CLASSES:
        assert cls.type in ga_names
        assert cls.beta_type is None or cls.beta_type in beta_names


def test_ga_only_events_are_not_sent_in_beta() -> None:
    assert rt.ConversationItemAdded.beta_type is None
    assert rt.ConversationItemDone.beta_type is None


@pytest.mark.parametrize(
    ("cls", "ga", "beta"),
    [
        (rt.ResponseOutputAudioDelta, "response.output_audio.delta", "response.audio.delta"),
        (rt.ResponseOutputAudioDone, "response.output_audio.done", "response.audio.done"),
        (
            rt.ResponseOutputAudioTranscriptDelta,
            "response.output_audio_transcript.delta",
            "response.audio_transcript.delta",
        ),
        (
            rt.ResponseOutputAudioTranscriptDone,
            "response.output_audio_transcript.done",
            "response.audio_transcript.done",
        ),
        (rt.ResponseOutputTextDelta, "response.output_text.delta", "response.text.delta"),
        (rt.ResponseOutputTextDone, "response.output_text.done", "response.text.done"),
    ],
)
def test_media_names_per_dialect(cls: type[RealtimeEvent], ga: str, beta: str) -> None:
    assert (cls.type, cls.beta_type) == (ga, beta)


def test_no_dialect_renders_the_other_dialects_media_names() -> None:
    ga_only = {cls.type for cls in rt.REALTIME_EVENT_CLASSES if cls.type != cls.beta_type}
    beta_only = {
        cls.beta_type
        for cls in rt.REALTIME_EVENT_CLASSES
        if cls.beta_type is not None and cls.type != cls.beta_type
    }
    for event in SAMPLES:
        ga, beta = event.to_realtime("ga"), event.to_realtime("beta")
        assert ga is not None and ga["type"] not in beta_only
        assert beta is None or beta["type"] not in ga_only


def test_beta_model_names_match_the_sdk() -> None:
    from omniduplex.protocol.realtime.event_shapes import BETA_MODEL_NAMES

    annotation = sdk_beta.session.Session.model_fields["model"].annotation
    literal = next(arg for arg in annotation.__args__ if arg is not type(None))
    assert set(literal.__args__) == BETA_MODEL_NAMES


def test_dialects_constant() -> None:
    assert DIALECTS == ("ga", "beta")
