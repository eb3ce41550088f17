"""Requests cross to the orchestrator in batches: what one iteration of the caller's loop
submitted goes over in one hand-over (one wake-up of the orchestrator loop), in order,
with RPCs in the same order as one-way commands.

The hand-over is observed, not replaced: a wrapper records each batch and passes it on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from duplex_helpers import TIMEOUT_S, EventReader, append, commit, deployment, sine_pcm16

from omniduplex.engine import omni_engine_base
from omniduplex.entrypoints.duplex_omni import DuplexOmni


async def test_one_loop_iteration_of_submits_crosses_in_one_batch_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batches: list[list[Any]] = []
    enqueue_all = omni_engine_base._enqueue_all

    def recording(orchestrator: Any, batch: list[Any]) -> None:
        batches.append([message for message, _ in batch])
        enqueue_all(orchestrator, batch)

    monkeypatch.setattr(omni_engine_base, "_enqueue_all", recording)
    async with DuplexOmni(deployment()) as omni:
        handle = await omni.open_session({})
        reader = EventReader(handle)
        await reader.until(lambda e: e.type == "session.created")
        commands = [append(sine_pcm16(100)) for _ in range(10)] + [commit(create_response=True)]
        for command in commands:  # one loop iteration: no await in between
            handle.submit(command)
        events = await reader.until(lambda e: e.type == "response.done")
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
    carried = [[getattr(message, "command", None) for message in batch] for batch in batches]
    burst = next(batch for batch in carried if commands[0] in batch)
    assert burst == commands  # all of it in one hand-over, in the order submitted
    assert events[-1].response["status"] == "completed"
