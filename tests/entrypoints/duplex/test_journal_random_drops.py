"""Resume over random drops: every event arrives exactly once, in order, with no gap.

The journal half of "Resume: 0 events lost or duplicated over 1000 random drops". A server
stream is sequenced through the registry while a client connection drops at random points:
frames in flight are lost, sometimes the server notices late (the new socket takes over a
half-open one), sometimes events are produced while nobody is attached, and the client acks
at random. After each drop the client resumes from the last seq it saw and appends the
replay. At the end it holds the whole stream exactly once.
"""

from __future__ import annotations

import random

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from omniduplex.entrypoints.duplex.session_attachment import DuplexSessionAttachmentRegistry

SID = "duplex-" + "cd" * 16


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Socket:
    """The server side of one connection: frames written, not all of them delivered."""

    def __init__(self) -> None:
        self.outbox: list[bytes] = []


class Client:
    def __init__(self) -> None:
        self.received: list[bytes] = []

    @property
    def last_seq(self) -> int:
        return orjson.loads(self.received[-1])["server_event_seq"] if self.received else 0


def _event(n: int) -> dict:
    return {"type": "response.output_audio.delta", "event_id": f"event_{n:032x}", "delta": n}


def _run(rng: random.Random, drops: int, ttl_s: float = 60.0) -> tuple[Client, int, int]:
    clock = Clock()
    registry = DuplexSessionAttachmentRegistry(
        replay_ttl_s=ttl_s, replay_max_bytes_per_session=1 << 24, clock=clock
    )
    socket = Socket()
    token, _ = registry.register(SID, resumable=True, socket=socket)
    client = Client()
    produced = 0

    def produce(count: int) -> None:
        nonlocal produced
        for _ in range(count):
            produced += 1
            encoded = registry.journal(SID).append(_event(produced))[1]
            current = registry.socket_of(SID)
            if current is not None:
                current.outbox.append(encoded)
            clock.now += 0.001

    def deliver(sock: Socket, count: int) -> None:
        client.received.extend(sock.outbox[:count])
        del sock.outbox[:count]

    for _ in range(drops):
        produce(rng.randint(0, 30))
        deliver(socket, rng.randint(0, len(socket.outbox)))  # the rest is lost in flight
        if client.received and rng.random() < 0.3:
            registry.journal(SID).ack(rng.randint(0, client.last_seq))
        if rng.random() < 0.5:
            registry.detach(SID, socket)  # the server noticed the drop
            produce(rng.randint(0, 5))  # events while nobody is attached
        new = Socket()
        grant = registry.resume(SID, token, client.last_seq, new)
        if grant.previous_socket is not None:
            assert grant.previous_socket is socket  # half-open takeover
            assert registry.detach(SID, socket) is False
        client.received.extend(grant.replay)
        if rng.random() < 0.9:
            registry.confirm_resume(SID, grant.generation)
        token, socket = grant.new_token, new
    produce(rng.randint(1, 10))
    deliver(socket, len(socket.outbox))
    return client, produced, registry.generation(SID)


def _assert_exact(client: Client, produced: int) -> None:
    events = [orjson.loads(b) for b in client.received]
    assert [e["server_event_seq"] for e in events] == list(range(1, produced + 1))
    assert [e["delta"] for e in events] == list(range(1, produced + 1))
    assert len({e["event_id"] for e in events}) == produced


def test_1000_random_drops_lose_and_duplicate_nothing() -> None:
    client, produced, generation = _run(random.Random(20261129), drops=1000)
    assert generation == 1001
    assert produced > 10_000
    _assert_exact(client, produced)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), drops=st.integers(1, 40))
def test_random_drop_schedules_lose_and_duplicate_nothing(seed: int, drops: int) -> None:
    client, produced, _ = _run(random.Random(seed), drops=drops)
    _assert_exact(client, produced)
