"""Resume over real sockets: drops at random points lose and duplicate nothing."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
from server_harness import run_server, wire


@pytest.fixture(scope="module")
def server():
    with run_server(
        "loopback-fast", resume_replay_max_bytes_per_session=64 * 1024 * 1024
    ) as running:
        yield running


async def _open(url: str):
    ctx = wire(url)
    client = await ctx.__aenter__()
    await client.send(
        {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}
    )
    created = await client.recv()
    assert created["type"] == "session.created"
    return ctx, client, created


def _assert_exactly_once(events: list[dict]) -> None:
    seqs = [e["server_event_seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), "every event once, in order, no gap"
    ids = [e["event_id"] for e in events]
    assert len(set(ids)) == len(ids)


async def test_every_event_has_a_strictly_increasing_seq(server) -> None:
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        await client.speak(300)
        await client.send({"type": "input_audio_buffer.commit"})
        await client.send({"type": "response.create"})
        await client.until("response.done")
        await client.send({"type": "session.close"})
        await client.until("session.closed")
    _assert_exactly_once(client.received)


async def test_random_drops_lose_and_duplicate_nothing(server) -> None:
    rng = random.Random(7)
    ctx, client, created = await _open(server.ws_url)
    session_id = created["session"]["id"]
    token = created["resume_token"]
    kept: list[dict] = [created]
    turns = 0
    drops = 0
    while turns < 15:
        await client.speak(rng.choice([200, 400, 700]))
        await client.send({"type": "input_audio_buffer.commit"})
        await client.send({"type": "response.create"})
        cut_after = rng.randint(1, 25)
        done = False
        for _ in range(cut_after):
            event = await client.recv()
            kept.append(event)
            if event["type"] == "response.done":
                done = True
                break
        # drop the socket without a word, then resume from a fresh connection
        await ctx.__aexit__(None, None, None)
        drops += 1
        ctx = wire(server.ws_url + "?resume=1")
        client = await ctx.__aenter__()
        await client.send(
            {
                "type": "session.resume",
                "session_id": session_id,
                "resume_token": token,
                "last_received_server_event_seq": kept[-1]["server_event_seq"],
            }
        )
        resumed = await client.recv()
        assert resumed["type"] == "session.resumed", resumed
        assert resumed["resume_token"] != token  # rotated on every resume
        token = resumed["resume_token"]
        while not done:
            event = await client.recv()
            kept.append(event)
            done = event["type"] == "response.done"
        # the rate_limits.updated after response.done
        kept.append(await client.recv())
        turns += 1
    await client.send({"type": "session.close"})
    kept.extend(await client.until("session.closed"))
    await ctx.__aexit__(None, None, None)
    assert drops == 15
    _assert_exactly_once(kept)
    assert sum(e["type"] == "response.done" for e in kept) == 15


async def test_wrong_token_unknown_session_and_takeover(server) -> None:
    ctx, first, created = await _open(server.ws_url)
    session_id, token = created["session"]["id"], created["resume_token"]
    async with wire(server.ws_url) as intruder:
        await intruder.send(
            {"type": "session.resume", "session_id": session_id, "resume_token": "nope"}
        )
        error = await intruder.recv()
        assert error["error"]["code"] == "invalid_resume_token"
    async with wire(server.ws_url) as stranger:
        await stranger.send(
            {"type": "session.resume", "session_id": "duplex-" + "0" * 32, "resume_token": token}
        )
        error = await stranger.recv()
        assert error["error"]["code"] == "session_resume_expired"
    async with wire(server.ws_url) as second:
        await second.send(
            {
                "type": "session.resume",
                "session_id": session_id,
                "resume_token": token,
                "last_received_server_event_seq": created["server_event_seq"],
            }
        )
        resumed = await second.recv()
        assert resumed["type"] == "session.resumed"
        replaced = await first.until("session.replaced")
        assert replaced[-1]["session_id"] == session_id
        await second.send({"type": "session.heartbeat"})
        ack = await second.until("session.heartbeat_ack")
        assert ack[-1]["session_id"] == session_id
        await second.send({"type": "session.close"})
        await second.until("session.closed")
    await ctx.__aexit__(None, None, None)


async def test_a_replay_gap_asks_for_a_resync() -> None:
    with run_server("loopback-fast", resume_replay_max_bytes_per_session=2048) as small:
        ctx, client, created = await _open(small.ws_url)
        session_id, token = created["session"]["id"], created["resume_token"]
        await client.speak(600)
        await client.send({"type": "input_audio_buffer.commit"})
        await client.send({"type": "response.create"})
        await client.until("response.done")
        await ctx.__aexit__(None, None, None)
        async with wire(small.ws_url) as again:
            await again.send(
                {
                    "type": "session.resume",
                    "session_id": session_id,
                    "resume_token": token,
                    "last_received_server_event_seq": 1,
                }
            )
            answer = await again.recv()
            assert answer["type"] == "session.resync_required"
            assert answer["reason"] == "journal_gap"


async def test_expired_after_the_disconnect_grace() -> None:
    with run_server("loopback-fast", disconnect_grace_s=0.2, reaper_interval_s=0.05) as quick:
        ctx, _client, created = await _open(quick.ws_url)
        session_id, token = created["session"]["id"], created["resume_token"]
        await ctx.__aexit__(None, None, None)
        omni = quick.app.state.omni
        for _ in range(400):
            if omni.get_session(session_id) is None:
                break
            await asyncio.sleep(0.05)
        async with wire(quick.ws_url) as late:
            await late.send(
                {"type": "session.resume", "session_id": session_id, "resume_token": token}
            )
            error = await late.recv()
            assert error["error"]["code"] == "session_resume_expired"


async def test_a_dropped_sockets_late_detach_cannot_expire_the_connection_that_resumed(
    monkeypatch,
) -> None:
    # Socket A drops. While its handler is still closing it (held here), the client
    # resumes on socket B. A's handler then detaches the lease *it* held; the engine
    # refuses (B holds a newer one), so B's session never starts a disconnect grace.
    from omniduplex.entrypoints.duplex.connection import RealtimeConnection

    closing, release = threading.Event(), threading.Event()
    real_abandon = RealtimeConnection.abandon

    async def held_abandon(self, code: int = 1000, reason: str = "") -> None:
        if reason == "detached":
            closing.set()
            await asyncio.to_thread(release.wait, 10)
        await real_abandon(self, code, reason)

    monkeypatch.setattr(RealtimeConnection, "abandon", held_abandon)
    with run_server("loopback-fast", disconnect_grace_s=0.3, reaper_interval_s=0.05) as server:
        ctx, _first, created = await _open(server.ws_url)
        session_id, token = created["session"]["id"], created["resume_token"]
        await ctx.__aexit__(None, None, None)
        assert await asyncio.to_thread(closing.wait, 10)
        async with wire(server.ws_url + "?resume=1") as second:
            await second.send(
                {
                    "type": "session.resume",
                    "session_id": session_id,
                    "resume_token": token,
                    "last_received_server_event_seq": created["server_event_seq"],
                }
            )
            assert (await second.recv())["type"] == "session.resumed"
            release.set()
            # Well past the grace (and many reaper passes): B's session is alive.
            await asyncio.sleep(1.0)
            await second.send({"type": "session.heartbeat"})
            answer = await second.until("session.heartbeat_ack")
        assert "session.expired" not in [e["type"] for e in answer]


async def test_the_loser_of_concurrent_resumes_is_told_of_the_conflict(server) -> None:
    outcomes = []
    for _ in range(12):
        ctx, _, created = await _open(server.ws_url)
        session_id, token = created["session"]["id"], created["resume_token"]
        resume = {"type": "session.resume", "session_id": session_id, "resume_token": token}

        async def attempt(resume=resume):
            async with wire(server.ws_url) as client:
                await client.send(resume)
                answer = await client.recv()
                if answer["type"] == "session.resumed":
                    await client.send({"type": "session.close"})
                    await client.until("session.closed")
                return answer

        answers = await asyncio.gather(attempt(), attempt())
        await ctx.__aexit__(None, None, None)
        assert sorted(a["type"] for a in answers) == ["error", "session.resumed"], answers
        error = next(a for a in answers if a["type"] == "error")["error"]
        outcomes.append(error["code"])
        assert error["type"] == "invalid_request_error", error
        assert "generation" not in error["message"], error["message"]
    assert set(outcomes) == {"session_resume_conflict"}, outcomes


async def test_a_replay_from_the_start_hands_out_no_resume_token(server) -> None:
    ctx, _, created = await _open(server.ws_url)
    session_id, token = created["session"]["id"], created["resume_token"]
    await ctx.__aexit__(None, None, None)
    resume = {
        "type": "session.resume",
        "session_id": session_id,
        "resume_token": token,
        "last_received_server_event_seq": 0,
    }
    async with wire(server.ws_url) as client:
        await client.send(resume)
        resumed = await client.recv()
        assert resumed["type"] == "session.resumed" and resumed["resume_token"] != token
        replayed = await client.recv()
        assert replayed["type"] == "session.created"
        assert replayed["server_event_seq"] == created["server_event_seq"]
        assert "resume_token" not in replayed
        assert replayed["session"] == created["session"]
        await client.send({"type": "session.close"})
        await client.until("session.closed")


async def _open_and_drop(url: str) -> tuple[str, str]:
    """A session whose socket then drops: detached, inside its disconnect grace."""
    ctx, _, created = await _open(url)
    await ctx.__aexit__(None, None, None)
    return created["session"]["id"], created["resume_token"]


async def _resume_answer(url: str, session_id: str, token: str) -> dict:
    async with wire(url) as client:
        resume = {"type": "session.resume", "session_id": session_id, "resume_token": token}
        await client.send(resume)
        return await client.recv()


async def test_when_full_a_new_session_takes_the_longest_detached_slot() -> None:
    with run_server("loopback-fast", max_sessions=2) as small:
        older = await _open_and_drop(small.ws_url)
        newer = await _open_and_drop(small.ws_url)
        ctx, _, _ = await _open(small.ws_url)  # full: the older one makes way
        answer = await _resume_answer(small.ws_url, *older)
        assert answer["error"]["code"] == "session_resume_expired", answer
        resumed = await _resume_answer(small.ws_url, *newer)  # the newer one lives on
        assert resumed["type"] == "session.resumed"
        await ctx.__aexit__(None, None, None)


async def test_when_full_with_none_detached_or_eviction_off_a_new_session_is_refused() -> None:
    for when_full, drop in (("evict_detached", False), ("refuse", True)):
        with run_server("loopback-fast", max_sessions=1, when_full=when_full) as small:
            ctx, _, _ = await _open(small.ws_url)
            if drop:
                await ctx.__aexit__(None, None, None)
            async with wire(small.ws_url) as late:
                await late.send({"type": "session.update", "session": {}})
                refused = await late.recv()
            assert refused["error"]["code"] == "resource_exhausted", refused
            if not drop:
                await ctx.__aexit__(None, None, None)
