"""``RealtimeProtocol`` without a socket or a server: frames in, requests and frames out."""

from __future__ import annotations

import orjson

from omniduplex.entrypoints.duplex.journal import ReplayJournal
from omniduplex.entrypoints.duplex.outbound import CloseFrame, Frame
from omniduplex.entrypoints.duplex.realtime_input import HandshakeState, RealtimeEnvelope
from omniduplex.entrypoints.duplex.realtime_protocol import (
    ClientCommand,
    OpenRequest,
    RealtimeProtocol,
    ResumeRequest,
)
from omniduplex.protocol.duplex import events as ev

SID = "duplex-s"


def _protocol(query: dict | None = None, **options) -> RealtimeProtocol:
    return RealtimeProtocol(RealtimeEnvelope.from_request(query or {}), **options)


def _journal() -> ReplayJournal:
    return ReplayJournal(max_bytes=1 << 20, ttl_s=60, clock=lambda: 0.0)


def _frames(protocol: RealtimeProtocol) -> list[dict | CloseFrame]:
    out: list[dict | CloseFrame] = []
    while (frame := protocol.next_frame()) is not None:
        out.append(frame if isinstance(frame, CloseFrame) else orjson.loads(frame.data))
        if isinstance(frame, CloseFrame):
            break
    return out


def _opened(query: dict | None = None, **options) -> tuple[RealtimeProtocol, ReplayJournal]:
    protocol, journal = _protocol(query, **options), _journal()
    assert protocol.receive('{"type":"session.update","session":{}}') is not None
    protocol.opened(SID, journal, public_session={"id": SID})
    return protocol, journal


def _delta(response_id: str) -> ev.ResponseOutputAudioDelta:
    return ev.ResponseOutputAudioDelta(response_id=response_id, item_id="i", delta="AAAA")


def test_model_in_the_query_opens_before_anything_is_read() -> None:
    protocol = _protocol({"model": "m"})
    assert protocol.initial_open() == OpenRequest({"model": "m"})
    assert protocol.initial_open() is None  # at most once
    assert protocol.handshake is HandshakeState.OPENING


def test_a_refused_first_frame_is_answered_locally_and_changes_nothing() -> None:
    protocol = _protocol()
    assert protocol.receive("not json") is None
    (error,) = _frames(protocol)
    assert error["error"]["code"] == "invalid_json" and "server_event_seq" not in error
    assert protocol.handshake is HandshakeState.AWAITING_FIRST
    request = protocol.receive(
        '{"type":"session.update","event_id":"u1","session":{"instructions":"hi"}}'
    )
    assert request == OpenRequest({"instructions": "hi"}, opened_by="u1")


def test_a_first_command_opens_the_default_session_then_runs() -> None:
    protocol = _protocol({"model": "m", "autostart": "0"})
    request = protocol.receive('{"type":"response.create"}')
    assert isinstance(request, OpenRequest) and request.payload == {"model": "m"}
    assert request.then is not None and request.then.type == "response.create"


def test_session_resume_first_asks_for_a_resume() -> None:
    protocol = _protocol()
    request = protocol.receive('{"type":"session.resume","session_id":"s","resume_token":"t"}')
    assert isinstance(request, ResumeRequest) and request.command.session_id == "s"
    assert protocol.handshake is HandshakeState.RESUMING


def test_session_created_carries_credentials_then_the_opening_updates_refusals() -> None:
    protocol, journal = _protocol(), _journal()
    request = protocol.receive(
        '{"type":"session.update","event_id":"u1",'
        '"session":{"instructions":"hi","turn_detection":{"type":"no_such_vad"}}}'
    )
    assert isinstance(request, OpenRequest) and request.rejected
    protocol.opened(
        SID,
        journal,
        public_session={"id": SID},
        credentials=(1, "tok"),
        rejected=request.rejected,
        opened_by=request.opened_by,
    )
    protocol.deliver(ev.SessionCreated(session={"id": SID}))
    created, refused = _frames(protocol)
    assert created["type"] == "session.created" and created["resume_token"] == "tok"
    assert created["attachment_generation"] == 1 and created["server_event_seq"] == 1
    assert refused["type"] == "error" and refused["error"]["event_id"] == "u1"
    assert refused["server_event_seq"] == 2 and journal.head == 2


def test_errors_of_a_session_are_numbered_and_replayable() -> None:
    protocol, journal = _opened()
    protocol.deliver(ev.SessionCreated(session={"id": SID}))
    assert protocol.receive(b"\x00") is None
    created, error = _frames(protocol)
    assert error["error"]["code"] == "binary_frame_unsupported"
    assert (created["server_event_seq"], error["server_event_seq"]) == (1, 2)
    assert [orjson.loads(b) for b in journal.replay_after(0)] == [created, error]


