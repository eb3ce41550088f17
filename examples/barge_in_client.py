"""Barge in on a spoken answer, over the network (or in process), and keep the audio.

Start a server, then run the client against it::

    omniduplex serve loopback --port 8000
    python examples/barge_in_client.py --url ws://127.0.0.1:8000/v1/realtime --out duplex_out

or run the same scenario in this process, with no server::

    python examples/barge_in_client.py --inline --out duplex_out

The scenario:

1. stream a synthetic question (a 1.5 s chirp, 16 kHz) at real-time pace and commit it;
2. play the answer until ``--interrupt-after-ms`` of it arrived, then interrupt it
   (``barge_in``, or ``response.cancel`` with ``--cancel``): it ends ``cancelled``;
3. acknowledge what was heard (truncating the assistant turn in history there);
4. ask again (a shorter chirp) and let the answer finish;
5. close; write one WAV per response into ``--out`` and print a timeline.

The ``loopback`` model answers with audio derived from what it heard, paced in real time,
so the whole run takes about four seconds. Exits 0 when the first answer was interrupted
and the second completed without errors.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import wave
from pathlib import Path
from typing import Any

import numpy as np

from omniduplex.clients import EventCollector, ResponseHandle, loopback_session
from omniduplex.clients.duplex import DuplexClient

INPUT_RATE_HZ = 16_000
TIMEOUT_S = 30.0
# Timeline rows not worth a line each: shown as a count instead.
QUIET = frozenset(
    {
        "input_audio_buffer.append",
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
    }
)


def chirp(ms: int, *, f0: float = 200.0, f1: float = 800.0) -> bytes:
    """A linear chirp as PCM16 bytes (loud enough for the loopback model's speech gate)."""
    n = INPUT_RATE_HZ * ms // 1000
    freq = np.linspace(f0, f1, n)
    phase = 2 * np.pi * np.cumsum(freq) / INPUT_RATE_HZ
    return (0.3 * np.sin(phase) * 32767).astype("<i2").tobytes()


def write_wav(path: Path, pcm16: bytes, rate_hz: int) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate_hz)
        out.writeframes(pcm16)


async def scenario(client: Any, args: argparse.Namespace) -> list[ResponseHandle]:
    """The conversation; returns the two responses."""
    responses = client.responses()

    # Turn 1: ask, then interrupt the answer part-way.
    sent_ms = await client.stream_pcm(
        chirp(args.question_ms), sample_rate_hz=INPUT_RATE_HZ, chunk_ms=20, realtime=True
    )
    await client.commit()
    first = await responses.next(timeout=TIMEOUT_S)
    async for _chunk in first.audio():
        if first.received_ms >= args.interrupt_after_ms:
            break
    heard_ms = first.received_ms
    if args.cancel:
        await client.cancel_response(first.response_id)
    else:
        await client.barge_in()
    await first.wait(TIMEOUT_S)
    await client.ack_playback(first.response_id, heard_ms, truncate=True)
    print(
        f"turn 1: asked {sent_ms:.0f} ms; answer {first.status} after {heard_ms:.0f} ms "
        f"({'response.cancel' if args.cancel else 'barge_in'}); transcript {first.transcript!r}"
    )

    # Turn 2: ask again, listen to the whole answer.
    sent_ms = await client.stream_pcm(
        chirp(args.question_ms // 2, f0=500.0, f1=300.0),
        sample_rate_hz=INPUT_RATE_HZ,
        chunk_ms=20,
        realtime=True,
    )
    await client.commit()
    second = await responses.next(timeout=TIMEOUT_S)
    await second.wait(TIMEOUT_S)
    print(
        f"turn 2: asked {sent_ms:.0f} ms; answer {second.status}, {second.received_ms:.0f} ms "
        f"at {second.sample_rate_hz} Hz; transcript {second.transcript!r}"
    )
    return [first, second]


async def run(args: argparse.Namespace) -> int:
    session = loopback_session()
    if args.inline:
        from omniduplex.clients import InlineDuplexClient
        from omniduplex.entrypoints.duplex_omni import DuplexOmni

        async with DuplexOmni(args.deploy) as omni:
            client = await InlineDuplexClient.open(omni, session)
            collector = EventCollector().attach(client)
            async with client:
                print(f"session {client.session_id} in process ({args.deploy!r})")
                answers = await scenario(client, args)
    else:
        client = await DuplexClient.connect(args.url, session=session, model=args.model)
        collector = EventCollector().attach(client)
        async with client:
            print(f"session {client.session_id} at {args.url}")
            answers = await scenario(client, args)
    return report(collector, answers, Path(args.out))


def report(collector: EventCollector, answers: list[ResponseHandle], out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    print(f"\nresponses (WAV files in {out}):")
    for index, answer in enumerate(answers, start=1):
        path = out / f"response_{index}_{answer.status}.wav"
        write_wav(path, answer.audio_bytes, answer.sample_rate_hz)
        print(f"  {path.name}: {answer.received_ms:.0f} ms, {answer.response_id}")

    print("\ntimeline (ms, -> sent / <- received):")
    quiet: dict[str, int] = {}
    for at_ms, direction, kind in collector.timeline():
        if kind in QUIET:
            quiet[kind] = quiet.get(kind, 0) + 1
            continue
        print(f"  {at_ms:8.1f}  {direction} {kind}")
    for kind, count in quiet.items():
        print(f"  ({count} x {kind} not shown)")

    summary = collector.summary()
    errors = summary["errors"]
    first, second = answers
    ok = (
        first.status == "cancelled"
        and second.status == "completed"
        and errors == 0
        and collector.types[-1] == "session.closed"
    )
    print(f"\nerrors: {errors}; interrupted: {first.cancelled}; {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime")
    where.add_argument("--inline", action="store_true", help="run in process, no server")
    parser.add_argument("--deploy", default="loopback", help="deployment for --inline")
    parser.add_argument("--model", default=None, help="model name for the session")
    parser.add_argument("--out", default="duplex_out", help="directory for the WAV files")
    parser.add_argument("--question-ms", type=int, default=1500)
    parser.add_argument("--interrupt-after-ms", type=float, default=400.0)
    parser.add_argument("--cancel", action="store_true", help="response.cancel, not barge_in")
    args = parser.parse_args(argv)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
