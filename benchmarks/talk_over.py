"""Talking over the assistant on a paced server (issue 14's measurements).

The ``cascade-rules`` deployment (ASR restricted to the benchmark's sentences, rule
responder, espeak-ng voice) is served by ``omniduplex serve`` in a subprocess, twice:
paced (the default playout clock, ``output_audio_lead_ms`` 300) and unpaced
(``output_audio_pacing: none``, the baseline: a server that sends audio as fast as it
is made, as before the clock). Each run: ``--sessions`` clients at once (4 by default:
the cascade's ASR pool, so no round waits for a decoder), each asking
``--rounds`` questions in real time; once an answer's first audio has arrived plus
``--talk-after-ms``, the client talks over it (in real time, server VAD), then waits
for the interruption's own answer. Per interruption, client-side:

- ``talk_to_last_audio``: the interrupting speech's first sample sent -> the last audio
  byte of the interrupted answer received (0 when nothing came after);
- ``unheard_at_talk_ms``: audio of the answer the client held but could not yet have
  played when the user started talking (received minus the time since its first audio):
  what a client without its own cut keeps playing over the user;
- ``audio_after_done``: audio deltas of the answer after its ``response.done``;
- the answer's status (``cancelled`` when the server cut it);
- ``first_audio``: the question's last speech sample -> the answer's first audio.

Memory: ``loopback-fast`` (which makes a reply in milliseconds) in a subprocess,
``--memory-sessions`` sessions each asked for a 60 s reply, paced and unpaced: server RSS
per session while the replies play out, over the RSS with the sessions open.

Run: ``python benchmarks/talk_over.py [--sessions 4] [--rounds 13] [--quick]``; writes
``benchmarks/results/talk_over.json`` and prints the comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml
from websockets.asyncio.client import connect

from omniduplex.config.pipeline import DEPLOY_DIR
from omniduplex.model_executor.models.cascade.synthetic import pcm16, say
from paced_session import RATE, PacedSession
from serving import Server, speech

RESULTS = Path(__file__).parent / "results"
SENTENCES = ["What time is it?", "What day is it?", "Stop please.", "Hello."]
SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 300}
UNPACED = {"output_audio_pacing": "none"}


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(float(np.percentile(values, 50)), 2),
        "p95": round(float(np.percentile(values, 95)), 2),
        "max": round(float(np.max(values)), 2),
    }


def write_deploy(folder: Path, sentences: list[str] | None = None) -> Path:
    """The cascade with its ASR restricted to ``sentences`` (exact on espeak speech)."""
    raw = yaml.safe_load((DEPLOY_DIR / "cascade-rules.yaml").read_text())
    kwargs = raw["stages"][0]["model"]["kwargs"]
    kwargs["asr_sentences"] = sentences or SENTENCES
    for stage in raw["stages"]:
        stage["model"]["kwargs"] = kwargs
    path = folder / "cascade-talk-over.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def spoken(text: str, lead_ms: int, tail_ms: int) -> tuple[bytes, float]:
    """pcm16 at RATE, and the offset (s) of its last speech sample."""
    voice = say(text, RATE)
    lead = np.zeros(RATE * lead_ms // 1000, np.float32)
    tail = np.zeros(RATE * tail_ms // 1000, np.float32)
    return pcm16(np.concatenate((lead, voice, tail))), (lead.size + voice.size) / RATE


def audio_ms(event: dict[str, Any]) -> float:
    return len(base64.b64decode(event["delta"])) / 2 / RATE * 1000


async def talk_over_session(url: str, session: dict[str, Any], rounds: int, after_s: float):
    ws = await connect(url, max_size=None)
    paced = PacedSession(ws)
    rows: list[dict[str, Any]] = []
    question, question_end = spoken("What time is it?", 300, 700)
    interrupt, _ = spoken("Stop please.", 0, 900)
    try:
        await paced.wait_for("session.created", 0)
        update = {**session, "turn_detection": SERVER_VAD}
        await ws.send(orjson.dumps({"type": "session.update", "session": update}).decode())
        await paced.wait_for("session.updated", 0)
        for _ in range(rounds):
            mark = len(paced.events)
            t0 = await paced.send_pcm(question)
            t_first, first = await paced.wait_for("response.output_audio.delta", mark)
            answer = first["response_id"]
            await asyncio.sleep(max(0.0, t_first + after_s - time.perf_counter()))
            mark2 = len(paced.events)
            talk = asyncio.create_task(paced.send_pcm(interrupt))
            t_done, done = await _done_of(paced, answer, mark)
            t_talk = await talk
            ours = [
                (t, e)
                for t, e in paced.events[mark:]
                if e.get("response_id") == answer and e["type"] == "response.output_audio.delta"
            ]
            before = sum(audio_ms(e) for t, e in ours if t < t_talk)
            rows.append(
                {
                    "status": done["response"]["status"],
                    "talk_to_last_audio_ms": max(0.0, (ours[-1][0] - t_talk) * 1000),
                    "unheard_at_talk_ms": max(0.0, before - (t_talk - t_first) * 1000),
                    "audio_after_done": sum(t > t_done for t, _ in ours),
                    "first_audio_ms": (t_first - (t0 + question_end)) * 1000,
                }
            )
            # The interruption is a turn of its own: let its answer end before the next.
            await _done_of(paced, await _next_answer(paced, answer, mark2), mark2)
    finally:
        await ws.close()
    return rows


async def _next_answer(paced: PacedSession, previous: str, after: int) -> str:
    """The id of the first response created after index ``after`` that is not ``previous``."""
    while True:
        for _, event in paced.events[after:]:
            if event["type"] == "response.created" and event["response"]["id"] != previous:
                return event["response"]["id"]
        await asyncio.sleep(0.002)


async def _done_of(paced: PacedSession, response_id: str, after: int):
    while True:
        found = next(
            (
                (t, e)
                for t, e in paced.events[after:]
                if e["type"] == "response.done" and e["response"]["id"] == response_id
            ),
            None,
        )
        if found is not None:
            return found
        await asyncio.sleep(0.002)


async def talk_over_run(deploy: Path, session: dict[str, Any], args: argparse.Namespace):
    server = Server(str(deploy))
    try:
        await server.wait_ready()
        url = server.url("?model=cascade")
        per_session = await asyncio.gather(
            *(
                talk_over_session(url, session, args.rounds, args.talk_after_ms / 1000)
                for _ in range(args.sessions)
            )
        )
    finally:
        server.stop()
    rows = [row for rows in per_session for row in rows]
    return {
        "interruptions": len(rows),
        "cancelled": sum(row["status"] == "cancelled" for row in rows),
        "talk_to_last_audio_ms": percentiles([r["talk_to_last_audio_ms"] for r in rows]),
        "unheard_at_talk_ms": percentiles([r["unheard_at_talk_ms"] for r in rows]),
        "audio_after_done_max": max(r["audio_after_done"] for r in rows),
        "first_audio_ms": percentiles([r["first_audio_ms"] for r in rows]),
    }


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def memory_run(session: dict[str, Any], sessions: int) -> dict[str, Any]:
    server = Server("loopback-fast")
    question = speech(60_000)
    sockets = []
    try:
        await server.wait_ready()
        for _ in range(sessions):
            ws = await connect(server.url("?model=loopback"), max_size=None)
            await ws.recv()
            update = {"type": "session.update", "session": session}
            await ws.send(orjson.dumps(update).decode())
            while orjson.loads(await ws.recv())["type"] != "session.updated":
                pass
            sockets.append(ws)
        await asyncio.sleep(0.5)
        idle = rss_bytes(server.proc.pid)
        readers = [asyncio.create_task(_drain(ws)) for ws in sockets]
        for ws in sockets:
            for chunk in question:
                append = {"type": "input_audio_buffer.append", "audio": chunk}
                await ws.send(orjson.dumps(append).decode())
            await ws.send('{"type":"input_audio_buffer.commit"}')
            await ws.send('{"type":"response.create"}')
        await asyncio.sleep(5.0)  # the replies are made; paced ones are still playing
        playing = rss_bytes(server.proc.pid)
        for task in readers:
            task.cancel()
    finally:
        for ws in sockets:
            await ws.close()
        server.stop()
    return {
        "sessions": sessions,
        "reply_s": 60,
        "rss_idle_mb": round(idle / 2**20, 1),
        "rss_playing_mb": round(playing / 2**20, 1),
        "per_session_mb": round((playing - idle) / sessions / 2**20, 2),
    }


async def _drain(ws: Any) -> None:
    async for _ in ws:
        pass


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "sessions": args.sessions,
        "rounds": args.rounds,
        "talk_after_ms": args.talk_after_ms,
    }
    with tempfile.TemporaryDirectory() as folder:
        deploy = write_deploy(Path(folder))
        result["paced"] = await talk_over_run(deploy, {}, args)
        result["unpaced"] = await talk_over_run(deploy, UNPACED, args)
    result["memory"] = {
        "paced": await memory_run({"output_audio_pacing": "realtime"}, args.memory_sessions),
        "unpaced": await memory_run(UNPACED, args.memory_sessions),
    }
    return result


def report(result: dict[str, Any]) -> None:
    print(f"{result['sessions']} sessions x {result['rounds']} interruptions, cascade")
    print(f"{'':38}{'paced':>12}{'unpaced':>12}")
    paced, unpaced = result["paced"], result["unpaced"]
    rows = [
        ("answers cut (cancelled)", "cancelled", None),
        ("talk-over -> last audio p50 ms", "talk_to_last_audio_ms", "p50"),
        ("talk-over -> last audio p95 ms", "talk_to_last_audio_ms", "p95"),
        ("unheard audio at talk-over p50 ms", "unheard_at_talk_ms", "p50"),
        ("unheard audio at talk-over max ms", "unheard_at_talk_ms", "max"),
        ("audio deltas after response.done", "audio_after_done_max", None),
        ("first audio p50 ms", "first_audio_ms", "p50"),
        ("first audio p95 ms", "first_audio_ms", "p95"),
    ]
    for label, key, sub in rows:
        a = paced[key] if sub is None else paced[key][sub]
        b = unpaced[key] if sub is None else unpaced[key][sub]
        print(f"{label:38}{a:>12}{b:>12}")
    memory = result["memory"]
    print(
        f"{'server MB per session, 60 s reply':38}"
        f"{memory['paced']['per_session_mb']:>12}{memory['unpaced']['per_session_mb']:>12}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=13)
    parser.add_argument("--talk-after-ms", type=int, default=300)
    parser.add_argument("--memory-sessions", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="2 sessions x 2 rounds")
    parser.add_argument("--out", type=Path, default=RESULTS / "talk_over.json")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.rounds, args.memory_sessions = 2, 2, 3
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    report(result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
