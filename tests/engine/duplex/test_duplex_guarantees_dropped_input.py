"""Commands that wait behind input which is then dropped, through the real engine.

A commit, ``response.create`` or ``session.update`` sent while appends are still being
decoded waits for them (the runner's input tail). When that input is dropped
(``input_audio_buffer.clear``, ``input.cancel``, ``barge_in``) before they run:

* they never run: the cancel answered them, and nothing answers the dropped input
  (``input.cancel`` is "drop the input turn and cancel what answers it");
* a waiting commit gives back its admission slot, so a session that clears often does
  not run out of turns (``max_pending_turns_per_session``).

``dispatch_together`` hands the commands to the session in one step of the orchestrator
loop, so the append is still in flight when the others arrive: the interleaving is exact.
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


def _pending(handle):
    def read(orchestrator) -> tuple[int, int]:
        session = orchestrator.manager.runners[handle.session_id].session
        return session.reserved_input_bytes, session.pending_turns

    return read


@pytest.mark.parametrize("drop_type", ["input_audio_buffer.clear", "input.cancel", "barge_in"])
async def test_commands_waiting_behind_dropped_input_never_run(drop_type):
    async with DuplexOmni(deployment("loopback-fast")) as omni, await omni.open_session() as handle:
        reader = EventReader(handle)
        await dispatch_together(
            omni,
            handle,
            append(sine_pcm16(1000), event_id="evt_append"),
            commit(event_id="evt_commit"),
            command({"type": "response.create", "event_id": "evt_create"}),
            command({"type": drop_type, "event_id": "evt_drop"}),
        )
        await reader.until(is_type("input_audio_buffer.cleared"))
        assert await omni.engine.call(_pending(handle)) == (0, 0)

        # A fresh turn: its response is the only one the session ever makes.
        handle.submit(append(sine_pcm16(300)))
        handle.submit(commit(event_id="evt_fresh"))
        done = (await reader.until(response_done()))[-1]
        assert done.response["status"] == "completed"
        await handle.close()
        await reader.rest()

        stream = reader.seen
        assert [e.type for e in stream].count("response.created") == 1
        assert [e.type for e in stream].count("input_audio_buffer.committed") == 1
        errors = [e for e in stream if e.type == "error"]
        assert not errors, [(e.code, e.client_event_id) for e in errors]


async def test_a_session_that_keeps_dropping_waiting_commits_keeps_its_turns():
    # Twice the per-session bound of pending turns, each commit dropped while it waits:
    # every one must have given its slot back, so the next commit is still admitted.
    async with DuplexOmni(deployment("loopback-fast")) as omni, await omni.open_session() as handle:
        bound = omni.runtime_config.max_pending_turns_per_session
        reader = EventReader(handle)
        for _ in range(2 * bound + 1):
            await dispatch_together(
                omni,
                handle,
                append(sine_pcm16(200)),
                commit(),
                command({"type": "input_audio_buffer.clear"}),
            )
            await reader.until(is_type("input_audio_buffer.cleared"))
        assert await omni.engine.call(_pending(handle)) == (0, 0)
        handle.submit(append(sine_pcm16(300)))
        handle.submit(commit())
        done = (await reader.until(response_done()))[-1]
        assert done.response["status"] == "completed"
        assert not [e for e in reader.seen if e.type == "error"]
