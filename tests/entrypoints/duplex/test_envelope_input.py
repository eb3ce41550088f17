"""RealtimeEnvelope: dialect, handshake rules, frame decoding and error frames."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from omniduplex.entrypoints.duplex.realtime_input import (
    HandshakeState,
    HandshakeStateError,
    RealtimeEnvelope,
    encode_frame,
    select_dialect,
)
from omniduplex.entrypoints.duplex.session_attachment import DuplexSessionAttachmentRegistry
from omniduplex.protocol.duplex import DuplexCommandError, RealtimeInputDefaults, events
from omniduplex.protocol.duplex.commands import (
    AckEvents,
    AppendAudio,
    Commit,
    ResumeSession,
    UpdateSession,
)
from omniduplex.protocol.duplex.events import SessionUpdated


def _frame(**event) -> str:
    return orjson.dumps(event).decode()


def _refusal(call, *args) -> DuplexCommandError:
    with pytest.raises(DuplexCommandError) as info:
        call(*args)
    return info.value


# ---- dialect ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "headers", "subprotocols", "dialect"),
    [
        ({}, {}, (), "ga"),
        ({}, {"OpenAI-Beta": "realtime=v1"}, (), "beta"),
        ({}, {"openai-beta": "assistants=v2, realtime=v1"}, (), "beta"),
        ({}, [(b"openai-beta", b"realtime=v1")], (), "beta"),  # ASGI raw headers
        ({}, {"OpenAI-Beta": "assistants=v2"}, (), "ga"),
        ({"dialect": "beta"}, {}, (), "beta"),
        ({"dialect": "GA"}, {"OpenAI-Beta": "realtime=v1"}, (), "ga"),  # explicit wins
        ({}, {}, ("realtime", "openai-beta.realtime-v1"), "beta"),
    ],
)
def test_dialect_selection(query, headers, subprotocols, dialect) -> None:
    assert select_dialect(query, headers, subprotocols) == dialect
    assert RealtimeEnvelope.from_request(query, headers, subprotocols).dialect == dialect


@pytest.mark.parametrize(
    ("query", "param"),
    [({"dialect": "v2"}, "dialect"), ({"autostart": "maybe"}, "autostart")],
)
def test_malformed_query_parameters_are_refused(query, param) -> None:
    exc = _refusal(RealtimeEnvelope.from_request, query)
    assert exc.code == "bad_event" and exc.param == param


def test_errors_render_in_the_connection_dialect() -> None:
    for dialect in ("ga", "beta"):
        envelope = RealtimeEnvelope(dialect=dialect)
        rendered = envelope.error_event("unknown_event", "nope", event_id="evt_1")
        assert rendered["type"] == "error" and rendered["event_id"].startswith("event_")
        assert rendered["error"] == {
            "type": "invalid_request_error",
            "code": "unknown_event",
            "message": "nope",
            "event_id": "evt_1",
        }
    update = SessionUpdated(session={"type": "realtime", "output_modalities": ["audio"]})
    assert RealtimeEnvelope(dialect="beta").render(update)["type"] == "session.updated"


@pytest.mark.parametrize(
    ("value", "duplex"), [(None, True), ("1", True), ("on", True), ("0", False), ("off", False)]
)
def test_duplex_flag_chooses_the_extensions(value, duplex) -> None:
    query = {} if value is None else {"duplex": value}
    assert RealtimeEnvelope.from_request(query, duplex_route=True).extensions is duplex
    assert RealtimeEnvelope.from_request(query).extensions is (value is not None and duplex)


def _tier3_event() -> Any:
    return events.ResponseSpeak(response_id="resp_1", item_id="item_resp_1")


def test_plain_connection_renders_no_tier3_event_types_until_it_opts_in() -> None:
    envelope = RealtimeEnvelope.from_request({"model": "m"})
    assert envelope.render(_tier3_event()) is None
    assert envelope.render(events.InputAudioBufferCleared())["type"] == (
        "input_audio_buffer.cleared"
    )
    envelope.decode(_frame(type="session.heartbeat"))  # one of our commands: it speaks them
    assert envelope.render(_tier3_event())["type"] == "response.speak"


def test_session_field_switches_the_extensions_both_ways() -> None:
    envelope = RealtimeEnvelope.from_request({"duplex": "0"})
    envelope.decode(_frame(type="session.heartbeat"))
    assert not envelope.extensions  # ?duplex=0 is kept to ...
    on = {"type": "session.update", "session": {"extra_body": {"duplex_extensions": True}}}
    envelope.decode(_frame(**on))
    assert envelope.render(_tier3_event()) is not None  # ... unless the session field says
    on["session"]["extra_body"]["duplex_extensions"] = False
    envelope.decode(_frame(**on))
    assert envelope.render(_tier3_event()) is None


# ---- handshake --------------------------------------------------------------------------


def test_empty_flags_count_as_absent() -> None:
    envelope = RealtimeEnvelope.from_request({"model": "m", "resume": "", "autostart": " "})
    assert not envelope.resume_only and envelope.initial_open() == {"model": "m"}


def test_model_query_autostarts_once() -> None:
    envelope = RealtimeEnvelope.from_request({"model": " loopback "})
    assert envelope.default_model == "loopback" and not envelope.resume_only
    assert envelope.initial_open() == {"model": "loopback"}
    assert envelope.initial_open() is None


@pytest.mark.parametrize(
    "query",
    [
        {"model": "m", "autostart": "0"},
        {"model": "m", "autostart": "false"},
        {"model": "m", "autostart": "0", "duplex": "1"},
        {"model": "m", "resume": "1"},
        {"model": "m", "resume": "yes"},
        {},
        {"model": ""},
        {"model": " "},
    ],
)
def test_no_autostart_without_model_or_on_resume_only(query) -> None:
    assert RealtimeEnvelope.from_request(query).initial_open() is None


def test_autostart_0_opens_with_a_first_session_update() -> None:
    """The reference DuplexClient dials ``?duplex=1&model=M&autostart=0``, then configures."""
    envelope = RealtimeEnvelope.from_request({"duplex": "1", "model": "m", "autostart": "0"})
    assert not envelope.resume_only and envelope.initial_open() is None
    session = {"model": "m", "sample_rate_hz": 16000}
    message = envelope.first_message(_frame(type="session.update", session=session))
    assert message.kind == "open" and message.session_payload == session


@pytest.mark.parametrize(
    "query", [{"resume": "1"}, {"resume": "on"}, {"resume": "1", "autostart": "0"}]
)
@pytest.mark.parametrize(
    "first",
    [
        {"type": "session.update", "session": {}},
        {"type": "input_audio_buffer.append", "audio": ""},
        {"type": "session.event_ack", "server_event_seq": 0},
    ],
)
def test_resume_only_refuses_any_first_message_but_resume(query, first) -> None:
    envelope = RealtimeEnvelope.from_request(query)
    assert envelope.resume_only
    exc = _refusal(envelope.first_message, _frame(**first, event_id="evt_first"))
    assert exc.code == "session_required"
    assert exc.event_id == "evt_first"
    assert not envelope.opened  # nothing changed: the client may still send session.resume
    resume = _frame(type="session.resume", session_id="duplex-x", resume_token="tok")
    message = envelope.first_message(resume)
    assert message.kind == "resume" and isinstance(message.command, ResumeSession)
    assert message.command.last_received_server_event_seq == 0


def test_first_message_session_update_opens_with_its_session() -> None:
    envelope = RealtimeEnvelope.from_request({})
    session = {"type": "realtime", "input_audio_format": "g711_ulaw"}
    message = envelope.first_message(_frame(type="session.update", session=session))
    assert message.kind == "open"
    assert isinstance(message.command, UpdateSession)
    assert message.session_payload == session
    assert envelope.defaults.input_format.name == "g711_ulaw"


def test_other_first_message_opens_the_default_session_then_runs() -> None:
    envelope = RealtimeEnvelope.from_request({"model": "m", "autostart": "0"})
    message = envelope.first_message(_frame(type="input_audio_buffer.commit"))
    assert message.kind == "open_default"
    assert message.session_payload == {"model": "m"}
    assert isinstance(message.command, Commit)


def test_malformed_resume_is_invalid_session_resume() -> None:
    envelope = RealtimeEnvelope.from_request({"resume": "1"})
    frame = _frame(type="session.resume", event_id="e9", session_id="s", resume_token="")
    exc = _refusal(envelope.first_message, frame)
    assert exc.code == "invalid_session_resume" and exc.event_id == "e9"


# ---- frames -----------------------------------------------------------------------------


@pytest.fixture(params=["first", "later"])
def read(request):
    envelope = RealtimeEnvelope(max_event_bytes=1024)
    if request.param == "first":
        return envelope.first_message
    envelope.bind_session("duplex-s")
    return envelope.decode


@pytest.mark.parametrize(
    ("frame", "code", "event_id"),
    [
        (b'{"type":"input_audio_buffer.commit"}', "binary_frame_unsupported", None),
        (
            '{"type":"input_audio_buffer.append","audio":"' + "A" * 2000 + '"}',
            "event_too_large",
            None,
        ),
        ('{"type": "session.update",', "invalid_json", None),
        ("[1, 2]", "bad_event", None),
        ('{"event_id":"e1"}', "bad_event", "e1"),
        ('{"type":"push_chunk","event_id":"e2"}', "unknown_event", "e2"),
        ('{"type":"input.audio.append","event_id":"e3"}', "unknown_event", "e3"),
        ('{"type":"playback.ack","event_id":"e4"}', "bad_event", "e4"),
    ],
)
def test_bad_frames_have_their_codes(read, frame, code, event_id) -> None:
    exc = _refusal(read, frame)
    assert exc.code == code
    assert exc.event_id == event_id


def test_late_session_resume_is_refused_with_event_id() -> None:
    envelope = RealtimeEnvelope()
    envelope.bind_session("duplex-s")
    frame = _frame(type="session.resume", event_id="e5", session_id="s", resume_token="t")
    exc = _refusal(envelope.decode, frame)
    assert exc.code == "unsupported_session_resume" and exc.event_id == "e5"


def test_event_ack_is_decoded_for_the_route() -> None:
    envelope = RealtimeEnvelope()
    command = envelope.decode(_frame(type="session.event_ack", server_event_seq=3))
    assert isinstance(command, AckEvents) and command.server_event_seq == 3
    exc = _refusal(envelope.decode, _frame(type="session.event_ack", event_id="e6"))
    assert exc.code == "invalid_event_ack" and exc.event_id == "e6"
    exc = _refusal(envelope.decode, _frame(type="session.event_ack", server_event_seq=-1))
    assert exc.code == "invalid_event_ack"


# ---- input defaults ---------------------------------------------------------------------


def test_accepted_session_update_sets_the_defaults_for_later_appends() -> None:
    envelope = RealtimeEnvelope()
    envelope.decode(_frame(type="session.update", session={"input_audio_format": "g711_ulaw"}))
    append = envelope.decode(_frame(type="input_audio_buffer.append", audio="AAAAAA=="))
    assert isinstance(append, AppendAudio)
    assert append.format == "g711_ulaw" and append.sample_rate_hz == 8000
    ga = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}
    envelope.decode(_frame(type="session.update", session=ga))
    append = envelope.decode(_frame(type="input_audio_buffer.append", audio="AAAAAA=="))
    assert append.format == "pcm16" and append.sample_rate_hz == 16000


def test_refused_session_update_leaves_the_defaults() -> None:
    envelope = RealtimeEnvelope()
    before = envelope.defaults
    frame = _frame(type="session.update", event_id="e7", session={"input_audio_format": "mp3"})
    exc = _refusal(envelope.decode, frame)
    assert exc.code == "unsupported_audio_format" and exc.event_id == "e7"
    assert exc.param == "input_audio_format"
    assert envelope.defaults == before


def test_adopt_session_restores_negotiated_formats() -> None:
    envelope = RealtimeEnvelope()
    envelope.adopt_session({"input_audio_format": "g711_alaw", "output_audio_format": "pcm16"})
    assert envelope.defaults.input_format.name == "g711_alaw"
    envelope.adopt_session(None)
    assert envelope.defaults.input_format.name == "g711_alaw"
    assert RealtimeEnvelope().defaults == RealtimeInputDefaults()


# ---- error frames and server_event_seq --------------------------------------------------


def test_errors_before_a_session_carry_no_seq() -> None:
    envelope = RealtimeEnvelope()
    exc = _refusal(envelope.decode, '{"type":"nope","event_id":"e8"}')
    error = orjson.loads(envelope.error_frame_for(exc))
    assert "server_event_seq" not in error
    assert error["error"]["code"] == "unknown_event" and error["error"]["event_id"] == "e8"
    assert error["error"]["param"] == "type"


def test_transport_errors_render_through_error_frame_for() -> None:
    registry = DuplexSessionAttachmentRegistry()
    registry.register("duplex-s", resumable=True)
    with pytest.raises(Exception) as info:
        registry.authenticate_resume("duplex-s", "wrong", 0)
    error = orjson.loads(RealtimeEnvelope().error_frame_for(info.value, event_id="e10"))
    assert error["error"]["code"] == "invalid_resume_token"
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["event_id"] == "e10"
    assert encode_frame({"a": 1}) == b'{"a":1}'


# ---- the handshake state machine --------------------------------------------------------


def test_handshake_steps_and_what_is_out_of_order() -> None:
    envelope = RealtimeEnvelope.from_request({"model": "m"})
    assert envelope.state is HandshakeState.AWAITING_FIRST
    assert envelope.initial_open() == {"model": "m"}
    assert envelope.state is HandshakeState.OPENING
    with pytest.raises(HandshakeStateError):
        envelope.first_message(_frame(type="session.update", session={}))  # already opening
    envelope.bind_session("duplex-s")
    assert envelope.state is HandshakeState.OPEN and envelope.opened
    with pytest.raises(HandshakeStateError):
        envelope.bind_session("duplex-t")  # one session per connection


def test_a_refused_first_message_leaves_the_handshake_waiting() -> None:
    envelope = RealtimeEnvelope.from_request({"resume": "1"})
    _refusal(envelope.first_message, _frame(type="session.update", session={}))
    assert envelope.state is HandshakeState.AWAITING_FIRST
    resume = _frame(type="session.resume", session_id="duplex-x", resume_token="tok")
    assert envelope.first_message(resume).kind == "resume"
    assert envelope.state is HandshakeState.RESUMING
