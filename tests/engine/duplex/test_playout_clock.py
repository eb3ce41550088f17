"""The playout clock alone, on a hand-driven clock: release, played position, acks, cut."""

from __future__ import annotations

from omniduplex.engine.duplex.session.playout import AudioUnit, PlayoutClock


class ManualClock:
    """A clock the test moves (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms / 1000.0


def _units(count: int, unit_ms: int = 100) -> list[AudioUnit]:
    return [AudioUnit(f"a{k}", f"w{k} ", (k + 1) * unit_ms) for k in range(count)]


def _paced(lead_ms: int = 300) -> tuple[PlayoutClock, ManualClock]:
    clock = ManualClock()
    playout = PlayoutClock(clock)
    playout.begin("r1", paced=True, lead_ms=lead_ms)
    return playout, clock


def test_a_reply_generated_at_once_leaves_at_real_time_plus_the_lead() -> None:
    playout, clock = _paced(lead_ms=300)
    for unit in _units(60):  # 6 s of audio, all generated now
        playout.push(unit)
    first = playout.release()
    # At once: the units that start within the lead (0, 100, 200, 300 ms).
    assert [u.end_ms for u in first] == [100, 200, 300, 400]
    assert playout.next_due() == clock.now + 0.1
    sent = 400
    for _ in range(56):
        clock.advance(100)
        released = playout.release()
        assert len(released) == 1
        sent = released[0].end_ms
        # Never more than lead + one unit ahead of the real-time position.
        assert sent - playout.played_ms() <= 300 + 100
    assert sent == 6000 and not playout.pending and playout.next_due() is None


def test_the_played_position_follows_time_and_never_passes_what_was_released() -> None:
    playout, clock = _paced()
    assert playout.played_ms() == 0 and not playout.started
    for unit in _units(2):
        playout.push(unit)
    playout.release()
    clock.advance(150)
    assert playout.played_ms() == 150 and playout.playing
    clock.advance(1000)
    assert playout.played_ms() == 200 and not playout.playing  # all of it played
    assert playout.played_out_at() == clock.now - 1.15 + 0.2


def test_an_ack_behind_moves_the_position_back_and_one_beyond_is_clamped() -> None:
    playout, clock = _paced()
    for unit in _units(10):
        playout.push(unit)
    playout.release()
    clock.advance(300)
    assert playout.played_ms() == 300
    assert playout.acknowledge(180) == 180  # a jitter buffer: the client is behind
    assert playout.played_ms() == 180
    clock.advance(50)
    assert playout.played_ms() == 230
    playout.release()
    assert playout.acknowledge(99_000) == playout.released_ms  # more than was sent


def test_cut_drops_what_was_not_released_and_freezes_the_position() -> None:
    playout, clock = _paced()
    for unit in _units(30):
        playout.push(unit)
    playout.release()
    clock.advance(1500)
    playout.release()
    assert playout.cut() == 1500
    assert not playout.pending and playout.release() == []
    clock.advance(1000)
    assert playout.played_ms() == 1500 and not playout.playing
    assert playout.played_out_at() is None


def test_unpaced_releases_everything_at_once_and_makes_no_estimate() -> None:
    clock = ManualClock()
    playout = PlayoutClock(clock)
    playout.begin("r1", paced=False, lead_ms=300)
    for unit in _units(60):
        playout.push(unit)
    assert len(playout.release()) == 60
    assert not playout.paced and playout.next_due() is None and not playout.playing


def test_a_new_response_starts_from_nothing() -> None:
    playout, clock = _paced()
    for unit in _units(5):
        playout.push(unit)
    playout.release()
    clock.advance(200)
    playout.cut()
    playout.begin("r2", paced=True, lead_ms=300)
    assert playout.response_id == "r2" and playout.played_ms() == 0
    assert not playout.started and playout.released_ms == 0 and not playout.pending


def test_a_held_playout_releases_nothing_and_its_position_stops_at_what_was_released() -> None:
    playout, clock = _paced(lead_ms=300)
    for unit in _units(30):
        playout.push(unit)
    assert [u.end_ms for u in playout.release()] == [100, 200, 300, 400]
    clock.advance(50)
    playout.hold()
    assert playout.next_due() is None  # the runner's timer is not re-armed
    for _ in range(20):  # two seconds of held playout
        clock.advance(100)
        assert playout.release() == []
    # The client played what it held (the lead plus a unit) and then nothing.
    assert playout.played_ms() == 400 and not playout.playing


def test_a_resumed_playout_goes_on_where_it_paused_losing_nothing() -> None:
    playout, clock = _paced(lead_ms=300)
    for unit in _units(30):
        playout.push(unit)
    sent = [u.end_ms for u in playout.release()]
    playout.hold()
    clock.advance(2000)
    assert playout.release() == []
    playout.resume()
    # The 1.6 s the client waited in silence are not counted as played: the next units
    # are released as at the start, within the lead of the end of what was heard.
    assert playout.played_ms() == 400
    sent += [u.end_ms for u in playout.release()]
    assert sent == [100, 200, 300, 400, 500, 600, 700, 800]
    while playout.pending:
        clock.advance(100)
        sent += [u.end_ms for u in playout.release()]
    assert sent == [100 * (k + 1) for k in range(30)]  # every unit, in order, once


def test_resuming_before_the_client_drained_keeps_the_clock() -> None:
    playout, clock = _paced(lead_ms=300)
    for unit in _units(30):
        playout.push(unit)
    playout.release()
    playout.hold()
    clock.advance(80)
    assert playout.release() == []
    playout.resume()
    assert playout.played_ms() == 80  # it never stopped playing
    assert playout.release() == []  # the client still holds more than the lead
    clock.advance(20)
    assert [u.end_ms for u in playout.release()] == [500]


def test_a_cut_held_playout_stays_cut_and_a_new_response_is_not_held() -> None:
    playout, clock = _paced()
    for unit in _units(10):
        playout.push(unit)
    playout.release()
    playout.hold()
    clock.advance(1000)
    assert playout.cut() == 400  # truncated at what the client played: all it held
    playout.resume()
    assert playout.played_ms() == 400 and playout.release() == []
    playout.hold()
    playout.begin("r2", paced=True, lead_ms=300)
    playout.push(_units(1)[0])
    assert [u.end_ms for u in playout.release()] == [100]
