"""Cancels and the single-writer / epoch guarantee of one session's event stream."""

from __future__ import annotations

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
    wait_until,
)

from omniduplex.entrypoints.duplex_omni import DuplexOmni

# Media events the outbox may drop for a cancelled response (DESIGN decision 13).
MEDIA = {"response.output_audio.delta", "response.output_audio_transcript.delta"}


def assert_nothing_of_after(events: list, response_id: str, done_index: int, epoch: int) -> None:
    later = events[done_index + 1 :]
    assert all(getattr(e, "response_id", None) != response_id for e in later), [
        e.type for e in later if getattr(e, "response_id", None) == response_id
    ]
    assert all(e.epoch is not None and e.epoch >= epoch for e in later)


async def test_cancel_mid_response_ends_its_stream_and_bumps_the_epoch():
    # Paced loopback: a 2 s utterance is answered in 100 ms units over about 2 s, so the
    # cancel sent after the first delta lands while the response is still producing.
    async with DuplexOmni(deployment("loopback")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(2000)))
        handle.submit(commit())
        first = (await reader.until(is_type("response.output_audio.delta")))[-1]
        cancelled_id = first.response_id
        assert first.epoch == 0

        handle.submit(command({"type": "response.cancel", "event_id": "evt_cancel"}))
        events = await reader.until(response_done(cancelled_id))
        done = events[-1]
        assert done.response["status"] == "cancelled"
        assert done.response["status_details"]["reason"] == "client_cancelled"
        new_epoch = done.epoch
        assert new_epoch == 1

        # A second turn after the cancel: everything that follows belongs to the new
        # epoch and nothing carries the cancelled response's id.
        handle.submit(append(sine_pcm16(300)))
        handle.submit(commit())
        await reader.until(lambda e: e.type == "response.done" and e.response_id != cancelled_id)
        await handle.close()
        await reader.rest()

        stream = reader.seen
        done_index = stream.index(done)
        assert_nothing_of_after(stream, cancelled_id, done_index, new_epoch)
        second = stream[-2] if stream[-1].type == "session.closed" else stream[-1]
        dones = [e for e in stream if e.type == "response.done"]
        assert [d.response["status"] for d in dones] == ["cancelled", "completed"]
        assert dones[1].response_id != cancelled_id and dones[1].epoch == new_epoch
        assert stream[-1].type == "session.closed"
        assert second is not None


async def test_a_cancel_right_behind_the_commit_cancels_the_response_it_opens():
    # The commit waits behind its in-flight append; the cancel, with no response active
    # yet, keeps its place behind that commit instead of overtaking it.
    async with DuplexOmni(deployment("loopback-fast")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        await dispatch_together(
            omni, handle, append(sine_pcm16(500)), commit(), command({"type": "response.cancel"})
        )
        events = await reader.until(response_done())
        created = next(e for e in events if e.type == "response.created")
        done = events[-1]
        assert done.response_id == created.response_id
        assert done.response["status"] == "cancelled"
        assert "error" not in [e.type for e in events]

        # Nothing of the cancelled response follows; a later turn completes normally.
        handle.submit(append(sine_pcm16(300)))
        handle.submit(commit())
        await reader.until(lambda e: e.type == "response.done" and e is not done)
        await handle.close()
        await reader.rest()
        assert_nothing_of_after(reader.seen, done.response_id, reader.seen.index(done), 1)


async def test_cancel_with_nothing_active_is_an_error():
    async with DuplexOmni(deployment("loopback-fast")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        handle.submit(command({"type": "response.cancel", "event_id": "evt_1"}))
        error = (await reader.until(is_type("error")))[-1]
        assert error.code == "response_cancel_not_active"


async def test_undelivered_audio_of_a_cancelled_response_is_dropped_from_the_outbox():
    # Nobody reads while the response streams; once some of its audio waits in the
    # outbox the client cancels. response.done(cancelled) overtakes the backlog: the
    # queued deltas are gone, the terminal events are not.
    async with DuplexOmni(deployment("loopback")) as omni, await omni.open_session() as handle:

        def queued_deltas() -> list:
            return [e for e in handle._outbox if e.type == "response.output_audio.delta"]

        handle.submit(append(sine_pcm16(2000)))
        handle.submit(commit())
        await wait_until(lambda: len(queued_deltas()) >= 1)
        response_id = queued_deltas()[0].response_id
        handle.submit(command({"type": "response.cancel"}))
        # Still not reading: wait for the terminal to reach the outbox.
        await wait_until(lambda: any(e.type == "response.done" for e in handle._outbox))

        reader = EventReader(handle)
        events = await reader.until(response_done(response_id))
        assert events[-1].response["status"] == "cancelled"
        assert not [e for e in events if e.type in MEDIA and e.response_id == response_id]
        types = [e.type for e in events]
        for kept in ("response.created", "response.output_item.done", "response.done"):
            assert kept in types


async def test_barge_in_while_an_append_is_in_flight_rolls_the_append_back():
    async with DuplexOmni(deployment("loopback-fast")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        await dispatch_together(
            omni,
            handle,
            append(sine_pcm16(3000)),
            command({"type": "barge_in", "event_id": "evt_barge"}),
            commit(event_id="evt_commit"),
        )
        events = await reader.until(is_type("error"))
        types = [e.type for e in events]
        assert "input_audio_buffer.cleared" in types
        cleared = next(e for e in events if e.type == "input_audio_buffer.cleared")
        assert cleared.epoch == 1
        error = events[-1]
        assert error.code == "input_audio_buffer_commit_empty"
        assert error.client_event_id == "evt_commit"
        assert "response.created" not in types
        assert "input_audio_buffer.committed" not in types

        def pending(orchestrator) -> tuple[int, int]:
            session = orchestrator.manager.runners[handle.session_id].session
            return session.reserved_input_bytes, session.pending_turns

        assert await omni.engine.call(pending) == (0, 0)

        # The session goes on: a fresh turn after the barge-in is answered.
        handle.submit(append(sine_pcm16(300)))
        handle.submit(commit())
        done = (await reader.until(response_done()))[-1]
        assert done.response["status"] == "completed"
        assert done.epoch == 1
