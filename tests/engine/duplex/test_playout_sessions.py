"""The playout clock on the real engine: a turn-based plugin (loopback-fast) generates a
6 s reply in a few milliseconds; the session is paced (``output_audio_pacing``), so the
reply leaves at real time plus the lead, a talk-over cuts it where the user is, and what
history keeps is what was heard. A model-native plugin's decision to listen is told after
the paced audio it follows.

No assertion depends on the machine being fast: a paced reply can only be slower than
real time on a loaded machine, and every bound on a played position is taken from what
the test itself saw arrive (or measured), never from a fixed duration.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import numpy as np
import pytest
from duplex_helpers import (
    EventReader,
    append,
    command,
    commit,
    deployment,
    is_type,
    response_done,
    session_value,
    sine_pcm16,
    streaming_deployment,
)

from omniduplex.engine.duplex.contracts import stage_request_id
from omniduplex.engine.duplex.session.context import StageOutputItem
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.protocol.duplex import truncate_transcript

LEAD_MS = 300
UNIT_MS = 100  # loopback's unit
PACED = {"output_audio_pacing": "realtime", "output_audio_lead_ms": LEAD_MS}
SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 300, "prefix_padding_ms": 100}


def _audio_ms(event: Any) -> float:
    return len(base64.b64decode(event.delta)) / 2 / event.sample_rate_hz * 1000


class Listener:
    """Reads a session's events and notes when each audio delta arrived."""

    def __init__(self, handle: Any) -> None:
        self.reader = EventReader(handle)
        self.arrivals: list[tuple[float, float, str]] = []  # (monotonic s, ms, response)

    async def until(self, predicate: Any) -> list[Any]:
        out = []
        while True:
            event = await self.reader.next()
            out.append(event)
            if event.type == "response.output_audio.delta":
                self.arrivals.append((time.monotonic(), _audio_ms(event), event.response_id))
            if predicate(event):
                return out

    def received_ms(self, response_id: str) -> float:
        return sum(ms for _, ms, rid in self.arrivals if rid == response_id)


async def _ask(handle: Any, listener: Listener, ms: int) -> str:
    """Speak ``ms`` of tone and commit: loopback answers with as much audio."""
    handle.submit(append(sine_pcm16(ms)))
    handle.submit(commit())
    created = await listener.until(is_type("response.created"))
    return created[-1].response_id


async def test_a_fast_reply_leaves_at_real_time_and_ends_when_its_last_audio_left() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session(PACED)
        listener = Listener(handle)
        asked_at = time.monotonic()  # the playout cannot have started before this
        response_id = await _ask(handle, listener, 2000)
        events = await listener.until(response_done(response_id))
        rest = await listener.until(is_type("output_audio_buffer.stopped"))
        await handle.close()
    kinds = [e.type for e in events]
    assert events[-1].response["status"] == "completed"
    last = listener.arrivals[-1][0]
    assert listener.received_ms(response_id) == pytest.approx(2000, abs=1)
    # Generated in milliseconds, released at real time: the last unit cannot leave before
    # the real-time position reaches its start minus the lead.
    assert (last - asked_at) * 1000 >= 2000 - UNIT_MS - LEAD_MS
    # OpenAI's order: the buffer starts after the audio part is added and before the
    # first delta; it stops after response.done.
    started = kinds.index("output_audio_buffer.started")
    assert kinds.index("response.content_part.added") < started
    assert started < kinds.index("response.output_audio.delta")
    # Nothing of the response but the end of its playout follows its response.done.
    assert [e.type for e in rest if getattr(e, "response_id", None) == response_id] == [
        "output_audio_buffer.stopped"
    ]


async def test_talking_over_a_reply_that_finished_generating_cuts_it_where_the_user_is() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session({**PACED, "turn_detection": None})
        listener = Listener(handle)
        response_id = await _ask(handle, listener, 6000)
        # Wait until 1.5 s of the reply has arrived (the model finished long ago).
        await listener.until(lambda e: listener.received_ms(response_id) >= 1500)
        handle.submit(
            command({"type": "session.update", "session": {"turn_detection": SERVER_VAD}})
        )
        heard_before = listener.received_ms(response_id)
        handle.submit(append(sine_pcm16(400)))
        events = await listener.until(response_done(response_id))
        got = listener.received_ms(response_id)
        after = await listener.until(is_type("conversation.item.truncated"))
        # The interruption is answered as the next turn once the user stops.
        handle.submit(append(bytes(16_000 * 2)))  # 500 ms of silence ends the turn
        answer = await listener.until(is_type("response.created"))
        answered = await listener.until(response_done(answer[-1].response_id))
        await handle.close()
    done = events[-1]
    assert done.response["status"] == "cancelled"
    assert done.response["status_details"]["reason"] == "turn_detected"
    kinds = [e.type for e in events]
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index(
        "output_audio_buffer.cleared"
    )
    assert kinds.index("output_audio_buffer.cleared") < len(kinds) - 1
    # Nothing of the reply was sent after its response.done, and most of it never was.
    assert not [e for e in after if getattr(e, "response_id", None) == response_id]
    assert got < 6000 - 1000
    truncated = after[-1]
    assert truncated.item_id == done.response["output"][0]["id"]
    # Cut where the user was: not past what had left, and no further back than the lead
    # (plus a unit) behind what had arrived when they started talking.
    assert heard_before - LEAD_MS - UNIT_MS <= truncated.audio_end_ms <= got
    # The transcript is cut where the audio is, by the marks the deltas carried.
    transcript = done.response["output"][0]["content"][0]["transcript"]
    ours = [e for e in listener.reader.seen if getattr(e, "response_id", None) == response_id]
    said = "".join(e.delta for e in ours if e.type == "response.output_audio_transcript.delta")
    marks = [
        mark
        for e in ours
        if e.type == "response.output_audio.delta"
        for mark in e.metadata["audio_text_marks"]
    ]
    assert transcript == truncate_transcript(said, truncated.audio_end_ms, got, marks)
    assert 0 < len(transcript) < len(said)
    assert answered[-1].response["status"] == "completed"


