"""Cascade concurrency: how many conversations one server process sustains.

One ``omniduplex serve`` process (a subprocess) runs the ``cascade-rules`` deployment as
shipped except that, as in ``benchmarks/cascade.py``, the ASR is restricted to the
benchmark's sentences (``--free-asr`` uses the en-US language model instead). The client
(this process) ramps 1, 2, 4, 8, 16 concurrent Realtime sessions, then 24, 32, 48, 64
(the server gets ``--max-sessions`` of the largest level, above the shipped 16); the ramp
stops at the first level past the knee. Each session speaks espeak-ng utterances paced in
real time (32 ms appends) with OpenAI's server_vad, waits for ``response.done``, pauses
briefly and speaks the next one; session starts are staggered over one utterance so turns
do not all end at the same instant. Client and server share the machine: at the highest
levels the client's own pacing competes for the same cores.

Per turn: end of speech (last speech sample sent) -> first ``response.output_audio.delta``.
That includes server_vad's 500 ms ``silence_duration_ms`` (the turn-taking policy). A level
is *sustained* when its p95 stays within twice the 1-session p95 and no turn failed; the
answer is the largest sustained level.

The server's peak resident memory is read after every level (``/proc``, Linux): the
decoder pool (``asr_pool_size``) and the session bounds keep it from growing with the
number of conversations beyond a few MB each.

Run: ``python benchmarks/cascade_concurrency.py [--levels 1,2,4,8,16,24,32,48,64] [--free-asr]``;
prints a table and writes ``benchmarks/results/cascade_concurrency.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml
from websockets.asyncio.client import connect

from omniduplex.config.pipeline import DEPLOY_DIR
from omniduplex.model_executor.models.cascade.asr import normalise_sentence
from omniduplex.model_executor.models.cascade.synthetic import pcm16, say
from paced_session import RATE, PacedSession

SENTENCES = [
    "What time is it?",
    "What day is it?",
    "Hello.",
    "Thank you.",
    "What is your name?",
    "Can you help me?",
]
SERVER_VAD = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
}
LEAD_MS, TAIL_MS = 300, 900
PAUSE_S = 0.3
RESULTS = Path(__file__).resolve().parent / "results"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_deploy(folder: Path, free_asr: bool) -> Path:
    raw = yaml.safe_load((DEPLOY_DIR / "cascade-rules.yaml").read_text())
    kwargs = raw["stages"][0]["model"]["kwargs"]
    kwargs["asr_sentences"] = None if free_asr else SENTENCES
    for stage in raw["stages"]:
        stage["model"]["kwargs"] = kwargs
    path = folder / "cascade-concurrency.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def server_memory_mb(pid: int) -> dict[str, float]:
    """The server's resident memory now and at its peak so far (Linux /proc), in MB."""
    fields = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mb": fields.get("VmRSS", 0.0), "peak_rss_mb": fields.get("VmHWM", 0.0)}