def test_commands_go_to_the_engine_and_acks_trim_the_journal() -> None:
    protocol, journal = _opened()
    for _ in range(3):
        protocol.deliver(_delta("r1"))
    _frames(protocol)
    request = protocol.receive('{"type":"input_audio_buffer.clear"}')
    assert isinstance(request, ClientCommand)
    assert request.command.type == "input_audio_buffer.clear"
    assert protocol.receive('{"type":"session.event_ack","server_event_seq":2}') is None
    assert len(journal) == 1 and _frames(protocol) == []
    assert protocol.receive('{"type":"session.event_ack","server_event_seq":9}') is None
    (error,) = _frames(protocol)
    assert error["error"]["code"] == "invalid_event_ack"


def test_a_cancelled_response_overtakes_its_unsent_audio_without_a_hole() -> None:
    dropped: list[int] = []
    protocol, journal = _opened(on_dropped=dropped.append)
    protocol.deliver(_delta("r1"))
    first = protocol.next_frame()  # on the wire before the cancel
    assert isinstance(first, Frame)
    for _ in range(5):
        protocol.deliver(_delta("r1"))
    protocol.deliver(_delta("r2"))
    protocol.deliver(ev.ResponseDone(response={"id": "r1", "status": "cancelled"}))
    rest = _frames(protocol)
    assert [(f["type"], f.get("response_id")) for f in rest] == [
        ("response.output_audio.delta", "r2"),
        ("response.done", "r1"),
    ]
    assert [f["server_event_seq"] for f in rest] == [2, 3] and journal.head == 3
    assert dropped == [5]


def test_a_plain_connection_never_sees_our_event_types() -> None:
    plain, _ = _opened()
    plain.deliver(ev.SessionHeartbeatAck(session_id=SID))
    assert _frames(plain) == []
    extended, _ = _opened({"duplex": "1"})
    extended.deliver(ev.SessionHeartbeatAck(session_id=SID))
    assert [f["type"] for f in _frames(extended)] == ["session.heartbeat_ack"]


def test_once_abandoned_what_waited_and_what_follows_is_journaled_in_order() -> None:
    protocol, journal = _opened()
    protocol.deliver(_delta("r1"))
    protocol.deliver(_delta("r1"))
    protocol.abandon()
    assert protocol.closed and protocol.next_frame() is None
    protocol.deliver(ev.ResponseDone(response={"id": "r1", "status": "completed"}))
    replay = [orjson.loads(b) for b in journal.replay_after(0)]
    assert [e["type"] for e in replay] == ["response.output_audio.delta"] * 2 + ["response.done"]
    assert [e["server_event_seq"] for e in replay] == [1, 2, 3]


def test_a_resume_sends_resumed_then_the_replay_then_live_events() -> None:
    journal = _journal()
    old, _ = _protocol(), None
    old.receive('{"type":"session.update","session":{}}')
    old.opened(SID, journal, public_session={"id": SID})
    old.deliver(_delta("r1"))
    old.abandon()  # the socket dropped before sending it
    confirmed: list[bool] = []
    new = _protocol()
    assert isinstance(
        new.receive('{"type":"session.resume","session_id":"duplex-s","resume_token":"t"}'),
        ResumeRequest,
    )
    new.resumed(
        SID,
        journal,
        public_session={"id": SID, "turn_detection": None},
        generation=2,
        resume_token="t2",
        replay=journal.replay_after(0),
        after_resumed_sent=lambda: confirmed.append(True),
    )
    new.deliver(ev.ResponseDone(response={"id": "r1", "status": "completed"}))
    resumed = new.next_frame()
    assert isinstance(resumed, Frame) and not confirmed
    assert orjson.loads(resumed.data)["type"] == "session.resumed"
    assert resumed.after_sent is not None
    resumed.after_sent()
    replay, live = _frames(new)
    assert confirmed == [True]
    assert (replay["server_event_seq"], live["server_event_seq"]) == (1, 2)
    assert new.handshake is HandshakeState.OPEN


def test_refuse_answers_then_closes() -> None:
    protocol = _protocol()
    protocol.refuse("config_timeout", "Timeout waiting for session.update")
    error, close = _frames(protocol)
    assert error["error"]["code"] == "config_timeout"
    assert isinstance(close, CloseFrame) and close.reason == "config_timeout"
    assert protocol.closed
