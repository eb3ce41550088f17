"""Server VAD's ``idle_timeout_ms`` on the real engine (loopback): a user who stays quiet
after the assistant's audio played out is prompted, once per silence.

Silence is input audio time, so each test knows exactly how much it sent; a heartbeat's
ack marks that every append before it was taken (light appends are taken in mailbox
order), so "no timeout yet" is checked at a known input position, never after a wait.
"""

from __future__ import annotations

import base64
from typing import Any

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

from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.loopback.plugin import IDLE_CHECK_IN

CHUNK_MS = 100
IDLE_MS = 5000
VAD = {"type": "server_vad", "silence_duration_ms": 300, "prefix_padding_ms": 100}
TIMEOUT = "input_audio_buffer.timeout_triggered"


def _vad(**keys: Any) -> dict[str, Any]:
    return {"turn_detection": {**VAD, **keys}}


def _audio_ms(events: list[Any]) -> int:
    deltas = [e for e in events if e.type == "response.output_audio.delta"]
    return round(sum(len(base64.b64decode(e.delta)) / 2 / e.sample_rate_hz * 1000 for e in deltas))


class User:
    """The client side: everything it appended, on the input clock it shares with VAD."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.reader = EventReader(handle)
        self.position_ms = 0

    def send(self, pcm_ms: int, *, tone: bool = False) -> None:
        for _ in range(pcm_ms // CHUNK_MS):
            chunk = sine_pcm16(CHUNK_MS) if tone else bytes(16 * CHUNK_MS * 2)
            self.handle.submit(append(chunk))
            self.position_ms += CHUNK_MS

    def speak(self, ms: int = 600) -> None:
        """Speech, then enough silence for server VAD to end the turn."""
        self.send(ms, tone=True)
        self.send(400)

    async def synced(self) -> list[Any]:
        """Every event up to the point where all appends so far were taken."""
        self.handle.submit(command({"type": "session.heartbeat"}))
        return await self.reader.until(is_type("session.heartbeat_ack"))

    async def until(self, *types: str) -> list[Any]:
        return await self.reader.until(is_type(*types))


async def _open(omni: DuplexOmni, session: dict[str, Any]) -> User:
    handle = await omni.open_session(session)
    user = User(handle)
    await user.until("session.created")
    return user


async def _answered(user: User) -> list[Any]:
    """The user speaks; the response (unpaced: all its audio out) is done."""
    user.speak()
    return await user.reader.until(response_done())


async def test_a_silence_after_the_reply_is_prompted_with_its_segment_committed() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        user = await _open(omni, _vad(idle_timeout_ms=IDLE_MS))
        reply_ms = _audio_ms(await _answered(user))
        # Unpaced, OpenAI's estimate: the reply plays out its duration after it ended.
        silence_from = user.position_ms + reply_ms
        user.send(reply_ms + IDLE_MS - CHUNK_MS)
        before = await user.synced()
        user.send(CHUNK_MS)
        events = await user.reader.until(response_done())
        await user.handle.close()
    assert TIMEOUT not in [e.type for e in before]
    kinds = [e.type for e in events]
    timeout = events[kinds.index(TIMEOUT)]
    assert (timeout.audio_start_ms, timeout.audio_end_ms) == (silence_from, user.position_ms)
    # OpenAI's order: the timeout, the commit of its (empty) segment, then the response.
    assert kinds.index(TIMEOUT) < kinds.index("input_audio_buffer.committed")
    assert kinds.index("input_audio_buffer.committed") < kinds.index("response.created")
    committed = events[kinds.index("input_audio_buffer.committed")]
    assert committed.item_id == timeout.item_id
    item = events[kinds.index("conversation.item.done")].item
    assert item["id"] == timeout.item_id and item["role"] == "user"
    assert item["content"] == [{"type": "input_audio", "transcript": ""}]
    assert "input_audio_buffer.speech_started" not in kinds
    done = events[-1].response
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["transcript"] == IDLE_CHECK_IN
    assert _audio_ms(events) > 0


async def test_one_silence_prompts_once_and_the_prompts_reply_starts_the_next() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        user = await _open(omni, _vad(idle_timeout_ms=IDLE_MS))
        reply_ms = _audio_ms(await _answered(user))
        user.send(reply_ms + IDLE_MS)
        first = await user.reader.until(response_done())
        prompt_ms = _audio_ms(first)
        second_from = user.position_ms + prompt_ms
        # Just short of a second timeout counted from the first prompt's played end.
        user.send(prompt_ms + IDLE_MS - CHUNK_MS)
        between = await user.synced()
        user.send(CHUNK_MS)
        second = await user.until(TIMEOUT)
        await user.handle.close()
    assert [e.type for e in first].count(TIMEOUT) == 1
    assert TIMEOUT not in [e.type for e in between]
    assert (second[-1].audio_start_ms, second[-1].audio_end_ms) == (second_from, user.position_ms)


async def test_without_create_response_the_silence_is_committed_once_and_not_answered() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        user = await _open(omni, _vad(idle_timeout_ms=IDLE_MS, create_response=False))
        user.speak()  # committed, not answered: the user's speech arms the watch
        user.send(IDLE_MS + 400)
        events = await user.synced()
        user.send(3 * IDLE_MS)  # the same silence goes on
        after = await user.synced()
        await user.handle.close()
    kinds = [e.type for e in events]
    assert kinds.count(TIMEOUT) == 1
    assert kinds.count("input_audio_buffer.committed") == 2  # the speech, the silence
    assert "response.created" not in kinds
    assert TIMEOUT not in [e.type for e in after]


async def test_speech_restarts_the_silence() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        user = await _open(omni, _vad(idle_timeout_ms=IDLE_MS, create_response=False))
        user.speak()
        user.send(IDLE_MS - 2000)
        user.send(600, tone=True)
        spoke_until = user.position_ms
        user.send(IDLE_MS + 400)
        events = await user.synced()
        await user.handle.close()
    timeouts = [e for e in events if e.type == TIMEOUT]
    # Counted from the first speech, the silence would have timed out inside the second.
    assert len(timeouts) == 1
    assert timeouts[0].audio_start_ms >= spoke_until
    assert timeouts[0].audio_end_ms - timeouts[0].audio_start_ms >= IDLE_MS


async def test_a_response_between_appends_restarts_the_silence() -> None:
    # The client stops streaming, has the model speak (typed text), then streams silence:
    # no append saw that response in progress, yet the silence starts after it.
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        user = await _open(omni, _vad(idle_timeout_ms=IDLE_MS))
        reply_ms = _audio_ms(await _answered(user))
        user.send(reply_ms + IDLE_MS - 1000)
        await user.synced()
        text = {"type": "input_text", "text": "one more thing"}
        item = {"type": "message", "role": "user", "content": [text]}
        user.handle.submit(command({"type": "conversation.item.create", "item": item}))
        user.handle.submit(command({"type": "response.create"}))
        typed_ms = _audio_ms(await user.reader.until(response_done()))
        silence_from = user.position_ms + typed_ms
        user.send(typed_ms + IDLE_MS)
        events = await user.until(TIMEOUT)
        await user.handle.close()
    assert [e.type for e in events].count(TIMEOUT) == 1
    assert events[-1].audio_start_ms == silence_from


async def test_no_prompt_before_anyone_spoke() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        user = await _open(omni, _vad(idle_timeout_ms=IDLE_MS))
        user.send(3 * IDLE_MS)
        events = await user.synced()
        await user.handle.close()
    assert TIMEOUT not in [e.type for e in events]


async def test_the_timer_starts_when_the_reply_has_played_out_not_when_it_was_made() -> None:
    # A 6 s reply is made in milliseconds and paced with a 5 s lead: response.done comes
    # once its last audio has left, about 5 s before the client has played it all. Silence
    # sent while the reply is made or still plays out is not the user's idle time.
    lead = {"output_audio_pacing": "realtime", "output_audio_lead_ms": 5000}
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        session = {**lead, "output_audio_lead": "fixed", **_vad(idle_timeout_ms=IDLE_MS)}
        user = await _open(omni, session)
        user.speak(6000)
        made = await user.reader.until(response_done())
        user.send(2 * IDLE_MS)
        during = await user.synced()
        played_out = await user.until("output_audio_buffer.stopped")
        after_playout = user.position_ms
        user.send(IDLE_MS)
        timeout = (await user.until(TIMEOUT))[-1]
        await user.handle.close()
    # The silence was sent (and taken) while the reply played: a precondition, not timing.
    assert "output_audio_buffer.stopped" not in [e.type for e in during]
    assert TIMEOUT not in [e.type for e in made + during + played_out]
    assert timeout.audio_start_ms == after_playout
    assert timeout.audio_end_ms == after_playout + IDLE_MS


async def test_a_session_update_changes_the_timeout_at_once() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        user = await _open(omni, _vad(idle_timeout_ms=20000))
        reply_ms = _audio_ms(await _answered(user))
        update = {"type": "session.update", "session": _vad(idle_timeout_ms=IDLE_MS)}
        user.handle.submit(command(update))
        updated = (await user.until("session.updated"))[-1]
        user.send(reply_ms + IDLE_MS)
        timeout = (await user.until(TIMEOUT))[-1]
        await user.handle.close()
    assert updated.session["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == IDLE_MS
    assert timeout.audio_end_ms - timeout.audio_start_ms == IDLE_MS


async def test_a_session_update_removing_the_timeout_stops_it() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        user = await _open(omni, _vad(idle_timeout_ms=IDLE_MS))
        await _answered(user)
        user.handle.submit(command({"type": "session.update", "session": _vad()}))
        updated = (await user.until("session.updated"))[-1]
        user.send(3 * IDLE_MS)
        events = await user.synced()
        await user.handle.close()
    assert "idle_timeout_ms" not in updated.session["audio"]["input"]["turn_detection"]
    assert TIMEOUT not in [e.type for e in events]


async def test_turn_detection_null_never_times_out() -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        user = await _open(omni, _vad(idle_timeout_ms=IDLE_MS))
        user.handle.submit(command({"type": "session.update", "session": {"turn_detection": None}}))
        await user.until("session.updated")
        user.send(600, tone=True)
        user.handle.submit(commit())
        await user.reader.until(response_done())
        user.send(3 * IDLE_MS)
        events = await user.synced()
        await user.handle.close()
    assert TIMEOUT not in [e.type for e in events]