def start_server(deployment: Path | str, port: int, max_sessions: int) -> subprocess.Popen[bytes]:
    """``omniduplex serve`` on a deployment (a name or a deploy YAML path), quiet."""
    command = [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve", str(deployment)]
    command += ["--port", str(port), "--log-level", "warning"]
    command += ["--max-sessions", str(max_sessions)]
    return subprocess.Popen(command)


async def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the server exited during startup")
        try:
            async with connect(url) as ws:
                event = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                if event["type"] == "session.created":
                    await ws.send(orjson.dumps({"type": "session.close"}).decode())
                    while orjson.loads(await asyncio.wait_for(ws.recv(), 10))["type"] != (
                        "session.closed"
                    ):
                        pass
                    return
        except (TimeoutError, OSError):
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("the server did not start")


class Utterance:
    def __init__(self, text: str) -> None:
        spoken = say(text, RATE)
        lead = np.zeros(RATE * LEAD_MS // 1000, np.float32)
        tail = np.zeros(RATE * TAIL_MS // 1000, np.float32)
        self.text = text
        self.pcm = pcm16(np.concatenate((lead, spoken, tail)))
        self.speech_end_s = (lead.size + spoken.size) / RATE
        self.duration_s = len(self.pcm) / 2 / RATE


async def conversation(
    url: str, utterances: list[Utterance], turns: int, offset: int, delay_s: float
) -> list[dict[str, Any]]:
    await asyncio.sleep(delay_s)
    rows: list[dict[str, Any]] = []
    async with connect(url, max_size=None) as ws:
        session = PacedSession(ws)
        await session.wait_for("session.created", 0)
        update = {"type": "session.update", "session": {"turn_detection": SERVER_VAD}}
        await ws.send(orjson.dumps(update).decode())
        await session.wait_for("session.updated", 0)
        for k in range(turns):
            u = utterances[(offset + k) % len(utterances)]
            mark = len(session.events)
            t0 = await session.send_pcm(u.pcm)
            try:
                await session.wait_for("response.done", mark)
            except TimeoutError:
                rows.append({"text": u.text, "error": "no response.done"})
                continue
            audio = session.first("response.output_audio.delta", mark)
            heard = session.first("conversation.item.input_audio_transcription.completed", mark)
            error = session.first("error", mark)
            if audio is None:
                reason = error[1]["error"].get("code") if error else "no reply audio"
                rows.append({"text": u.text, "error": reason})
                continue
            rows.append(
                {
                    "text": u.text,
                    "heard": heard[1]["transcript"] if heard else None,
                    "eos_to_first_audio_s": audio[0] - (t0 + u.speech_end_s),
                }
            )
            await asyncio.sleep(PAUSE_S)
        # End the session for good: a dropped socket would hold its slot for resume.
        mark = len(session.events)
        await ws.send(orjson.dumps({"type": "session.close"}).decode())
        with contextlib.suppress(TimeoutError):
            await session.wait_for("session.closed", mark, timeout_s=10)
    return rows


def summary(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {}
    return {
        "p50_ms": round(1000 * float(np.percentile(latencies, 50)), 1),
        "p95_ms": round(1000 * float(np.percentile(latencies, 95)), 1),
        "max_ms": round(1000 * max(latencies), 1),
    }


async def run_level(url: str, utterances: list[Utterance], sessions: int, turns: int) -> dict:
    spread = utterances[0].duration_s
    started = time.perf_counter()
    results = await asyncio.gather(
        *(conversation(url, utterances, turns, k, spread * k / sessions) for k in range(sessions))
    )
    rows = [row for rows in results for row in rows]
    ok = [r for r in rows if "error" not in r]
    wrong = [r for r in ok if r["heard"] != normalise_sentence(r["text"])]
    latencies = [r["eos_to_first_audio_s"] for r in ok]
    return {
        "sessions": sessions,
        "turns": len(rows),
        "failed": len(rows) - len(ok),
        "errors": sorted({r["error"] for r in rows if "error" in r}),
        "misheard": len(wrong),
        "wall_s": round(time.perf_counter() - started, 1),
        **summary(latencies),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    levels = [int(x) for x in args.levels.split(",")]
    utterances = [Utterance(text) for text in SENTENCES]
    with tempfile.TemporaryDirectory() as folder:
        path = write_deploy(Path(folder), args.free_asr)
        port = free_port()
        url = f"ws://127.0.0.1:{port}/v1/realtime?model=cascade"
        process = start_server(path, port, max(16, *levels))
        try:
            await wait_ready(url, process)
            idle = server_memory_mb(process.pid)
            rows = []
            for sessions in levels:
                # More turns for small levels, so each level has at least ~12 samples.
                turns = max(args.min_turns, -(-args.samples // sessions))
                row = await run_level(url, utterances, sessions, turns)
                row["server_peak_rss_mb"] = server_memory_mb(process.pid)["peak_rss_mb"]
                rows.append(row)
                print(
                    f"{row['sessions']:>3} sessions  turns {row['turns']:>3}  "
                    f"failed {row['failed']}  misheard {row['misheard']}  "
                    f"p50 {row.get('p50_ms', '-')} ms  p95 {row.get('p95_ms', '-')} ms  "
                    f"max {row.get('max_ms', '-')} ms  peak RSS {row['server_peak_rss_mb']} MB"
                    f"  ({row['wall_s']} s)",
                    flush=True,
                )
                base_p95 = rows[0].get("p95_ms")
                doubled = base_p95 is None or row.get("p95_ms", 0) > 2 * base_p95
                if row["failed"] or doubled:
                    break  # past the knee: higher levels only take longer
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    base = rows[0].get("p95_ms")
    sustained = 0
    for row in rows:
        row["p95_vs_1_session"] = (
            round(row["p95_ms"] / base, 2) if base and "p95_ms" in row else None
        )
        if (
            row["failed"] == 0
            and row["p95_vs_1_session"] is not None
            and row["p95_vs_1_session"] <= 2
        ):
            sustained = row["sessions"]
        else:
            break
    return {
        "benchmark": "cascade_concurrency",
        "metric": "end of speech -> first reply audio (includes 500 ms server_vad silence)",
        "rule": "largest level whose p95 <= 2x the 1-session p95 with no failed turn",
        "sustained_sessions": sustained,
        "server_idle_rss_mb": idle["rss_mb"],
        "asr": "en-US language model" if args.free_asr else "restricted to the sentences",
        "levels": rows,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "note": "server and client processes share the machine",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,2,4,8,16,24,32,48,64")
    parser.add_argument("--samples", type=int, default=12, help="turns per level at least")
    parser.add_argument("--min-turns", type=int, default=2, help="turns per session at least")
    parser.add_argument("--free-asr", action="store_true")
    parser.add_argument("--out", default=str(RESULTS / "cascade_concurrency.json"))
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(f"sustained: {result['sustained_sessions']} sessions")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
