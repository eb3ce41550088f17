"""Every duplex event on the wire: SDK validation, parse-back, snapshots, dialect names,
and Hypothesis-generated values and objects."""

from __future__ import annotations

import copy
import json
from dataclasses import fields
from typing import Any

import openai.types.beta.realtime as sdk_beta
import openai.types.realtime as sdk_ga
import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_events_duplex_samples import all_samples, rs, tier2_samples, tier3_samples

from omniduplex.protocol.duplex import events as dx
from omniduplex.protocol.realtime.base import DIALECTS, RealtimeEvent
from omniduplex.protocol.realtime.errors import RealtimeProtocolError
from omniduplex.protocol.realtime.event_decoding import wire_field_specs

ADAPTERS = {
    "ga": pydantic.TypeAdapter(sdk_ga.RealtimeServerEvent),
    "beta": pydantic.TypeAdapter(sdk_beta.RealtimeServerEvent),
}
SAMPLES = all_samples()
OPENAI_SAMPLES = [event for event in SAMPLES if type(event).tier in (1, 2)]
TIER3_SAMPLES = tier3_samples()


def _id(event: RealtimeEvent) -> str:
    return f"t{type(event).tier}:{type(event).type}"


@pytest.mark.parametrize(
    ("event", "dialect"),
    [
        pytest.param(event, dialect, id=f"{_id(event)}-{dialect}")
        for event in OPENAI_SAMPLES
        for dialect in DIALECTS
        # A beta connection never carries a remote MCP item (it cannot declare a server).
        if dialect == "ga" or not rs.carries_mcp_item(event)
    ],
)
def test_tier1_and_tier2_validate_against_the_sdk(event: RealtimeEvent, dialect: str) -> None:
    rendered = event.to_realtime(dialect)  # type: ignore[arg-type]
    if rendered is None:
        assert dialect == "beta" and type(event).beta_type is None
        return
    model = ADAPTERS[dialect].validate_json(orjson.dumps(rendered))
    assert model.type == rendered["type"] == type(event).wire_type(dialect)  # type: ignore[arg-type]


def test_tier2_keys_reach_the_sdk_as_extras() -> None:
    delta = next(
        e for e in tier2_samples() if isinstance(e, dx.ResponseOutputAudioDelta) and e.metadata
    )
    model = ADAPTERS["ga"].validate_python(delta.to_realtime())
    assert model.format == "g711_ulaw" and model.sample_rate_hz == 8000  # type: ignore[union-attr]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("event", TIER3_SAMPLES, ids=_id)
def test_tier3_renders_our_names_as_json(event: RealtimeEvent, dialect: str) -> None:
    rendered = event.to_realtime(dialect)  # type: ignore[arg-type]
    assert rendered is not None
    expected = "duplex.function_call.done" if isinstance(event, dx.RawDuplexEvent) else event.type
    assert rendered["type"] == expected
    assert json.loads(orjson.dumps(rendered)) == rendered
    with pytest.raises(pydantic.ValidationError):
        ADAPTERS[dialect].validate_python(rendered)


def test_identity_is_rendered_only_where_the_wire_shows_it() -> None:
    for event in SAMPLES:
        stamped = copy.copy(event)
        stamped.session_id, stamped.epoch = "duplex-stamped", 99
        rendered = stamped.to_realtime()
        shown = type(event).rendered_identity
        assert ("session_id" in rendered) == ("session_id" in shown), type(event)
        assert ("epoch" in rendered) == ("epoch" in shown), type(event)
    assert dx.TurnEvent.rendered_identity == {"session_id", "epoch"}
    assert dx.ResponseListen.rendered_identity == {"session_id", "epoch"}
    assert dx.OverlapDecision.rendered_identity == {"session_id", "epoch"}
    assert dx.SessionClosed.rendered_identity == {"session_id"}


