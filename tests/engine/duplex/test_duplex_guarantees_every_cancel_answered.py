"""DESIGN decision 6, "every cancel is answered", through the real engine.

* ``response.cancel`` with nothing active is ``response_cancel_not_active`` whatever its
  ``response_id``; one naming a response that is not the active one is refused the same
  way and leaves the active response alone; one naming the active response cancels it.
* ``barge_in`` / ``input.cancel`` emit what they cancelled: the response
  (``response.done`` cancelled) and, when input was in flight too, the input
  (``input_audio_buffer.cleared``), whose audio then never reaches a commit.

Interleavings are made exact with the paced loopback plugin (a 2 s utterance answers over
about 2 s, so the response is still active when the next command arrives) and
``dispatch_together`` (the append is still in flight when the cancel is handled).
"""

from __future__ import annotations

import pytest
from duplex_helpers import (
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

from omniduplex.entrypoints.duplex_omni import DuplexOmni


async def test_response_cancel_naming_a_response_with_nothing_active_is_refused():
    async with DuplexOmni(deployment("loopback-fast")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        # A response that finished: naming it later must not count as "active".
        handle.submit(append(sine_pcm16(300)))
        handle.submit(commit())
        finished = (await reader.until(response_done()))[-1]
        assert finished.response["status"] == "completed"

        for event_id, response_id in (
            ("evt_old", finished.response_id),
            ("evt_unknown", "resp_never_existed"),
            ("evt_bare", None),
        ):
            cancel = {"type": "response.cancel", "event_id": event_id}
            if response_id is not None:
                cancel["response_id"] = response_id
            handle.submit(command(cancel))
            events = await reader.until(is_type("error"))
            error = events[-1]
            assert error.code == "response_cancel_not_active", (event_id, error)
            assert error.client_event_id == event_id
            assert not [e for e in events if e.type == "response.done"]


async def test_response_cancel_naming_another_response_leaves_the_active_one_alone():
    async with DuplexOmni(deployment("loopback")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(300)))
        handle.submit(commit())
        first = (await reader.until(response_done()))[-1]

        handle.submit(append(sine_pcm16(2000)))
        handle.submit(commit())
        delta = (await reader.until(is_type("response.output_audio.delta")))[-1]
        active = delta.response_id
        assert active != first.response_id

        handle.submit(
            command(
                {
                    "type": "response.cancel",
                    "event_id": "evt_stale",
                    "response_id": first.response_id,
                }
            )
        )
        error = (await reader.until(is_type("error")))[-1]
        assert error.code == "response_cancel_not_active"
        assert error.client_event_id == "evt_stale"
        # The active response was not touched: it runs to completion in its epoch.
        done = (await reader.until(response_done(active)))[-1]
        assert done.response["status"] == "completed"
        assert done.epoch == delta.epoch


async def test_response_cancel_naming_the_active_response_cancels_it():
    async with DuplexOmni(deployment("loopback")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(2000)))
        handle.submit(commit())
        active = (await reader.until(is_type("response.output_audio.delta")))[-1].response_id
        handle.submit(command({"type": "response.cancel", "response_id": active}))
        events = await reader.until(response_done(active))
        assert events[-1].response["status"] == "cancelled"
        assert not [e for e in events if e.type == "error"]


@pytest.mark.parametrize("cancel_type", ["barge_in", "input.cancel"])
async def test_a_cancel_that_finds_a_response_and_input_in_flight_answers_both(cancel_type):
    async with DuplexOmni(deployment("loopback")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(2000)))
        handle.submit(commit())
        active = (await reader.until(is_type("response.output_audio.delta")))[-1].response_id

        # The append is still in flight (tracked, not yet decoded) when the cancel is
        # handled in the same step of the orchestrator loop.
        await dispatch_together(
            omni,
            handle,
            append(sine_pcm16(1000), event_id="evt_in_flight"),
            command({"type": cancel_type, "event_id": "evt_cancel"}),
        )
        events = await reader.until(is_type("input_audio_buffer.cleared"))
        done = next(e for e in reader.seen if response_done(active)(e))
        assert done.response["status"] == "cancelled"
        cleared = events[-1]
        assert cleared.epoch == done.epoch

        # What the cancel dropped never reaches a commit: the buffer is empty.
        handle.submit(commit(event_id="evt_commit"))
        error = (await reader.until(is_type("error")))[-1]
        assert error.code == "input_audio_buffer_commit_empty"
        assert error.client_event_id == "evt_commit"
        assert [e.type for e in reader.seen].count("input_audio_buffer.committed") == 1


@pytest.mark.parametrize("cancel_type", ["barge_in", "input.cancel"])
async def test_a_cancel_that_finds_only_input_in_flight_answers_it(cancel_type):
    async with DuplexOmni(deployment("loopback-fast")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        await dispatch_together(
            omni,
            handle,
            append(sine_pcm16(1000)),
            command({"type": cancel_type, "event_id": "evt_cancel"}),
        )
        cleared = (await reader.until(is_type("input_audio_buffer.cleared")))[-1]
        assert cleared.epoch == 1
        handle.submit(commit(event_id="evt_commit"))
        events = await reader.until(is_type("error"))
        assert events[-1].code == "input_audio_buffer_commit_empty"
        assert not [e for e in reader.seen if e.type.startswith("response.")]


@pytest.mark.parametrize("drop_type", ["input_audio_buffer.clear", "barge_in", "input.cancel"])
async def test_a_response_cancel_waiting_behind_input_that_is_dropped_is_still_answered(drop_type):
    # With nothing active and an append in flight, response.cancel waits behind that
    # input (a commit there may open the response it means). The input is then dropped:
    # the waiting cancel never runs as such, yet it is answered.
    async with DuplexOmni(deployment("loopback-fast")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        await dispatch_together(
            omni,
            handle,
            append(sine_pcm16(1000)),
            command({"type": "response.cancel", "event_id": "evt_cancel"}),
            command({"type": drop_type, "event_id": "evt_drop"}),
        )
        events = await reader.until(
            lambda e: e.type == "error" and e.client_event_id == "evt_cancel"
        )
        assert events[-1].code == "response_cancel_not_active"
        if "input_audio_buffer.cleared" not in [e.type for e in reader.seen]:
            await reader.until(is_type("input_audio_buffer.cleared"))
        assert not [e for e in reader.seen if e.type.startswith("response.")]
