"""Cancel atomicity: stage output of the cancelled epoch that arrives after the cancel.

The paced loopback model keeps producing while a test double holds its outputs back in
the worker-to-orchestrator hop (the thread scheduling that, in production, can deliver
an output late). The held outputs are then released in one of two places:

- ``behind_cancel``: in the same orchestrator step as the cancel, while the orchestrator
  still holds the request, so they are forwarded into the session's mailbox right behind
  the cancel (the runner's epoch fence stops them, and for this turn-based model the
  response's ownership guard would too: each guard has its own test in
  ``test_duplex_guarantees_stale_outputs.py``);
- ``after_abort``: after the cancel's ``response.done`` was received, when the
  orchestrator has already forgotten the aborted request.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from duplex_helpers import (
    TIMEOUT_S,
    EventReader,
    append,
    command,
    commit,
    deployment,
    is_type,
    response_done,
    sine_pcm16,
    wait_until,
)

from omniduplex.engine.stage.messages import StageOutput
from omniduplex.entrypoints.duplex_omni import DuplexOmni


def user_text(text: str) -> Any:
    return command(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            },
        }
    )


MEDIA = ("response.output_audio.delta", "response.output_audio_transcript.delta")


class DelayedDeliveryDouble:
    """Test double for the worker-to-orchestrator thread hop: while ``holding``, worker
    events are kept (in order) instead of reaching the orchestrator; ``release`` hands
    them over in order. Installed on the engine's ``_deliver_worker_event`` seam; runs on
    the orchestrator loop."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.real = engine._deliver_worker_event
        self.holding = False
        self.held: list[object] = []

    def __call__(self, event: object) -> None:
        if self.holding:
            self.held.append(event)
        else:
            self.real(event)

    def install(self) -> None:
        self.engine._deliver_worker_event = self

    def uninstall(self) -> None:
        del self.engine._deliver_worker_event

    def release(self) -> list[object]:
        self.holding = False
        held, self.held = self.held, []
        for event in held:
            self.real(event)
        return held


async def model_holds(omni: DuplexOmni, request_id: str) -> bool:
    model = omni.engine.stages[0].worker.model
    for _ in range(100):
        try:  # the worker thread may be mutating its dict: read again
            return request_id in model.request_ids
        except RuntimeError:
            await asyncio.sleep(0)
    raise AssertionError("could not read the model's requests")


@pytest.mark.parametrize("release_at", ["behind_cancel", "after_abort"])
async def test_output_of_the_cancelled_epoch_arriving_after_the_cancel_is_dropped(
    release_at: str,
):
    async with DuplexOmni(deployment("loopback", reaper_interval_s=3600)) as omni:
        handle = await omni.open_session()
        reader = EventReader(handle)
        gate = DelayedDeliveryDouble(omni.engine)
        await omni.engine.call(lambda _o: gate.install())
        try:
            # A 3 s utterance: the paced reply streams 100 ms units for about 3 s.
            handle.submit(append(sine_pcm16(3000)))
            handle.submit(commit())
            first = (await reader.until(is_type("response.output_audio.delta")))[-1]
            old_id = first.response_id

            def request_of(orchestrator: Any) -> str:
                response = orchestrator.manager.runners[handle.session_id].session.response
                assert response is not None and response.response_id == old_id
                return response.request_ids[-1]

            old_request = await omni.engine.call(request_of)
            gate.holding = True
            # The model keeps producing: wait until real outputs of the old epoch are held.
            await wait_until(
                lambda: (
                    sum(
                        isinstance(e, StageOutput) and e.request_id == old_request
                        for e in gate.held
                    )
                    >= 2
                )
            )

            # The cancel and a next (text) turn, in one orchestrator step: the mailbox
            # holds [cancel, item, response.create], and then (behind_cancel) the held
            # outputs, forwarded while the orchestrator still holds their request. A
            # stale output let through would be projected into the next response.
            follow_up = [
                command({"type": "response.cancel"}),
                user_text("hello there"),
                command({"type": "response.create"}),
            ]

            def cancel_now(orchestrator: Any) -> dict[str, Any]:
                runner = orchestrator.manager.runners[handle.session_id]
                before = runner._mailbox.qsize()
                for item in follow_up:
                    orchestrator.manager.dispatch(handle.session_id, item)
                state: dict[str, Any] = {"registered": orchestrator.get_request(old_request)}
                if release_at == "behind_cancel":
                    state["released"] = gate.release()
                    state["queued_behind"] = runner._mailbox.qsize() - before - len(follow_up)
                return state

            state = await omni.engine.call(cancel_now)
            assert state["registered"] is not None  # the race is real: not yet aborted
            events = await reader.until(response_done(old_id))
            done = events[-1]
            assert done.response["status"] == "cancelled"
            if release_at == "behind_cancel":
                outputs = [e for e in state["released"] if isinstance(e, StageOutput)]
                assert outputs and all(e.request_id == old_request for e in outputs)
                # They were forwarded into the session mailbox behind the cancel.
                assert state["queued_behind"] == len(outputs)
            else:
                released = await omni.engine.call(lambda _o: gate.release())
                assert any(
                    isinstance(e, StageOutput) and e.request_id == old_request for e in released
                )
        finally:
            await omni.engine.call(lambda _o: gate.uninstall())

        # The stage request of the old epoch was aborted: the orchestrator no longer holds
        # it, and the model drops it once the abort reaches its worker.
        assert await omni.engine.call(lambda o: o.get_request(old_request)) is None

        async def dropped_by_model() -> None:
            while await model_holds(omni, old_request):
                await asyncio.sleep(0.005)

        await asyncio.wait_for(dropped_by_model(), TIMEOUT_S)

        # The next turn (in the new epoch) ends; then close and read everything.
        await reader.until(lambda e: e.type == "response.done" and e.response_id != old_id)
        await handle.close()
        await reader.rest()

        stream = reader.seen
        done_index = stream.index(done)
        later = stream[done_index + 1 :]
        # Catches a late output turned into a delta (or any event) of the cancelled
        # response after its response.done, or attributed to the next response.
        assert not [e.type for e in later if getattr(e, "response_id", None) == old_id]
        assert all(e.epoch >= done.epoch for e in later)
        next_deltas = [e for e in later if e.type in MEDIA]
        assert next_deltas and all(e.epoch == done.epoch for e in next_deltas)
        # The next response got exactly its own audio, one unit per word of "hello
        # there": none of the cancelled response's held units leaked into it.
        dones = [e for e in later if e.type == "response.done"]
        assert [d.response["status"] for d in dones] == ["completed"]
        assert sum(e.type == "response.output_audio.delta" for e in later) == 2
