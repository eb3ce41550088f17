"""The server-wide input audio budget (``max_buffered_input_s``) and the per-turn default.

First the budget alone (``InputAudioBudget`` / ``InputAudioHold``), then over the real
engine (loopback): a session's share grows with its turn, every way audio leaves the
session gives it back (a leak would lock every session out), and an append that does not
fit is refused with ``server_input_audio_full`` while the session carries on.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest
from duplex_helpers import (
    TIMEOUT_S,
    EventReader,
    append,
    command,
    commit,
    deployment,
    dispatch_together,
    is_type,
    response_done,
    sine_pcm16,
)

from omniduplex.engine.duplex.runtime_config import DuplexSessionRuntimeConfig
from omniduplex.engine.duplex.session.input_budget import (
    InputAudioBudget,
    held_input_samples,
)
from omniduplex.entrypoints.duplex_omni import DuplexOmni

RATE = 16_000  # loopback's input rate: appends at this rate are not resampled


def silence(ms: int) -> bytes:
    return bytes(RATE * 2 * ms // 1000)


def samples(ms: int) -> int:
    return RATE * ms // 1000


# ---- the budget alone ------------------------------------------------------------------


def test_sessions_share_one_budget_and_what_does_not_fit_is_refused() -> None:
    budget = InputAudioBudget(1.0, 1000)  # 1000 samples in all
    first, second = budget.hold(), budget.hold()
    one = first.begin()
    assert first.reserve(one, 700)
    first.end(one, kept=True)
    assert first.held_samples == 700
    two = second.begin()
    assert not second.reserve(two, 301)  # 700 + 301 > 1000
    assert second.reserve(two, 300)
    assert budget.used_samples == 1000
    second.end(two, kept=False)  # refused or cancelled: given back
    assert budget.used_samples == 700
    assert second.held_samples == 0


def test_a_reservation_ends_once_and_one_ended_first_reserves_nothing() -> None:
    budget = InputAudioBudget(1.0, 1000)
    hold = budget.hold()
    kept = hold.begin()
    assert hold.reserve(kept, 400)
    hold.end(kept, kept=True)
    hold.end(kept, kept=False)  # the done callback after the accept: no-op
    assert (budget.used_samples, hold.held_samples) == (400, 400)
    # A cancelled append's callback may run before its pool thread reserves.
    cancelled = hold.begin()
    hold.end(cancelled, kept=False)
    assert not hold.reserve(cancelled, 100)
    assert budget.used_samples == 400


def test_settle_counts_what_the_session_holds_and_close_gives_everything_back() -> None:
    budget = InputAudioBudget(1.0, 1000)
    hold = budget.hold()
    in_flight = hold.begin()
    assert hold.reserve(in_flight, 200)
    hold.settle(500)  # e.g. a committed turn still to be answered
    assert budget.used_samples == 700
    hold.settle(1200)  # what a session holds is counted as it is, even past the limit
    assert budget.used_samples == 1400
    hold.settle(100)  # server VAD forgot old silence
    assert budget.used_samples == 300
    hold.close()
    assert budget.used_samples == 0
    hold.end(in_flight, kept=True)  # an append still in flight when the session ended
    hold.settle(900)
    assert not hold.reserve(hold.begin(), 1)
    assert budget.used_samples == 0


def test_no_limit_refuses_nothing() -> None:
    hold = InputAudioBudget(None, 1000).hold()
    assert hold.reserve(hold.begin(), 10**9)


def test_threads_reserving_at_once_never_pass_the_limit_and_leave_nothing() -> None:
    budget = InputAudioBudget(1.0, 1000)
    over: list[int] = []
    stop = threading.Event()

    def session(seed: int) -> None:
        rng = random.Random(seed)
        hold = budget.hold()
        for _ in range(2000):
            reservation = hold.begin()
            if hold.reserve(reservation, rng.randint(1, 300)):
                hold.end(reservation, kept=rng.random() < 0.5)
            if rng.random() < 0.3:
                hold.settle(0)  # the turn was answered or cleared
        hold.close()

    def watch() -> None:
        while not stop.is_set():
            used = budget.used_samples
            if used > 1000:
                over.append(used)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=session, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    watcher.join()
    assert over == []
    assert budget.used_samples == 0


# ---- defaults --------------------------------------------------------------------------


def test_defaults_bound_a_turn_at_two_minutes_and_fit_max_sessions_full_turns() -> None:
    config = DuplexSessionRuntimeConfig()
    assert config.max_input_turn_s == 120.0
    assert config.max_buffered_input_s >= config.max_sessions * config.max_input_turn_s
    with pytest.raises(ValueError, match="max_buffered_input_s"):
        DuplexSessionRuntimeConfig(max_buffered_input_s=0)


async def test_the_default_turn_bound_refuses_the_append_past_two_minutes() -> None:
    async with DuplexOmni(deployment()) as omni, await omni.open_session({}) as handle:
        reader = EventReader(handle)
        handle.submit(append(silence(100_000)))
        handle.submit(append(silence(21_000), event_id="evt_past_120_s"))
        handle.submit(append(silence(20_000)))  # 120 s in all: still fits
        handle.submit(commit(create_response=False))
        events = await reader.until(is_type("input_audio_buffer.committed", "error"))
        assert [(e.code, e.client_event_id) for e in events if e.type == "error"] == [
            ("input_audio_buffer_full", "evt_past_120_s")
        ]
        events += await reader.until(is_type("input_audio_buffer.committed"))
        assert events[-1].type == "input_audio_buffer.committed"


# ---- over the engine: every way audio leaves a session gives its share back ----------


async def budget_used(omni: DuplexOmni) -> int:
    return await omni.engine.call(lambda o: o.manager.input_audio_budget.used_samples)


async def until_used(omni: DuplexOmni, expected: int) -> None:
    """Wait (bounded) until the budget counts ``expected`` samples: appends decode and
    settle behind the events a test can wait for."""

    async def poll() -> None:
        while await budget_used(omni) != expected:
            await asyncio.sleep(0.005)

    try:
        await asyncio.wait_for(poll(), TIMEOUT_S)
    except TimeoutError:
        raise AssertionError(f"budget counts {await budget_used(omni)}, not {expected}") from None


async def counted_and_held(omni: DuplexOmni, session_id: str) -> tuple[int, int]:
    """What the budget counts and what the session holds, read in one loop step."""

    def read(orchestrator: Any) -> tuple[int, int]:
        manager = orchestrator.manager
        runner = manager.runners[session_id]
        return manager.input_audio_budget.used_samples, held_input_samples(runner.session)

    return await omni.engine.call(read)


async def test_a_turn_is_counted_as_it_grows_and_given_back_when_answered() -> None:
    async with DuplexOmni(deployment()) as omni, await omni.open_session({}) as handle:
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(500)))
        await until_used(omni, samples(500))
        handle.submit(append(sine_pcm16(500)))
        await until_used(omni, samples(1000))
        handle.submit(commit())
        await reader.until(response_done())
        await until_used(omni, 0)


async def test_a_cleared_turn_and_appends_cancelled_in_flight_are_given_back() -> None:
    async with DuplexOmni(deployment()) as omni, await omni.open_session({}) as handle:
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(700)))
        await until_used(omni, samples(700))
        handle.submit(command({"type": "input_audio_buffer.clear"}))
        await reader.until(is_type("input_audio_buffer.cleared"))
        await until_used(omni, 0)
        # Appends still being decoded when the clear arrives: their reservations return.
        burst = [append(sine_pcm16(400)) for _ in range(6)]
        await dispatch_together(omni, handle, *burst, command({"type": "input_audio_buffer.clear"}))
        await reader.until(is_type("input_audio_buffer.cleared"))
        await until_used(omni, 0)


async def test_a_turn_committed_without_a_response_counts_until_a_response_takes_it() -> None:
    async with DuplexOmni(deployment()) as omni, await omni.open_session({}) as handle:
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(600)))
        handle.submit(commit(create_response=False))
        await reader.until(is_type("input_audio_buffer.committed"))
        await until_used(omni, samples(600))  # committed_input: still in the engine
        handle.submit(command({"type": "response.create"}))
        await reader.until(response_done())
        await until_used(omni, 0)


async def test_a_barge_in_drops_the_turn_and_gives_it_back() -> None:
    async with DuplexOmni(deployment()) as omni, await omni.open_session({}) as handle:
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(800)))
        await until_used(omni, samples(800))
        handle.submit(command({"type": "barge_in"}))
        await reader.until(is_type("input_audio_buffer.cleared"))
        await until_used(omni, 0)


async def test_turns_committed_over_a_response_count_until_answered_or_dropped() -> None:
    # Paced loopback: a response stays in progress while its reply plays out in real time
    # (3 s here), so the turns below are committed over it.
    async with (
        DuplexOmni(deployment("loopback")) as omni,
        await omni.open_session({"turn_detection": None}) as handle,
    ):
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(3000)))
        handle.submit(commit())
        await reader.until(is_type("response.created"))
        await until_used(omni, 0)  # the response took the turn
        # A short acknowledgement over the response is dropped: nothing is held.
        handle.submit(append(sine_pcm16(300)))
        handle.submit(commit())
        decision = (await reader.until(is_type("overlap.decision")))[-1]
        assert decision.action == "drop"
        await until_used(omni, 0)
        # A longer turn waits for the response to end (deferred_commit), counted.
        handle.submit(append(sine_pcm16(1000)))
        handle.submit(commit())
        decision = (await reader.until(is_type("overlap.decision")))[-1]
        assert decision.action == "listen"
        used, held = await counted_and_held(omni, handle.session_id)
        assert used == held
        handle.submit(command({"type": "response.cancel"}))
        # The deferred turn is answered once the first response ends.
        done = [e for e in await reader.until(response_done()) if e.type == "response.done"]
        if len(done) < 2:
            await reader.until(response_done())
        await until_used(omni, 0)


async def test_a_session_that_ends_gives_back_all_it_held() -> None:
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session({})
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(600)))
        handle.submit(commit(create_response=False))  # held as committed_input
        handle.submit(append(sine_pcm16(400)))  # and an open turn
        await reader.until(is_type("input_audio_buffer.committed"))
        await until_used(omni, samples(1000))
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
        assert await budget_used(omni) == 0


async def test_server_vad_counts_only_the_silence_a_turn_keeps() -> None:
    vad = {"type": "server_vad", "prefix_padding_ms": 300, "silence_duration_ms": 300}
    async with (
        DuplexOmni(deployment()) as omni,
        await omni.open_session({"turn_detection": vad}) as handle,
    ):
        for _ in range(20):
            handle.submit(append(silence(1000)))
        handle.submit(command({"type": "session.update", "session": {}}))
        await EventReader(handle).until(is_type("session.updated"))
        used, held = await counted_and_held(omni, handle.session_id)
        assert used == held
        assert used <= 2 * samples(300 + 500)  # padding and the detector's lag, twice


# ---- the refusal -----------------------------------------------------------------------


async def test_a_full_server_budget_refuses_other_sessions_typed_until_it_frees() -> None:
    async with (
        DuplexOmni(deployment(max_buffered_input_s=1.0)) as omni,
        await omni.open_session({}) as first,
        await omni.open_session({}) as second,
    ):
        one, two = EventReader(first), EventReader(second)
        first.submit(append(sine_pcm16(900)))
        await until_used(omni, samples(900))
        second.submit(append(sine_pcm16(300), event_id="evt_no_room"))
        error = (await two.until(is_type("error")))[-1]
        assert (error.code, error.client_event_id) == ("server_input_audio_full", "evt_no_room")
        assert error.resolved_error_class() == "rate_limit_error"
        assert error.extra == {"retryable": True}
        assert await budget_used(omni) == samples(900)  # the refused append took nothing
        # Refused, not kept: the second session's buffer is still empty, and it carries on.
        second.submit(commit(event_id="evt_empty"))
        error = (await two.until(is_type("error")))[-1]
        assert (error.code, error.client_event_id) == (
            "input_audio_buffer_commit_empty",
            "evt_empty",
        )
        first.submit(command({"type": "input_audio_buffer.clear"}))
        await one.until(is_type("input_audio_buffer.cleared"))
        second.submit(append(sine_pcm16(300)))
        second.submit(commit(create_response=False))
        events = await two.until(is_type("input_audio_buffer.committed", "error"))
        assert events[-1].type == "input_audio_buffer.committed"


@pytest.mark.parametrize("seed", [17, 18, 19])
async def test_commands_at_random_leave_the_budget_equal_to_what_sessions_hold(
    seed: int,
) -> None:
    # Bursts reach a session in one loop step, so clears and barge-ins land on appends
    # still being decoded (reserved, not yet in the turn) as well as on settled ones.
    rng = random.Random(seed)

    def random_command() -> Any:
        roll = rng.random()
        if roll < 0.5:
            pcm = sine_pcm16(rng.choice([100, 300, 800])) if rng.random() < 0.7 else silence(200)
            return append(pcm)
        if roll < 0.65:
            return commit(create_response=rng.random() < 0.6)
        if roll < 0.75:
            return command({"type": "input_audio_buffer.clear"})
        if roll < 0.85:
            return command({"type": "response.create"})
        if roll < 0.93:
            return command({"type": "response.cancel"})
        return command({"type": "barge_in"})

    async with DuplexOmni(deployment(max_buffered_input_s=3.0)) as omni:
        handles = [await omni.open_session({}) for _ in range(2)]
        for _ in range(60):
            handle = rng.choice(handles)
            burst = [random_command() for _ in range(rng.randint(1, 4))]
            await dispatch_together(omni, handle, *burst)
            await asyncio.sleep(rng.choice([0, 0, 0.002, 0.01]))
        for handle in handles:
            handle.submit(command({"type": "response.cancel"}))

        def settled(orchestrator: Any) -> bool:
            runners = orchestrator.manager.runners.values()
            held = sum(held_input_samples(r.session) for r in runners)
            idle = all(
                r.session.response is None and not r.input_busy and r._mailbox.empty()
                for r in runners
            )
            return idle and orchestrator.manager.input_audio_budget.used_samples == held

        async def poll() -> None:
            while not await omni.engine.call(settled):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(poll(), TIMEOUT_S)
        for handle in handles:
            await asyncio.wait_for(handle.close(), TIMEOUT_S)
        assert await budget_used(omni) == 0
