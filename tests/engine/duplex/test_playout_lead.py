"""The adaptive playout lead: a session whose microphone audio arrives evenly keeps less
of a reply in the client's buffer than one whose audio arrives in bursts, never more than
``output_audio_lead_ms``, and ``output_audio_lead: fixed`` keeps exactly that.

Arrival times come from the lease clock, driven by hand here: each append is followed by
a ``session.update`` whose ``session.updated`` says it was taken (one writer per session,
in order), so the clock is moved only between appends, never by sleeping.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from duplex_helpers import (
    EventReader,
    append,
    command,
    commit,
    deployment,
    is_type,
    response_done,
    sine_pcm16,
)

from omniduplex.engine.duplex.session.arrival_jitter import (
    LEAD_FLOOR_MS,
    SETTLED_AFTER,
    ArrivalJitter,
)
from omniduplex.entrypoints.duplex_omni import DuplexOmni

CEILING_MS = 300
CHUNK_MS = 100
UNIT_MS = 100  # loopback's unit


class ManualClock:
    """The lease clock; moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def steady(count: int, spacing_s: float = 0.1, wobble_s: float = 0.0) -> list[float]:
    """Arrival times of ``count`` appends ``spacing_s`` apart, alternately early and late."""
    return [i * spacing_s + (wobble_s if i % 2 else -wobble_s) for i in range(count)]


def bursts(count: int, size: int = 5) -> list[float]:
    """Appends that arrive ``size`` at a time, as a client whose sender stalls does."""
    return [(i // size) * size * CHUNK_MS / 1000 for i in range(count)]


def jitter_after(arrivals: list[float]) -> ArrivalJitter:
    jitter = ArrivalJitter()
    for at in arrivals:
        jitter.observe(at, CHUNK_MS / 1000)
    return jitter


def test_until_the_estimate_settles_the_configured_lead_holds() -> None:
    assert jitter_after(steady(SETTLED_AFTER)).lead_ms(CEILING_MS) == CEILING_MS
    assert jitter_after(steady(SETTLED_AFTER + 1)).lead_ms(CEILING_MS) == LEAD_FLOOR_MS


def test_the_lead_grows_with_the_jitter_and_stays_within_floor_and_ceiling() -> None:
    leads = [
        jitter_after(steady(200, wobble_s=w)).lead_ms(CEILING_MS)
        for w in (0.0, 0.005, 0.01, 0.02, 0.04)
    ]
    assert leads == sorted(leads)
    assert leads[0] == LEAD_FLOOR_MS
    assert LEAD_FLOOR_MS < leads[2] < CEILING_MS
    assert leads[-1] == CEILING_MS
    assert jitter_after(bursts(200)).lead_ms(CEILING_MS) == CEILING_MS
    # A ceiling below the floor is the ceiling: a deployment that asked for less gets it.
    assert jitter_after(steady(200)).lead_ms(40) == 40


def test_a_pause_in_sending_is_not_jitter() -> None:
    # Two even spurts with a 30 s pause between them (push-to-talk, a reconnect).
    arrivals = steady(40) + [30 + at for at in steady(40)]
    assert jitter_after(arrivals).lead_ms(CEILING_MS) == LEAD_FLOOR_MS


async def _stream(
    handle: Any, reader: EventReader, clock: ManualClock, arrivals: list[float]
) -> dict[str, Any]:
    """One append per arrival time, each taken before the clock moves on; the session
    object after the last."""
    start = clock.now
    updated: Any = None
    for at in arrivals:
        clock.now = start + at
        handle.submit(append(sine_pcm16(CHUNK_MS)))
        handle.submit(command({"type": "session.update", "session": {}}))
        updated = (await reader.until(is_type("session.updated")))[-1]
    return updated.session


async def _lead_after(arrivals: list[float], settings: dict[str, Any]) -> dict[str, Any]:
    clock = ManualClock()
    async with DuplexOmni(deployment("loopback-fast"), clock=clock) as omni:
        handle = await omni.open_session({"turn_detection": None, **settings})
        reader = EventReader(handle)
        await reader.until(is_type("session.created"))
        session = await _stream(handle, reader, clock, arrivals)
        await handle.close()
    return session


@pytest.mark.parametrize(
    ("arrivals", "expected"),
    [(steady(30), LEAD_FLOOR_MS), (bursts(30), CEILING_MS)],
    ids=["steady", "bursty"],
)
async def test_a_session_keeps_the_lead_its_arrivals_need(
    arrivals: list[float], expected: int
) -> None:
    session = await _lead_after(arrivals, {"output_audio_lead_ms": CEILING_MS})
    assert session["output_audio_lead"] == "adaptive"
    assert session["output_audio_lead_now_ms"] == expected


async def test_a_reply_after_even_arrivals_is_released_with_the_smaller_lead() -> None:
    clock = ManualClock()
    async with DuplexOmni(deployment("loopback-fast"), clock=clock) as omni:
        handle = await omni.open_session(
            {
                "turn_detection": None,
                "output_audio_pacing": "realtime",
                "output_audio_lead_ms": CEILING_MS,
            }
        )
        reader = EventReader(handle)
        await reader.until(is_type("session.created"))
        lead = await _stream(handle, reader, clock, steady(SETTLED_AFTER + 4))
        asked_at = time.monotonic()  # the playout cannot have started before this
        handle.submit(commit())
        received_ms, ahead_ms = 0.0, []
        while True:
            event = await reader.next()
            if event.type == "response.output_audio.delta":
                received_ms += len(base64.b64decode(event.delta)) / 2 / event.sample_rate_hz * 1e3
                ahead_ms.append(received_ms - (time.monotonic() - asked_at) * 1000)
            if response_done()(event):
                break
        await handle.close()
    assert lead["output_audio_lead_now_ms"] == LEAD_FLOOR_MS
    assert received_ms == pytest.approx((SETTLED_AFTER + 4) * CHUNK_MS, abs=1)
    # What has arrived is never further ahead of real time than the lead and one unit:
    # a machine that is slow only makes it less.
    assert max(ahead_ms) <= LEAD_FLOOR_MS + UNIT_MS


async def test_a_fixed_lead_ignores_the_arrivals() -> None:
    session = await _lead_after(
        steady(30), {"output_audio_lead_ms": CEILING_MS, "output_audio_lead": "fixed"}
    )
    assert session["output_audio_lead_now_ms"] == CEILING_MS


async def test_an_unknown_lead_policy_is_refused_and_the_session_goes_on() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session()
        reader = EventReader(handle)
        await reader.until(is_type("session.created"))
        handle.submit(
            command({"type": "session.update", "session": {"output_audio_lead": "smart"}})
        )
        error = (await reader.until(is_type("error")))[-1]
        handle.submit(command({"type": "session.update", "session": {}}))
        updated = (await reader.until(is_type("session.updated")))[-1]
        await handle.close()
    assert error.code == "invalid_session_config"
    assert error.param == "output_audio_lead"
    assert updated.session["output_audio_lead"] == "adaptive"
