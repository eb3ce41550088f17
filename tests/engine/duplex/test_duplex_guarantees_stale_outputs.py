"""Stage output that must never reach a session, each kept out by its own guard.

- The runner's epoch fence: output of an epoch a cancel ended is dropped when dequeued,
  also when it was already in the mailbox behind the cancel. Shown with a plugin that
  streams its input (``duplex_helpers.StreamingInputTestPlugin``), for which no other
  guard exists: any model output there would open a response.
- The response's ownership guard: a turn-based response hears only its own requests, so
  the late output of a request that failed (a failure does not advance the epoch) cannot
  leak into the response that follows it.

The outputs are injected where a stage worker's would arrive
(``DuplexSessionManager.on_stage_output``), so the interleavings are exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
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

LEAKED = "leaked"


def audio_unit(text: str) -> dict[str, Any]:
    return {"kind": "audio", "audio": np.full(2400, 0.1, dtype=np.float32), "text": text}


def output(request_id: str, text: str) -> StageOutputItem:
    return StageOutputItem(request_id=request_id, data=audio_unit(text), finished=False, error=None)


async def test_output_of_a_cancelled_epoch_never_reaches_a_streaming_session() -> None:
    async with DuplexOmni(streaming_deployment()) as omni:
        handle = await omni.open_session({"output_audio_pacing": "none"})
        sid = handle.session_id
        reader = EventReader(handle)
        await reader.until(is_type("session.created"))
        old = stage_request_id(await session_value(omni, sid, lambda s: s.fence), "stage0")

        def inject(item: StageOutputItem) -> Any:
            return lambda o: o.manager.on_stage_output(sid, item)

        # Model output opens a response on a streaming session.
        await omni.engine.call(inject(output(old, "first")))
        created = (await reader.until(is_type("response.created")))[-1]

        # A cancel, and right behind it in the same step an output of the epoch it ends.
        def cancel_then_stale(o: Any) -> None:
            o.manager.dispatch(sid, command({"type": "response.cancel"}))
            o.manager.on_stage_output(sid, output(old, LEAKED))

        await omni.engine.call(cancel_then_stale)
        done = (await reader.until(response_done(created.response_id)))[-1]
        assert done.response["status"] == "cancelled"
        # And one that arrives later still.
        await omni.engine.call(inject(output(old, LEAKED)))

        # Output of the current epoch still opens a response: the fence is not a wall.
        current = stage_request_id(await session_value(omni, sid, lambda s: s.fence), "stage0")
        assert current != old
        await omni.engine.call(inject(output(current, "fresh")))
        fresh = (await reader.until(is_type("response.created")))[-1]
        after = await reader.until(is_type("response.output_audio_transcript.delta"))
        await handle.close()

    assert fresh.response_id != created.response_id
    deltas = [e.delta for e in reader.seen if e.type == "response.output_audio_transcript.delta"]
    assert LEAKED not in " ".join(deltas), deltas
    created_ids = [e.response_id for e in reader.seen if e.type == "response.created"]
    assert created_ids == [created.response_id, fresh.response_id]
    assert after[-1].delta.strip() == "fresh"


async def test_the_late_output_of_a_failed_request_does_not_leak_into_the_next_response():
    async with DuplexOmni(deployment("loopback")) as omni:  # paced: the request lives on
        handle = await omni.open_session({"turn_detection": None})
        sid = handle.session_id
        reader = EventReader(handle)
        handle.submit(append(sine_pcm16(3000)))
        handle.submit(commit())
        first = (await reader.until(is_type("response.created")))[-1]
        await reader.until(is_type("response.output_audio.delta"))
        failed = (await session_value(omni, sid, lambda s: list(s.response.request_ids)))[0]
        error = StageOutputItem(request_id=failed, data={}, finished=True, error="stage broke")
        await omni.engine.call(lambda o: o.manager.on_stage_output(sid, error))
        done = (await reader.until(response_done(first.response_id)))[-1]
        assert done.response["status"] == "failed"

        handle.submit(append(sine_pcm16(500)))
        handle.submit(commit())
        second = (await reader.until(is_type("response.created")))[-1]
        epochs = await session_value(omni, sid, lambda s: (s.epoch, list(s.response.request_ids)))
        assert failed not in epochs[1]
        late = output(failed, LEAKED)  # same epoch: only ownership keeps it out
        await omni.engine.call(lambda o: o.manager.on_stage_output(sid, late))
        answered = (await reader.until(response_done(second.response_id)))[-1]
        await handle.close()

    assert answered.response["status"] == "completed"
    transcript = answered.response["output"][0]["content"][0]["transcript"]
    assert LEAKED not in transcript
    deltas = [
        e.delta
        for e in reader.seen
        if e.type == "response.output_audio_transcript.delta"
        and e.response_id == second.response_id
    ]
    assert LEAKED not in " ".join(deltas)
