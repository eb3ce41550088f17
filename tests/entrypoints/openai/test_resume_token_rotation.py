"""DESIGN decision 15: the resume token is rotated on every resume, over real sockets.

Once a client holds the token ``session.resumed`` gave it, the token it presented is no
longer a credential: a later resume with it is refused even when no socket is attached
(the case a token that merely stayed valid would let through), while the new token
resumes.
"""

from __future__ import annotations

import asyncio

import pytest
from server_harness import run_server, wire

# A guard against hangs only; no assertion depends on how long anything takes.
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def server():
    with run_server("loopback-fast") as running:
        yield running


async def _detached(server, session_id: str) -> None:
    """Wait until the server has seen the dropped socket go (the session is detached)."""
    registry = server.handler.registry

    async def poll() -> None:
        while registry.socket_of(session_id) is not None:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), TIMEOUT_S)


async def _resume(server, session_id: str, token: str, last_seq: int) -> dict:
    async with wire(server.ws_url + "?resume=1") as client:
        await client.send(
            {
                "type": "session.resume",
                "session_id": session_id,
                "resume_token": token,
                "last_received_server_event_seq": last_seq,
            }
        )
        answer = await client.recv()
    await _detached(server, session_id)
    return answer


async def test_a_resume_makes_the_presented_token_worthless(server) -> None:
    async with wire(server.ws_url + "?model=loopback") as client:
        created = await client.recv()
        assert created["type"] == "session.created"
    session_id, first = created["session"]["id"], created["resume_token"]
    seq = created["server_event_seq"]
    await _detached(server, session_id)

    resumed = await _resume(server, session_id, first, seq)
    assert resumed["type"] == "session.resumed", resumed
    second = resumed["resume_token"]
    assert second and second != first

    # Detached again, nobody racing: the token the resume presented must not work.
    refused = await _resume(server, session_id, first, seq)
    assert refused["type"] == "error", refused
    assert refused["error"]["code"] in ("invalid_resume_token", "session_resume_conflict")

    # The rotated one does, and rotates again.
    again = await _resume(server, session_id, second, seq)
    assert again["type"] == "session.resumed", again
    third = again["resume_token"]
    assert third not in (first, second)
    refused = await _resume(server, session_id, second, seq)
    assert refused["type"] == "error", refused
    refused = await _resume(server, session_id, first, seq)
    assert refused["type"] == "error", refused