async def test_an_ack_behind_moves_the_cut_back_and_one_beyond_is_clamped() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session(PACED)
        listener = Listener(handle)
        response_id = await _ask(handle, listener, 6000)
        await listener.until(lambda e: listener.received_ms(response_id) >= 1500)
        handle.submit(command({"type": "playback.ack", "played_ms": 999_999}))
        clamped = (await listener.until(is_type("playback.acknowledged")))[-1]
        acked_at = time.monotonic()
        handle.submit(command({"type": "playback.ack", "played_ms": 200}))
        handle.submit(command({"type": "response.cancel"}))
        await listener.until(response_done(response_id))
        done_at = time.monotonic()
        truncated = (await listener.until(is_type("conversation.item.truncated")))[-1]
        await handle.close()
    # More than was released is clamped to what was released.
    ack = clamped.event
    assert ack["played_ms"] == ack["playback"]["sent_ms"] < 6000
    # The client is behind (a jitter buffer): the cut moves back to what it said, plus
    # the time that passed since it said so.
    assert 200 <= truncated.audio_end_ms <= 200 + (done_at - acked_at) * 1000 + 1


async def test_output_audio_buffer_clear_cuts_the_playout_at_once() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session(PACED)
        listener = Listener(handle)
        response_id = await _ask(handle, listener, 6000)
        await listener.until(is_type("response.output_audio.delta"))
        handle.submit(command({"type": "output_audio_buffer.clear"}))
        events = await listener.until(response_done(response_id))
        await handle.close()
    kinds = [e.type for e in events]
    assert kinds.count("output_audio_buffer.cleared") == 1
    assert events[-1].response["status"] == "cancelled"
    assert listener.received_ms(response_id) < 6000 - 1000


async def test_an_unpaced_session_gets_everything_at_once_and_no_buffer_events() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session({})
        listener = Listener(handle)
        updated = handle.open_result.public_session
        assert updated["output_audio_pacing"] == "none"  # the deployment's choice, echoed
        response_id = await _ask(handle, listener, 2000)
        events = await listener.until(response_done(response_id))
        await handle.close()
    assert not [e for e in events if e.type.startswith("output_audio_buffer.")]
    assert listener.received_ms(response_id) == pytest.approx(2000, abs=1)
    assert events[-1].response["status"] == "completed"


async def test_the_pacing_is_echoed_and_a_bad_value_refused_alone() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session(PACED)
        listener = Listener(handle)
        public = handle.open_result.public_session
        assert (public["output_audio_pacing"], public["output_audio_lead_ms"]) == (
            "realtime",
            LEAD_MS,
        )
        handle.submit(
            command(
                {
                    "type": "session.update",
                    "session": {"output_audio_pacing": "sometimes", "instructions": "hi"},
                }
            )
        )
        events = await listener.until(is_type("session.updated"))
        await handle.close()
    errors = [e for e in events if e.type == "error"]
    assert [e.param for e in errors] == ["output_audio_pacing"]
    assert events[-1].session["instructions"] == "hi"
    assert events[-1].session["output_audio_pacing"] == "realtime"


async def test_a_talk_over_after_response_done_truncates_what_was_not_yet_played() -> None:
    # A lead longer than the reply: all of it leaves at once and response.done follows,
    # while the client still has 2 s of it to play.
    lead = {**PACED, "output_audio_lead_ms": 5000, "turn_detection": None}
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session(lead)
        listener = Listener(handle)
        asked_at = time.monotonic()  # the playout cannot have started before this
        response_id = await _ask(handle, listener, 2000)
        events = await listener.until(response_done(response_id))
        vad = {"type": "session.update", "session": {"turn_detection": SERVER_VAD}}
        handle.submit(command(vad))
        handle.submit(append(sine_pcm16(400)))
        after = await listener.until(is_type("conversation.item.truncated"))
        truncated_at = time.monotonic()
        handle.submit(command({"type": "conversation.item.retrieve", "item_id": after[-1].item_id}))
        item = (await listener.until(is_type("conversation.item.retrieved")))[-1].item
        await handle.close()
    assert events[-1].response["status"] == "completed"
    ours = [e.type for e in after if getattr(e, "response_id", None) == response_id]
    assert ours == ["output_audio_buffer.cleared"]  # not stopped: it never played out
    played = after[-1].audio_end_ms
    assert 0 < played <= min(2000, (truncated_at - asked_at) * 1000 + 1)
    full = events[-1].response["output"][0]["content"][0]["transcript"]
    kept = item["content"][0]["transcript"]
    assert full.startswith(kept) and len(kept) < len(full)