def test_wire_shapes_of_our_events() -> None:
    by_type: dict[type[RealtimeEvent], dict[str, Any]] = {}
    for event in TIER3_SAMPLES:
        by_type.setdefault(type(event), event.to_realtime())  # type: ignore[arg-type]
    assert set(by_type[dx.SessionExpired]) == {"type", "event_id", "session_id", "reason"}
    assert by_type[dx.SessionClosed]["event"] == {}
    listen = [e.to_realtime() for e in TIER3_SAMPLES if isinstance(e, dx.ResponseListen)]
    assert "response_id" not in listen[0] and "id" not in listen[0]["response"]
    assert listen[1]["response_id"] == listen[1]["response"]["id"]
    assert listen[0]["response"]["status"] == "listening"


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("event", SAMPLES, ids=_id)
def test_render_parse_render_is_identical(event: RealtimeEvent, dialect: str) -> None:
    rendered = event.to_realtime(dialect)  # type: ignore[arg-type]
    if rendered is None:
        return
    wire = orjson.loads(orjson.dumps(rendered))
    wire["server_event_seq"] = 42
    parsed = dx.event_from_realtime(wire)
    assert parsed.to_realtime(dialect) == rendered  # type: ignore[arg-type]
    assert parsed.event_id == event.event_id
    if type(event).tier == 2 and not isinstance(event, dx.ErrorEvent):
        extended = any(name in rendered for name in dx.TIER2_ADDED_FIELDS[type(event)])
        assert type(parsed) is (type(event) if extended else type(event).__mro__[1])
    else:
        assert type(parsed) is type(event)


@pytest.mark.parametrize("event", SAMPLES, ids=_id)
def test_mutating_the_callers_payload_changes_nothing(event: RealtimeEvent) -> None:
    before = {d: copy.deepcopy(event.to_realtime(d)) for d in DIALECTS}
    rebuilt_args = {f.name: copy.deepcopy(getattr(event, f.name)) for f in fields(event)}
    rebuilt = type(event)(**rebuilt_args)
    for value in rebuilt_args.values():
        _scribble(value)
    for d in DIALECTS:
        assert rebuilt.to_realtime(d) == before[d]


def _scribble(value: Any) -> None:
    if isinstance(value, dict):
        for key in list(value):
            _scribble(value[key])
        value["scribbled"] = True
        value.pop("type", None)
    elif isinstance(value, list):
        for entry in value:
            _scribble(entry)
        value.append("scribbled")


def test_beta_and_ga_never_render_each_others_media_names() -> None:
    ga_media = {
        cls.type for cls in dx.DUPLEX_EVENT_CLASSES if cls.beta_type not in (None, cls.type)
    }
    beta_media = {
        cls.beta_type for cls in dx.DUPLEX_EVENT_CLASSES if cls.beta_type not in (None, cls.type)
    }
    assert "response.output_audio.delta" in ga_media and "response.audio.delta" in beta_media
    for event in SAMPLES:
        assert event.to_realtime("ga")["type"] not in beta_media  # type: ignore[index]
        beta = event.to_realtime("beta")
        assert beta is None or beta["type"] not in ga_media


# ---- Hypothesis ------------------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
SAFE_INT = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
JSON_SCALAR = (
    st.none() | st.booleans() | SAFE_INT | st.floats(allow_nan=False, allow_infinity=False) | TEXT
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
JSON_DICT = st.dictionaries(TEXT, JSON_VALUE, max_size=5)
# Nested shapes the normalisers look at, so that their branches are exercised.
SHAPED_DICT = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["realtime", "message", "audio/pcm"]) | TEXT,
        "role": st.sampled_from(["assistant", "user", "system"]),
        "status": st.sampled_from(["cancelled", "failed", "completed", "in_progress"]),
        "status_details": st.fixed_dictionaries(
            {"type": st.sampled_from(["cancelled", "completed", "failed", "incomplete"])},
            optional={"reason": TEXT | st.sampled_from(["barge_in", "stop", "turn_detected"])},
        ),
        "content": st.lists(
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(
                        ["audio", "text", "output_audio", "input_image", "input_text"]
                    )
                },
                optional={"transcript": TEXT},
            ),
            max_size=3,
        ),
        "output": st.lists(JSON_DICT, max_size=2),
        "metadata": JSON_DICT,
        "modalities": st.lists(st.sampled_from(["audio", "text", "video"]), max_size=2),
        "input_audio_format": st.sampled_from(["pcm16", "pcm_f32le", "wav"]) | JSON_VALUE,
        "audio": st.fixed_dictionaries(
            {},
            optional={
                "input": st.fixed_dictionaries(
                    {},
                    optional={
                        "format": st.fixed_dictionaries(
                            {"type": st.sampled_from(["audio/pcm", "audio/pcmu", "audio/wav"])}
                        ),
                        "turn_detection": JSON_VALUE,
                    },
                ),
                "output": JSON_DICT,
            },
        ),
        "model": st.sampled_from(["gpt-realtime", "minicpmo_4_5"]),
        "tools": st.lists(JSON_DICT, max_size=2),
        "voice": JSON_VALUE,
    },
).flatmap(lambda shaped: JSON_DICT.map(lambda extra: {**extra, **shaped}))


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    text = str(hint)
    options: list[st.SearchStrategy[Any]] = []
    if "None" in text:
        options.append(st.none())
    if "dict" in text and "list" not in text:
        options.append(SHAPED_DICT)
    elif "list" in text:
        options.append(st.lists(JSON_DICT, max_size=3))
    elif "str" in text:
        options.append(TEXT)
    elif "int" in text:
        options.append(SAFE_INT)
    return st.one_of(*options)


