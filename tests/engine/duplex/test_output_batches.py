"""Engine output crosses to the caller's loop in batches: what one orchestrator step
emitted is handed over at once (one wake-up of the caller's loop), in order.

The hand-over is observed, not replaced: a wrapper records each batch and passes it on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from duplex_helpers import (
    TIMEOUT_S,
    EventReader,
    append,
    command,
    commit,
    deployment,
    sine_pcm16,
)

from omniduplex.entrypoints.duplex_omni import DuplexOmni


def _types(batch: list[Any]) -> list[str]:
    return [getattr(getattr(message, "event", None), "type", "") for message in batch]


async def test_a_cancel_step_crosses_in_one_batch_in_order() -> None:
    async with DuplexOmni(deployment("loopback")) as omni:  # paced: the reply is still on
        engine = omni.engine
        batches: list[list[str]] = []
        hand_over = engine._hand_over

        def recording(batch: list[Any]) -> None:
            batches.append(_types(batch))
            hand_over(batch)

        engine._hand_over = recording
        handle = await omni.open_session({"turn_detection": None})
        reader = EventReader(handle)
        await reader.until(lambda e: e.type == "session.created")
        handle.submit(append(sine_pcm16(2000)))
        handle.submit(commit(create_response=True))
        await reader.until(lambda e: e.type == "response.output_audio.delta")
        handle.submit(command({"type": "response.cancel"}))
        seen = await reader.until(lambda e: e.type == "response.done")
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
    step = next(batch for batch in batches if "response.done" in batch)
    # The cancel's terminal events came out of one mailbox step: they crossed together,
    # in the order the session emitted them.
    terminal = ["response.output_item.done", "conversation.item.done", "response.done"]
    assert [kind for kind in step if kind in terminal] == terminal
    emitted = [e.type for e in seen]
    assert emitted.index("response.output_item.done") < emitted.index("response.done")
    assert any(len(batch) > 1 for batch in batches)
