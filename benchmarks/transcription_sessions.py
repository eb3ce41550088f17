"""How many concurrent transcription sessions one process holds, against conversations.

One in-process ``DuplexOmni`` on ``cascade-rules`` (Silero VAD, pocketsphinx, the rule
responder, espeak-ng). At each level N, N sessions of one kind open at once and each
speaks the same espeak sentence in 100 ms appends, paced in real time, then 1.5 s of
silence (server_vad ends the turn). A transcription session is done at its
``conversation.item.input_audio_transcription.completed``, a conversation at its
``response.done`` (the reply is paced out in real time, so it is timed to its first audio
delta instead). Latency: last speech sample appended -> that event. A level is *held*
when every session got there within ``--bound-ms`` (default 2000) of its end of speech.

First run (this 2-core machine, shared with other work; all sessions speak at the same
instant, the worst case; a warm-up builds the decoders first): N=1/4/8/16 transcription
p50 648/934/2782/5871 ms, conversations (to first reply audio) 603/1052/2573/8295 ms;
held within 2 s: 4 of each. Both kinds wait on the same pocketsphinx decoding
(``asr_pool_size`` 4 decoders, the same cores): a transcription session saves the reply's
work (rules and espeak here, cheap), not the recogniser's, so on this deployment it is
barely cheaper at equal speech.

Run: ``python benchmarks/transcription_sessions.py [--levels 4,8,16,32]``; prints a table
and writes ``benchmarks/results/transcription_sessions.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.cascade.synthetic import pcm16, say
from omniduplex.protocol.duplex import command_from_realtime

RATE = 16_000
PIECE_MS = 100
SENTENCE = "what time is it"
OUT = Path(__file__).parent / "results" / "transcription_sessions.json"
DONE = {
    "transcription": "conversation.item.input_audio_transcription.completed",
    "realtime": "response.output_audio.delta",
}


def _appends(samples: np.ndarray) -> list[Any]:
    step = RATE * PIECE_MS // 1000
    return [
        command_from_realtime(
            {
                "type": "input_audio_buffer.append",
                "audio": base64.b64encode(pcm16(samples[k : k + step])).decode(),
                "format": {"type": "audio/pcm", "rate": RATE},
            }
        )
        for k in range(0, samples.size, step)
    ]


async def _one(omni: DuplexOmni, kind: str, speech: list[Any], silence: list[Any]) -> float:
    """One session's latency (s) from its last speech append to its kind's event."""
    payload = {"type": "transcription"} if kind == "transcription" else {}
    handle = await omni.open_session(payload)
    wanted = DONE[kind]
    try:
        events = handle.events().__aiter__()
        start = time.perf_counter()
        for k, command in enumerate(speech):
            handle.submit(command)
            await asyncio.sleep(max(0.0, start + (k + 1) * PIECE_MS / 1000 - time.perf_counter()))
        spoken = time.perf_counter()

        async def finish() -> None:
            for k, command in enumerate(silence):
                handle.submit(command)
                await asyncio.sleep(
                    max(0.0, spoken + (k + 1) * PIECE_MS / 1000 - time.perf_counter())
                )

        feeder = asyncio.create_task(finish())
        while True:
            event = await asyncio.wait_for(events.__anext__(), 60.0)
            if event.type == "error":
                raise RuntimeError(f"{kind} session error: {event}")
            if event.type == wanted:
                break
        feeder.cancel()
        return time.perf_counter() - spoken
    finally:
        await handle.close()


async def _level(omni: DuplexOmni, kind: str, n: int) -> dict[str, Any]:
    speech = _appends(say(SENTENCE, RATE, lead_ms=300))
    silence = _appends(np.zeros(RATE * 3 // 2, dtype=np.float32))
    results = await asyncio.gather(
        *(_one(omni, kind, speech, silence) for _ in range(n)), return_exceptions=True
    )
    latencies = sorted(r for r in results if isinstance(r, float))
    failures = [repr(r) for r in results if not isinstance(r, float)]
    return {
        "kind": kind,
        "sessions": n,
        "completed": len(latencies),
        "failures": failures[:3],
        "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
        "max_ms": 1000 * latencies[-1] if latencies else None,
    }


async def main(levels: list[int], bound_ms: float) -> dict[str, Any]:
    pipeline = load_deploy_config("cascade-rules")
    most = max(levels)
    limits = {"max_sessions": most, "max_transcription_sessions": most}
    pipeline = dataclasses.replace(pipeline, duplex_session={**pipeline.duplex_session, **limits})
    rows = []
    async with DuplexOmni(pipeline) as omni:
        # Decoders are built on first use (about 0.3 s each): build the pool's before
        # timing, so neither kind pays for them.
        await _level(omni, "transcription", 4)
        for n in levels:
            for kind in ("transcription", "realtime"):
                row = await _level(omni, kind, n)
                row["held"] = not row["failures"] and (row["max_ms"] or 1e12) <= bound_ms
                rows.append(row)
                print(
                    f"{kind:13s} N={n:3d} done={row['completed']:3d} "
                    f"p50={row['p50_ms'] or 0:7.0f} ms max={row['max_ms'] or 0:7.0f} ms "
                    f"held={row['held']}"
                )
    held = {
        kind: max((r["sessions"] for r in rows if r["kind"] == kind and r["held"]), default=0)
        for kind in ("transcription", "realtime")
    }
    return {"bound_ms": bound_ms, "levels": rows, "most_held": held}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="4,8,16,32")
    parser.add_argument("--bound-ms", type=float, default=2000.0)
    args = parser.parse_args()
    report = asyncio.run(main([int(x) for x in args.levels.split(",")], args.bound_ms))
    print("most held:", report["most_held"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
