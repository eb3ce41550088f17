"""Many sessions on one server: admission, resume after a drop, takeover, expiry.

Start a server with a small session limit and a short disconnect grace (a deploy file
that extends the shipped ``loopback`` deployment)::

    cat > /tmp/loopback-demo.yaml <<'EOF'
    base_config: loopback.yaml
    duplex_session:
      max_sessions: 3
      disconnect_grace_s: 1.0
      reaper_interval_s: 0.1
    EOF
    omniduplex serve /tmp/loopback-demo.yaml --port 8000
    python examples/multi_session.py --url ws://127.0.0.1:8000/v1/realtime --grace-s 1.0

What it shows, each step printed with its events:

1. admission: open sessions until the server refuses one (``resource_exhausted``), then
   close one and show that its slot is reused;
2. resume: drop a socket in the middle of an answer; the client resumes on a new socket
   and the answer completes: every ``server_event_seq`` arrives exactly once, in order,
   and the audio is all there;
3. takeover: a second connection resumes a session that is still attached; the first
   connection gets ``session.replaced`` and the second carries on;
4. expiry: abandon a session (no ``session.close``); once the disconnect grace ran out a
   resume is refused with ``session_resume_expired``.

Takes a few seconds. Exits 0 when every step behaved as described.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import numpy as np

from omniduplex.clients import DuplexProtocolError, loopback_session
from omniduplex.clients.duplex import (
    ConnectionResumed,
    DuplexClient,
    DuplexResumeError,
    ReconnectPolicy,
)

INPUT_RATE_HZ = 16_000
TIMEOUT_S = 30.0
QUICK_RETRY = ReconnectPolicy(max_attempts=5, min_backoff_s=0.05, max_backoff_s=0.5)


def chirp(ms: int, *, f0: float = 200.0, f1: float = 800.0) -> bytes:
    n = INPUT_RATE_HZ * ms // 1000
    freq = np.linspace(f0, f1, n)
    phase = 2 * np.pi * np.cumsum(freq) / INPUT_RATE_HZ
    return (0.3 * np.sin(phase) * 32767).astype("<i2").tobytes()


class Clock:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def say(self, text: str) -> None:
        print(f"  {1000 * (time.perf_counter() - self.start):8.1f} ms  {text}")


async def open_session(url: str, **kwargs) -> DuplexClient:
    return await DuplexClient.connect(url, session=loopback_session(), **kwargs)


# ---- 1. admission --------------------------------------------------------------------------


async def admission(url: str, clock: Clock, max_probe: int) -> bool:
    print("\n1. admission: open sessions until the server refuses one")
    clients: list[DuplexClient] = []
    refused: DuplexProtocolError | None = None
    try:
        while len(clients) < max_probe:
            try:
                clients.append(await open_session(url, reconnect=None))
            except DuplexProtocolError as exc:
                refused = exc
                break
        if refused is None:
            clock.say(f"{len(clients)} sessions open and none refused (raise --max-probe)")
            return False
        clock.say(f"{len(clients)} sessions open; the next one: {refused.code} ({refused})")
        await clients.pop(0).close()
        clock.say("closed one session")
        # The slot frees once the engine has released the session's resources.
        for _ in range(100):
            try:
                clients.append(await open_session(url, reconnect=None))
                break
            except DuplexProtocolError as exc:
                if exc.code != "resource_exhausted":
                    raise
                await asyncio.sleep(0.02)
        else:
            clock.say("the freed slot was never reused")
            return False
        clock.say(f"its slot was reused by {clients[-1].session_id}")
        return refused.code == "resource_exhausted"
    finally:
        await asyncio.gather(*(client.close() for client in clients))


# ---- 2. resume after a drop ---------------------------------------------------------------


async def resume_after_drop(url: str, clock: Clock) -> bool:
    print("\n2. resume: drop the socket in the middle of an answer")
    seqs: list[int] = []
    async with await open_session(url, reconnect=QUICK_RETRY) as client:
        seqs.append(client.last_seq)  # session.created

        def on_event(kind: str, event: object, _at: float) -> None:
            if kind != "event":
                return
            seq = client.seq_of(event)
            if seq is not None:
                seqs.append(seq)
            if isinstance(event, ConnectionResumed):
                clock.say(
                    f"<- connection.resumed (attempt {event.attempt}, replay after seq "
                    f"{event.last_seq}, generation {event.attachment_generation})"
                )

        client.add_listener(on_event)
        responses = client.responses()
        sent_ms = await client.stream_pcm(chirp(1000), sample_rate_hz=INPUT_RATE_HZ)
        await client.commit()
        answer = await responses.next(timeout=TIMEOUT_S)
        async for _chunk in answer.audio():
            if answer.received_ms >= 300:
                break
        clock.say(f"got {answer.received_ms:.0f} ms of the answer, seq {client.last_seq}: drop!")
        client.drop_connection()
        await answer.wait(TIMEOUT_S)
        clock.say(
            f"answer {answer.status} with {answer.received_ms:.0f} ms of audio "
            f"(asked {sent_ms:.0f} ms); resumes: {client.resumes}"
        )
    contiguous = seqs == list(range(1, len(seqs) + 1))
    clock.say(
        f"seqs 1..{seqs[-1]}: {'each exactly once, in order' if contiguous else 'BROKEN'}; "
        f"closed: {client.closed_reason}"
    )
    return (
        contiguous
        and client.resumes == 1
        and answer.status == "completed"
        and abs(answer.received_ms - sent_ms) < 1.0
    )


# ---- 3. takeover ----------------------------------------------------------------------------


async def takeover(url: str, clock: Clock) -> bool:
    print("\n3. takeover: a second connection takes an attached session over")
    first = await open_session(url)
    clock.say(f"connection A serves {first.session_id}")
    second = await DuplexClient.resume(url, first.session_id, first.resume_token, first.last_seq)
    async with second:
        clock.say(f"connection B resumed it (attachment generation {second.attachment_generation})")
        reason = await first.wait_closed(TIMEOUT_S)
        clock.say(f"connection A ended: {reason}")
        mark = second.mark()
        await second.send({"type": "session.heartbeat"})
        await second.wait_for("session.heartbeat_ack", TIMEOUT_S, since=mark)
        clock.say("connection B: session.heartbeat -> session.heartbeat_ack")
    await first.aclose()
    clock.say(f"connection B closed the session: {second.closed_reason}")
    return reason == "session_replaced" and second.closed_reason == "client_close"


# ---- 4. expiry ------------------------------------------------------------------------------


async def expiry(url: str, clock: Clock, grace_s: float, timeout_s: float) -> bool:
    print(f"\n4. expiry: abandon a session; resume after the {grace_s} s grace")
    client = await open_session(url)
    session_id, token, last_seq = client.session_id, client.resume_token, client.last_seq
    await client.aclose()  # no session.close: the server keeps it for the grace
    clock.say(f"abandoned {session_id}")
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        await asyncio.sleep(grace_s * 1.5)
        try:
            again = await DuplexClient.resume(url, session_id, token, last_seq)
        except DuplexResumeError as exc:
            clock.say(f"resume refused: {exc.code}")
            return exc.code == "session_resume_expired"
        # Still there (the grace is longer than --grace-s): let go again and wait.
        clock.say("still resumable; letting go again")
        token, last_seq = again.resume_token, again.last_seq
        await again.aclose()
    clock.say("the session never expired: is the server's disconnect grace --grace-s?")
    return False


async def run(args: argparse.Namespace) -> int:
    clock = Clock()
    results = {
        "admission": await admission(args.url, clock, args.max_probe),
        "resume": await resume_after_drop(args.url, clock),
        "takeover": await takeover(args.url, clock),
        "expiry": await expiry(args.url, clock, args.grace_s, args.expire_timeout_s),
    }
    print("\n" + ", ".join(f"{name}: {'ok' if ok else 'FAILED'}" for name, ok in results.items()))
    return 0 if all(results.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime")
    parser.add_argument("--grace-s", type=float, default=1.0, help="the server's disconnect grace")
    parser.add_argument("--expire-timeout-s", type=float, default=15.0)
    parser.add_argument("--max-probe", type=int, default=128, help="most sessions to open")
    args = parser.parse_args(argv)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
