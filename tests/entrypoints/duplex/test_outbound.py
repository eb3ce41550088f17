"""The sans-I/O outbound of one socket: order, numbering as frames leave, cancel
overtaking unsent audio, bounds, and the state machine (no socket, no loop)."""

from __future__ import annotations

import orjson
import pytest

from omniduplex.entrypoints.duplex.journal import ReplayJournal
from omniduplex.entrypoints.duplex.outbound import (
    CloseFrame,
    Frame,
    OutboundState,
    OutboundStateError,
    RealtimeOutbound,
)


def _journaled() -> tuple[RealtimeOutbound, ReplayJournal]:
    journal = ReplayJournal(max_bytes=1 << 20, ttl_s=60)
    outbound = RealtimeOutbound(max_events=8, max_bytes=1 << 20)
    outbound.bind(lambda rendered: journal.append(rendered)[1])
    return outbound, journal


def _delta(response_id: str, n: int) -> dict:
    return {"type": "response.output_audio.delta", "response_id": response_id, "delta": f"d{n}"}


def _done(response_id: str, status: str) -> dict:
    return {"type": "response.done", "response": {"id": response_id, "status": status}}


def _drain(outbound: RealtimeOutbound) -> list[Frame | CloseFrame]:
    frames = []
    while (frame := outbound.next_frame()) is not None:
        frames.append(frame)
    return frames


def test_frames_leave_in_order_and_events_are_numbered_as_they_leave() -> None:
    outbound, journal = _journaled()
    outbound.send_local(b'{"type":"local"}')
    outbound.send_event({"type": "a"})
    assert journal.head == 0  # nothing numbered while it waits
    outbound.send_event({"type": "b"})
    frames = _drain(outbound)
    assert [orjson.loads(f.data)["type"] for f in frames] == ["local", "a", "b"]
    assert [orjson.loads(f.data).get("server_event_seq") for f in frames] == [None, 1, 2]


def test_a_cancelled_done_overtakes_its_unsent_audio_without_a_hole() -> None:
    outbound, journal = _journaled()
    dropped: list[int] = []
    outbound.bind(lambda r: journal.append(r)[1], on_dropped=dropped.append)
    outbound.send_event(_delta("resp_1", 0))
    first = outbound.next_frame()  # already on the socket: it stays sent
    for n in range(1, 4):
        outbound.send_event(_delta("resp_1", n))
    outbound.send_event(_delta("resp_2", 0))  # another response's audio is kept
    outbound.send_event(_done("resp_1", "cancelled"))
    rest = [orjson.loads(f.data) for f in _drain(outbound)]
    assert isinstance(first, Frame) and orjson.loads(first.data)["delta"] == "d0"
    assert [(e["type"], e.get("response_id")) for e in rest] == [
        ("response.output_audio.delta", "resp_2"),
        ("response.done", None),
    ]
    assert [e["server_event_seq"] for e in rest] == [2, 3]
    assert dropped == [3]


def test_a_completed_done_drops_nothing() -> None:
    outbound, _ = _journaled()
    outbound.send_event(_delta("resp_1", 0))
    outbound.send_event(_done("resp_1", "completed"))
    assert len(_drain(outbound)) == 2


def test_going_over_the_bound_is_reported() -> None:
    outbound, _ = _journaled()
    over = [outbound.send_event({"type": f"e{n}"}) for n in range(9)]
    assert over == [False] * 8 + [True]


def test_a_replay_is_not_charged_against_the_bound() -> None:
    # A resume's replay may be as large as the journal; its bytes are the journal's.
    outbound = RealtimeOutbound(max_events=8, max_bytes=1024)
    replay = [orjson.dumps({"type": "old", "n": n, "pad": "x" * 200}) for n in range(50)]
    assert not any([outbound.send_replay(data) for data in replay])
    assert not outbound.backlogged
    assert not outbound.send_local(b'{"type":"live"}')
    frames = _drain(outbound)
    assert [f.data for f in frames] == [*replay, b'{"type":"live"}']
    # live frames still count: past the bound is reported, past half is a backlog
    outbound.send_local(b"y" * 600)
    assert outbound.backlogged
    assert outbound.send_local(b"y" * 600)


def test_events_behind_a_replay_wait_as_the_journals_bytes() -> None:
    # A client catching up on a long replay is not let go for the live events that pile
    # up behind it: they are numbered at once and bounded by the journal's bound.
    journal = ReplayJournal(max_bytes=1 << 20, ttl_s=60)
    outbound = RealtimeOutbound(max_events=8, max_bytes=1024, max_replay_bytes=4096)
    replay = [b'{"type":"old"}'] * 3
    for data in replay:
        outbound.send_replay(data)
    outbound.bind(lambda rendered: journal.append(rendered)[1])
    over = [outbound.send_event({"type": "live", "pad": "x" * 300}) for _ in range(5)]
    assert not any(over)  # 1.5 KB of live events, more than max_bytes
    assert journal.head == 5  # numbered as they came, not as they leave
    assert [orjson.loads(f.data)["type"] for f in _drain(outbound)] == ["old"] * 3 + ["live"] * 5
    outbound.send_event({"type": "after"})  # caught up: numbered as it leaves again
    assert journal.head == 5 and outbound.next_frame() is not None and journal.head == 6
    # further behind than the journal keeps: reported like any other overflow
    outbound.send_replay(b"r" * 4000)
    assert outbound.send_event({"type": "live", "pad": "x" * 300})


def test_close_after_pending_sends_what_waits_then_the_close() -> None:
    outbound, _ = _journaled()
    outbound.send_event({"type": "last"})
    outbound.close_after_pending(1000, "session_closed")
    assert outbound.state is OutboundState.CLOSING
    frames = _drain(outbound)
    assert isinstance(frames[0], Frame) and frames[-1] == CloseFrame(1000, "session_closed")
    assert outbound.state is OutboundState.CLOSED


def test_abandon_numbers_what_waits_and_later_events_into_the_journal() -> None:
    outbound, journal = _journaled()
    outbound.send_event({"type": "a"})
    outbound.send_event({"type": "b"})
    outbound.abandon()
    outbound.send_event({"type": "c"})  # after the socket is gone: journaled at once
    assert outbound.next_frame() is None
    assert [orjson.loads(raw)["type"] for raw in journal.replay_after(0)] == ["a", "b", "c"]


def test_the_state_machine_refuses_what_it_does_not_have() -> None:
    outbound, _ = _journaled()
    outbound.abandon()
    assert outbound.state is OutboundState.CLOSED
    outbound.close_after_pending()  # nothing to close any more: ignored
    assert outbound.state is OutboundState.CLOSED
    with pytest.raises(OutboundStateError):
        outbound._move(OutboundState.OPEN)
