"""A barge-in conversation with the loopback model, in process, paced in real time.

    python examples/inline_duplex.py [--deploy loopback|loopback-fast]

1. stream a 1.5 s chirp (16 kHz) at real time and commit it;
2. read the answer (24 kHz, 100 ms units, one transcript word per unit) and, after about
   300 ms of it, barge in: the response ends ``cancelled``;
3. acknowledge what was "played" (300 ms, truncating the assistant turn in history);
4. ask a second, shorter question and let the answer finish;
5. close, and print the timeline (ms offsets), transcripts, statuses and latencies.

Runs in about four seconds on the real-time ``loopback`` deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import numpy as np

from omniduplex.clients import EventCollector, InlineDuplexClient, loopback_session
from omniduplex.entrypoints.duplex_omni import DuplexOmni

INPUT_RATE_HZ = 16_000
BARGE_IN_AFTER_MS = 300
TIMEOUT_S = 30.0
# Timeline rows not worth a line each: shown as a count instead.
QUIET = frozenset({"input_audio_buffer.append"})


def chirp(ms: int, *, rate: int = INPUT_RATE_HZ, f0: float = 200.0, f1: float = 800.0) -> bytes:
    """A linear chirp as PCM16 bytes (loud enough for the loopback model's speech gate)."""
    n = rate * ms // 1000
    freq = np.linspace(f0, f1, n)
    phase = 2 * np.pi * np.cumsum(freq) / rate
    return (0.3 * np.sin(phase) * 32767).astype("<i2").tobytes()


async def converse(deploy: str) -> int:
    async with DuplexOmni(deploy) as omni:
        client = await InlineDuplexClient.open(omni, loopback_session())
        collector = EventCollector().attach(client)
        async with client:
            print(f"session {client.session_id} on {deploy!r}")
            responses = client.responses()

            # Turn 1: speak, then interrupt the answer after ~300 ms of it.
            sent_ms = await client.stream_pcm(
                chirp(1500), sample_rate_hz=INPUT_RATE_HZ, chunk_ms=20, realtime=True
            )
            await client.commit()
            first = await responses.next(timeout=TIMEOUT_S)
            async for _chunk in first.audio():
                if first.received_ms >= BARGE_IN_AFTER_MS:
                    break
            heard_ms = first.received_ms
            await client.barge_in()
            await first.wait(TIMEOUT_S)
            await client.ack_playback(first.response_id, heard_ms, truncate=True)
            print(
                f"turn 1: sent {sent_ms:.0f} ms; {first.status} after {heard_ms:.0f} ms "
                f"of audio; transcript {first.transcript!r}"
            )

            # Turn 2: a shorter question, answered in full.
            await client.stream_pcm(chirp(800, f0=500.0, f1=300.0), sample_rate_hz=INPUT_RATE_HZ)
            await client.commit()
            second = await responses.next(timeout=TIMEOUT_S)
            await second.wait(TIMEOUT_S)
            print(
                f"turn 2: {second.status}, {second.received_ms:.0f} ms of audio at "
                f"{second.sample_rate_hz} Hz; transcript {second.transcript!r}"
            )
        # Leaving the block closed the session: session.closed is the last event.

    print("\ntimeline (ms, -> sent / <- received):")
    quiet = 0
    for at_ms, direction, kind in collector.timeline():
        if kind in QUIET:
            quiet += 1
            continue
        print(f"  {at_ms:8.1f}  {direction} {kind}")
    print(f"  ({quiet} input_audio_buffer.append commands not shown)")

    summary = collector.summary()
    print("\nresponses:")
    for rid, info in summary["responses"].items():
        print(
            f"  {rid}: {info['status']}, {info['audio_ms']:.0f} ms, "
            f"commit->first audio {info['commit_to_first_audio_ms']} ms, "
            f"cancel->done {info['cancel_to_done_ms']} ms"
        )
    print(f"errors: {summary['errors']}, closed: {summary['closed']}")
    # On a deployment with no pacing the first answer is complete before the barge-in.
    interrupted = first.status == "cancelled" or (deploy != "loopback" and first.done)
    ok = (
        interrupted
        and second.status == "completed"
        and summary["errors"] == 0
        and collector.types[-1] == "session.closed"
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploy", default="loopback", help="deployment (default: loopback)")
    args = parser.parse_args(argv)
    return asyncio.run(converse(args.deploy))


if __name__ == "__main__":
    sys.exit(main())