def _event_strategy(cls: type[RealtimeEvent]) -> st.SearchStrategy[RealtimeEvent]:
    specs = wire_field_specs(cls)
    kwargs = {
        name: _strategy(hint) for name, (hint, _required) in specs.items() if name != "event_id"
    }
    for name in cls.rendered_identity:
        kwargs[name] = _strategy(specs[name][0])
    if cls is dx.RawDuplexEvent:
        kwargs["internal_type"] = TEXT.filter(bool)
    return st.builds(cls, **kwargs)


EVENTS = st.sampled_from(dx.DUPLEX_EVENT_CLASSES).flatmap(_event_strategy)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(event=EVENTS, dialect=st.sampled_from(DIALECTS))
def test_generated_events_round_trip(event: RealtimeEvent, dialect: str) -> None:
    rendered = event.to_realtime(dialect)  # type: ignore[arg-type]
    if rendered is None:
        return
    wire = orjson.loads(orjson.dumps(rendered))
    assert dx.event_from_realtime(wire).to_realtime(dialect) == wire  # type: ignore[arg-type]


TYPES = st.sampled_from([*sorted(dx.DUPLEX_EVENT_TYPES), "duplex.x", "duplex.", "nope"])
JSON_OBJECT_EVENT = st.one_of(
    JSON_VALUE,
    st.tuples(TYPES, JSON_DICT).map(lambda pair: {**pair[1], "type": pair[0]}),
    st.tuples(TYPES, SHAPED_DICT, JSON_DICT).map(
        lambda t: {
            **t[2],
            "type": t[0],
            "session": t[1],
            "item": t[1],
            "response": t[1],
            "event": t[1],
        }
    ),
)


@settings(max_examples=600)
@given(obj=JSON_OBJECT_EVENT)
def test_arbitrary_json_raises_only_protocol_errors(obj: Any) -> None:
    try:
        event = dx.event_from_realtime(obj)
    except RealtimeProtocolError as exc:
        assert exc.code in {"bad_event", "unknown_event"}
        return
    for dialect in DIALECTS:
        rendered = event.to_realtime(dialect)  # type: ignore[arg-type]
        if rendered is not None:
            assert dx.event_from_realtime(rendered).to_realtime(dialect) == rendered  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("obj", "code"),
    [
        (None, "bad_event"),
        ({"type": "duplex."}, "unknown_event"),
        ({"type": "push_chunk"}, "unknown_event"),
        ({"type": "duplex.x", "event": 1}, "bad_event"),
        ({"type": "session.expired", "session_id": "s"}, "bad_event"),
        ({"type": "response.listen", "response": {"metadata": {}, "id": "r"}}, "bad_event"),
        ({"type": "turn.event", "event": "close"}, "bad_event"),
        ({"type": "response.done", "response": {}, "response_id": 5}, "bad_event"),
        (
            {"type": "error", "error": {"type": "server_error", "message": "m", "code": 3}},
            "bad_event",
        ),
    ],
)
def test_bad_objects(obj: Any, code: str) -> None:
    with pytest.raises(RealtimeProtocolError) as info:
        dx.event_from_realtime(obj)
    assert info.value.code == code


def test_audio_delta_render_cost_smoke() -> None:
    # No wall-clock threshold: this only shows the hot path stays the plain field walk
    # (no copy of the base64 string) and renders through orjson.
    delta = dx.ResponseOutputAudioDelta(
        response_id="r", item_id="i", delta="A" * 6400, metadata={"epoch": 1}
    )
    rendered = delta.to_realtime()
    assert rendered["delta"] is delta.delta
    assert orjson.loads(orjson.dumps(rendered)) == rendered
