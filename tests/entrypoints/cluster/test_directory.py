"""The session directory: placement, location, replica death and restart (no Ray)."""

from __future__ import annotations

from omniduplex.entrypoints.cluster.directory import SessionDirectory


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _two(clock: Clock | None = None) -> SessionDirectory:
    directory = SessionDirectory(pending_ttl_s=30.0, clock=clock)
    directory.register("r0", max_sessions=2, incarnation="a")
    directory.register("r1", max_sessions=2, incarnation="b")
    return directory


def test_new_sessions_go_where_there_is_room_and_are_found_there() -> None:
    directory = _two()
    first, second = directory.place(), directory.place()
    assert first is not None and second is not None
    assert {first.replica, second.replica} == {"r0", "r1"}
    directory.opened(first.replica, "s1", first.ticket)
    directory.opened(second.replica, "s2", second.ticket)
    assert directory.locate("s1") == first.replica
    assert directory.locate("s2") == second.replica
    directory.ended(first.replica, "s1")
    assert directory.locate("s1") is None
    assert directory.view().sessions == 1


def test_full_only_when_every_replica_is_full() -> None:
    directory = _two()
    placements = [directory.place() for _ in range(4)]
    assert all(p is not None and not p.full for p in placements)
    fifth = directory.place()
    assert fifth is not None and fifth.full  # the engine decides: evict or refuse


def test_a_settled_or_stale_ticket_frees_its_slot() -> None:
    clock = Clock()
    directory = _two(clock)
    tickets = [directory.place() for _ in range(4)]
    assert tickets[0] is not None
    directory.settle(tickets[0].replica, tickets[0].ticket)
    extra = directory.place()
    assert extra is not None and not extra.full
    clock.now = 31.0
    assert all(r.pending == 0 for r in directory.view().replicas)


def test_a_dead_replica_leaves_admission_and_its_restart_comes_back_empty() -> None:
    directory = _two()
    directory.opened("r0", "s1")
    assert directory.failed("r0", "old-incarnation") is False  # not the one recorded
    assert directory.failed("r0", "a") is True
    assert directory.locate("s1") is None
    assert directory.view().live == 1
    assert {directory.place().replica for _ in range(3)} == {"r1"}  # type: ignore[union-attr]
    directory.register("r0", max_sessions=2, incarnation="a2")
    assert directory.view().live == 2
    assert directory.locate("s1") is None


def test_no_live_replica_no_placement() -> None:
    directory = _two()
    directory.failed("r0")
    directory.failed("r1")
    assert directory.place() is None


def test_snapshots_and_reports_converge_whatever_their_order() -> None:
    directory = SessionDirectory()
    directory.register("r0", max_sessions=4, incarnation="a", version=0)
    directory.opened("r0", "s1", version=1)
    directory.opened("r0", "s2", version=2)
    # A probe's snapshot taken before s2 opened arrives late: it changes nothing.
    directory.register("r0", max_sessions=4, incarnation="a", sessions=["s1"], version=1)
    assert directory.locate("s2") == "r0"
    # A snapshot taken after s1 ended, before its report arrived, applies; the late
    # report of an older open cannot bring s1 back.
    directory.register("r0", max_sessions=4, incarnation="a", sessions=["s2"], version=3)
    directory.ended("r0", "s1", version=3)
    directory.opened("r0", "s1", version=1)
    assert directory.locate("s1") is None
    assert directory.view().sessions == 1
