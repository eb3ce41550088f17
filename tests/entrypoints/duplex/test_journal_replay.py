"""ReplayJournal: numbering, exact replay, gaps, acks, TTL and byte trimming."""

from __future__ import annotations

import sys

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniduplex.entrypoints.duplex.journal import (
    ENTRY_OVERHEAD_BYTES,
    InvalidEventAck,
    JournalAhead,
    JournalGap,
    ReplayJournal,
)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _event(i: int, pad: int = 0) -> dict:
    return {"type": "response.output_audio.delta", "event_id": f"event_{i:032x}", "n": "x" * pad}


def _filled(n: int, **kwargs) -> tuple[ReplayJournal, list[bytes]]:
    journal = ReplayJournal(**{"max_bytes": 1 << 20, "ttl_s": 60.0, "clock": FakeClock(), **kwargs})
    return journal, [journal.append(_event(i))[1] for i in range(1, n + 1)]


# ---- numbering --------------------------------------------------------------------------


def test_seq_starts_at_one_and_counts_every_event() -> None:
    journal = ReplayJournal(1 << 20, 60.0, FakeClock())
    created = {"type": "session.created", "event_id": "event_a", "session": {}}
    seq, encoded = journal.append(created)
    assert seq == 1 and journal.head == 1
    assert orjson.loads(encoded)["server_event_seq"] == 1
    assert created["server_event_seq"] == 1  # stamped into the rendered dict
    assert [journal.append(_event(i))[0] for i in range(2, 6)] == [2, 3, 4, 5]


def test_bytes_are_the_stamped_event_and_keep_its_event_id() -> None:
    journal = ReplayJournal(1 << 20, 60.0, FakeClock())
    event = _event(7)
    _, encoded = journal.append(event)
    assert orjson.loads(encoded) == {**_event(7), "server_event_seq": 1}
    assert journal.replay_after(0) == [encoded]


# ---- replay -----------------------------------------------------------------------------


@pytest.mark.parametrize("last_seq", [0, 1, 5, 9, 10])
def test_replay_after_is_exact_and_in_order(last_seq: int) -> None:
    journal, sent = _filled(10)
    assert journal.replay_after(last_seq) == sent[last_seq:]


def test_replay_ahead_of_head_is_a_conflict() -> None:
    journal, _ = _filled(3)
    with pytest.raises(JournalAhead) as info:
        journal.replay_after(4)
    assert info.value.code == "session_resume_conflict"


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True, None])
def test_replay_of_a_non_seq_is_refused(bad) -> None:
    journal, _ = _filled(3)
    with pytest.raises(JournalAhead):
        journal.replay_after(bad)


def test_replay_after_trimmed_events_is_a_gap() -> None:
    journal, sent = _filled(10)
    journal.ack(4)
    assert journal.replay_after(4) == sent[4:]
    with pytest.raises(JournalGap) as info:
        journal.replay_after(3)
    assert info.value.reason == "journal_gap"


# ---- acks -------------------------------------------------------------------------------


def test_ack_trims_through_seq_and_is_idempotent() -> None:
    journal, sent = _filled(10)
    assert journal.ack(6) == 6
    assert journal.floor == 6 and len(journal) == 4
    assert journal.ack(6) == 0
    assert journal.ack(2) == 0  # below what is already gone: a no-op
    assert journal.replay_after(6) == sent[6:]
    assert journal.ack(10) == 4 and len(journal) == 0 and journal.retained_bytes == 0
    assert journal.replay_after(10) == []


@pytest.mark.parametrize("bad", [-1, 11, 2.0, "3", True, None])
def test_invalid_ack_has_its_code(bad) -> None:
    journal, _ = _filled(10)
    with pytest.raises(InvalidEventAck) as info:
        journal.ack(bad)
    assert info.value.code == "invalid_event_ack"
    assert len(journal) == 10


# ---- TTL and bytes ----------------------------------------------------------------------