async def test_a_reply_far_ahead_of_its_playout_is_bounded_in_the_engine() -> None:
    # 6 s of 24 kHz pcm16 is 384 kB of base64; the engine may hold 50 kB ahead.
    pipeline = deployment("loopback-fast", max_unplayed_output_bytes_per_session=50_000)
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(PACED)
        listener = Listener(handle)
        response_id = await _ask(handle, listener, 6000)
        events = await listener.until(response_done(response_id))
        await handle.close()
    errors = [e for e in events if e.type == "error"]
    assert [e.code for e in errors] == ["output_audio_backlog_full"]
    assert events[-1].response["status"] == "failed"
    assert listener.received_ms(response_id) < 6000


@pytest.mark.parametrize("stop", ["output_audio_buffer.clear", "barge_in"])
async def test_clear_or_barge_in_after_response_done_cuts_what_still_plays(stop: str) -> None:
    lead = {**PACED, "output_audio_lead_ms": 5000}  # all of it leaves at once
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session(lead)
        listener = Listener(handle)
        response_id = await _ask(handle, listener, 2000)
        await listener.until(response_done(response_id))
        handle.submit(command({"type": stop}))
        after = await listener.until(is_type("conversation.item.truncated"))
        await handle.close()
    ours = [e.type for e in after if getattr(e, "response_id", None) == response_id]
    assert ours == ["output_audio_buffer.cleared"]
    assert 0 < after[-1].audio_end_ms < 2000


async def test_ack_only_history_keeps_what_the_clock_says_was_heard() -> None:
    # No acks at all: history still grows with the playout, not with the generation.
    # A 1 s lead: the reply ends (response.done) a whole second before it is played out.
    session = {**PACED, "output_audio_lead_ms": 1000, "playback_commit_policy": "ack_only"}
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        handle = await omni.open_session(session)
        listener = Listener(handle)
        response_id = await _ask(handle, listener, 2000)
        done = (await listener.until(response_done(response_id)))[-1]
        item_id = done.response["output"][0]["id"]
        retrieve = {"type": "conversation.item.retrieve", "item_id": item_id}
        handle.submit(command(retrieve))
        at_done = (await listener.until(is_type("conversation.item.retrieved")))[-1].item
        await listener.until(is_type("output_audio_buffer.stopped"))
        handle.submit(command(retrieve))
        played_out = (await listener.until(is_type("conversation.item.retrieved")))[-1].item
        await handle.close()
    full = done.response["output"][0]["content"][0]["transcript"]
    heard_at_done = at_done["content"][0]["transcript"]
    # At response.done the last lead of audio had left but was not yet played.
    assert full.startswith(heard_at_done) and len(heard_at_done) < len(full)
    assert played_out["content"][0]["transcript"] == full


async def test_a_model_that_decides_to_listen_says_so_after_the_audio_it_paced_out() -> None:
    # A model-native plugin (it streams its input) ends its stretch of speech with a
    # listen right behind its last frame; paced, most of that speech is still due, and
    # response.listen must follow it, not overtake it.
    async with DuplexOmni(streaming_deployment()) as omni:
        handle = await omni.open_session(PACED)
        listener = Listener(handle)
        await listener.until(is_type("session.created"))
        fence = await session_value(omni, handle.session_id, lambda s: s.fence)
        request_id = stage_request_id(fence, "stage0")
        frames = [
            {"kind": "audio", "audio": np.full(2400, 0.1, np.float32), "text": f"w{i} "}
            for i in range(10)
        ]  # 1 s of speech, 100 ms a frame, at once
        outputs = [StageOutputItem(request_id, data, False, None) for data in frames]
        outputs.append(StageOutputItem(request_id, {"kind": "listen"}, False, None))

        def produce(o: Any) -> None:
            for item in outputs:
                o.manager.on_stage_output(handle.session_id, item)

        await omni.engine.call(produce)
        events = await listener.until(is_type("response.done"))
        await handle.close()
    kinds = [e.type for e in events]
    response_id = events[-1].response_id
    assert listener.received_ms(response_id) == pytest.approx(1000, abs=1)
    assert kinds.count("response.listen") == 1
    assert kinds.index("response.listen") > max(
        i for i, kind in enumerate(kinds) if kind == "response.output_audio.delta"
    )
    listen = events[kinds.index("response.listen")]
    assert listen.response_id == response_id
    assert events[-1].response["status"] == "completed"
