"""The server-wide input audio budget over real sockets: two sessions share it, the one
that finds it full is refused with a typed, retryable capacity error and keeps working,
and it can append again once the other commits or clears."""

from __future__ import annotations

from typing import Any

from server_harness import b64, run_server, sine_pcm16, wire


async def _append(client: Any, ms: int, event_id: str | None = None) -> None:
    event: dict[str, Any] = {"type": "input_audio_buffer.append", "audio": b64(sine_pcm16(ms))}
    if event_id is not None:
        event["event_id"] = event_id
    await client.send(event)


async def _accepted(client: Any, ms: int) -> None:
    """Append ``ms`` and commit: the commit follows the append, so it finds the audio in
    the buffer unless the append was refused."""
    await _append(client, ms)
    await client.send({"type": "input_audio_buffer.commit"})
    events = await client.until(("input_audio_buffer.committed", "error"))
    assert events[-1]["type"] == "input_audio_buffer.committed", events[-1]


async def _refused(client: Any, ms: int, event_id: str) -> None:
    await _append(client, ms, event_id)
    error = (await client.until("error"))[-1]["error"]
    assert error["code"] == "server_input_audio_full", error
    assert error["type"] == "rate_limit_error"  # capacity, not the client's mistake
    assert error["event_id"] == event_id
    assert error["retryable"] is True
    # Refused, not kept: the buffer is as it was (empty here), and the socket carries on.
    await client.send({"type": "input_audio_buffer.commit", "event_id": f"{event_id}_commit"})
    error = (await client.until("error"))[-1]["error"]
    assert (error["code"], error["event_id"]) == (
        "input_audio_buffer_commit_empty",
        f"{event_id}_commit",
    )


async def test_sessions_share_the_server_input_budget_and_the_refused_one_recovers() -> None:
    # 1 s of input audio for the whole server: one session's 0.9 s turn leaves no room
    # for another's 0.3 s.
    with run_server("loopback-fast", max_buffered_input_s=1.0) as server:
        async with (
            wire(server.ws_url + "?model=loopback") as first,
            wire(server.ws_url + "?model=loopback") as second,
        ):
            assert (await first.recv())["type"] == "session.created"
            assert (await second.recv())["type"] == "session.created"

            await _append(first, 900)
            await first.send({"type": "input_audio_buffer.commit"})
            await first.until("input_audio_buffer.committed")  # committed, not yet answered
            await _refused(second, 300, "evt_full_1")
            await first.send({"type": "response.create"})
            await first.until("response.done")  # answered: its audio is the model's now
            await _accepted(second, 300)
            await second.send({"type": "response.create"})
            await second.until("response.done")

            await _append(second, 900)
            # Any refusal of the append would come before the update it precedes.
            await second.send({"type": "session.update", "session": {}})
            events = await second.until(("session.updated", "error"))
            assert events[-1]["type"] == "session.updated", events[-1]
            await _refused(first, 300, "evt_full_2")
            await second.send({"type": "input_audio_buffer.clear"})
            await second.until("input_audio_buffer.cleared")
            await _accepted(first, 300)