def test_ttl_trims_oldest_first() -> None:
    clock = FakeClock()
    journal = ReplayJournal(1 << 20, 10.0, clock)
    early = [journal.append(_event(i))[1] for i in range(1, 4)]
    clock.advance(6)
    late = [journal.append(_event(i))[1] for i in range(4, 7)]
    clock.advance(4)  # the first three are now exactly ttl old
    assert journal.trim() == 3
    assert journal.floor == 3
    assert journal.replay_after(3) == late
    with pytest.raises(JournalGap):
        journal.replay_after(2)
    assert early  # they were sent live; only the journal let them go


def test_ttl_is_applied_when_a_resume_asks() -> None:
    clock = FakeClock()
    journal = ReplayJournal(1 << 20, 10.0, clock)
    journal.append(_event(1))
    clock.advance(11)
    with pytest.raises(JournalGap):
        journal.replay_after(0)
    assert journal.replay_after(1) == []  # a client that has everything needs nothing


def test_byte_cap_trims_oldest_first() -> None:
    one = len(orjson.dumps({**_event(1, pad=100), "server_event_seq": 1})) + ENTRY_OVERHEAD_BYTES
    journal = ReplayJournal(one * 3 + 10, 60.0, FakeClock())
    sent = [journal.append(_event(i, pad=100))[1] for i in range(1, 7)]
    assert len(journal) == 3 and journal.floor == 3
    assert journal.retained_bytes <= journal.max_bytes
    assert journal.replay_after(3) == sent[3:]
    with pytest.raises(JournalGap):
        journal.replay_after(2)


def test_an_event_bigger_than_the_cap_is_numbered_but_not_kept() -> None:
    journal = ReplayJournal(2000, 60.0, FakeClock())
    journal.append(_event(1))
    seq, encoded = journal.append(_event(2, pad=5000))
    assert seq == 2 and orjson.loads(encoded)["server_event_seq"] == 2
    assert len(journal) == 0 and journal.floor == 2
    assert journal.replay_after(2) == []
    with pytest.raises(JournalGap):
        journal.replay_after(1)
    assert journal.append(_event(3))[0] == 3
    assert len(journal.replay_after(2)) == 1


def test_zero_cap_numbers_without_keeping() -> None:
    journal = ReplayJournal(0, 60.0, FakeClock())
    assert [journal.append(_event(i))[0] for i in range(1, 4)] == [1, 2, 3]
    assert len(journal) == 0 and journal.retained_bytes == 0
    assert journal.replay_after(3) == []


def test_memory_stays_bounded_under_10k_events() -> None:
    cap = 64 * 1024
    clock = FakeClock()
    journal = ReplayJournal(cap, 60.0, clock)
    sent = []
    for i in range(1, 10_001):
        clock.advance(0.001)
        sent.append(journal.append(_event(i, pad=i % 200))[1])
        assert journal.retained_bytes <= cap
    assert journal.head == 10_000
    kept = journal.replay_after(journal.floor)
    assert kept == sent[journal.floor :]
    # What is really held: the entries' bytes objects and tuples stay within the cap.
    held = sum(sys.getsizeof(b) + sys.getsizeof((0.0, b)) for b in kept)
    assert held <= cap
    assert journal.retained_bytes == sum(len(b) + ENTRY_OVERHEAD_BYTES for b in kept)


def test_constructor_validates_limits() -> None:
    with pytest.raises(ValueError):
        ReplayJournal(-1, 60.0)
    with pytest.raises(ValueError):
        ReplayJournal(100, 0)


# ---- property: replay after the last seen seq rebuilds the stream exactly ---------------


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=300),
    data=st.data(),
)
def test_any_drop_point_replays_the_rest_exactly(total: int, data) -> None:
    journal, sent = _filled(total)
    acked = data.draw(st.integers(min_value=0, max_value=total), label="acked")
    seen = data.draw(st.integers(min_value=acked, max_value=total), label="seen")
    journal.ack(acked)
    received = sent[:seen] + journal.replay_after(seen)
    assert received == sent
    seqs = [orjson.loads(b)["server_event_seq"] for b in received]
    assert seqs == list(range(1, total + 1))
