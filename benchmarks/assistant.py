"""The embedded assistant (``cascade``) against the cascade it replaces, in one run.

``cascade`` as shipped (Whisper tiny.en, SmolLM2-135M-Instruct on llama.cpp, the piper
voice) and the baseline ``cascade-rules`` (pocketsphinx decoding free speech, the rule
responder, espeak-ng: what ``omniduplex serve`` ran before) are each served by a real
``omniduplex serve`` subprocess. The user is the piper voice, noise-free, paced in real
time (32 ms appends) with OpenAI's server_vad (500 ms of silence ends a turn).

- **Latency**: last speech sample sent -> first ``response.output_audio.delta``, p50/p95,
  at 1, 4 and 8 concurrent conversations; and the same from the end of speech the VAD
  found (``speech_stopped``'s ``audio_end_ms``, where its silence begins; ``vad``), which
  is later by Silero's lag. Each conversation asks the questions in order
  (its history grows), one at a time, the next once the answer has played out (the
  server paces it in real time) and half a second has passed, as a person listening
  would. The target for one conversation is the VAD silence plus 300 ms, 800 ms.
- **Memory**: the server's resident memory (its process and its children: the language
  model's stage process) once started, and the most it reached at each level; per
  conversation = (peak - start) / conversations.
- **ASR**: word error rate per engine on 20 free-speech sentences (the set
  ``tests/model_executor/test_cascade_whisper.py`` bounds), and the real-time factor of a
  whole-utterance decode, in-process.
- **LLM**: time to first token and decode tokens per second of the local model for the
  benchmark's questions (in a child process, as the server runs it).

Run: ``python benchmarks/assistant.py [--levels 1,4,8]``; prints a table and writes
``benchmarks/results/assistant.json`` and ``assistant.png`` (with matplotlib, the ``bench``
extra; ``--replot`` redraws it from the JSON). Takes about 7 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import soxr
from websockets.asyncio.client import connect

from cascade_concurrency import free_port, server_memory_mb, start_server, summary, wait_ready
from paced_session import RATE, PacedSession

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "model_executor"))
from test_cascade_whisper import SENTENCES, word_errors  # noqa: E402

from omniduplex.engine.stage import StageInput  # noqa: E402
from omniduplex.model_executor.models.cascade.asr import (  # noqa: E402
    AsrStageModel,
    normalise_sentence,
)
from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice  # noqa: E402

QUESTIONS = [
    "How do I make a cup of tea?",
    "What is the capital of France?",
    "Why is the sky blue?",
    "Can you recommend a good book?",
    "What should I cook for dinner tonight?",
    "How far away is the moon?",
    "What is a good name for a cat?",
    "Tell me something interesting about whales.",
]
DEPLOYMENTS = ("cascade", "cascade-rules")
SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 500}
LEAD_MS, TAIL_MS = 300, 1200
PAUSE_S = 0.5
TARGET_MS = 800
RESULTS = ROOT / "benchmarks" / "results"


def synthesize(voice: PiperSpeechVoice, text: str, rate: int) -> np.ndarray:
    """``text`` in the (unsampled) piper voice, cut to its speech."""
    audio = soxr.resample(voice.synthesize(text), voice.sample_rate_hz, rate).astype(np.float32)
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return audio[loud[0] : loud[-1] + 1] if loud.size else audio


class Question:
    def __init__(self, voice: Any, text: str) -> None:
        speech = synthesize(voice, text, RATE)
        lead = np.zeros(RATE * LEAD_MS // 1000, np.float32)
        tail = np.zeros(RATE * TAIL_MS // 1000, np.float32)
        self.text = text
        self.pcm = (np.clip(np.concatenate((lead, speech, tail)), -1, 1) * 32767).astype("<i2")
        self.pcm = self.pcm.tobytes()
        self.speech_end_s = (lead.size + speech.size) / RATE
        self.duration_s = (lead.size + speech.size + tail.size) / RATE


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants (Linux /proc), in MB."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        total += server_memory_mb(current)["rss_mb"]
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                pending.extend(int(child) for child in children)
    return round(total, 1)


async def conversation(
    url: str, questions: list[Question], offset: int, turns: int, delay_s: float
) -> list[dict[str, Any]]:
    await asyncio.sleep(delay_s)
    rows: list[dict[str, Any]] = []
    async with connect(url, max_size=None) as ws:
        session = PacedSession(ws)
        await session.wait_for("session.created", 0)
        settings = {"turn_detection": SERVER_VAD}
        await ws.send(orjson.dumps({"type": "session.update", "session": settings}).decode())
        await session.wait_for("session.updated", 0)
        sent_s = 0.0  # the session's input clock, which speech_stopped reads
        for k in range(turns):
            question = questions[(offset + k) % len(questions)]
            mark = len(session.events)
            t0 = await session.send_pcm(question.pcm)
            clock_at_t0, sent_s = sent_s, sent_s + question.duration_s
            try:
                done = await session.wait_for("response.done", mark, timeout_s=90)
            except TimeoutError:
                rows.append({"text": question.text, "error": "no response.done"})
                continue
            audio = session.first("response.output_audio.delta", mark)
            if audio is None or done[1]["response"]["status"] != "completed":
                rows.append({"text": question.text, "error": done[1]["response"]["status"]})
                continue
            output = done[1]["response"]["output"]
            said = output[-1]["content"][0].get("transcript", "") if output else ""
            stopped = session.first("input_audio_buffer.speech_stopped", mark)
            vad_end = t0 + stopped[1]["audio_end_ms"] / 1000 - clock_at_t0 if stopped else None
            rows.append(
                {
                    "text": question.text,
                    "answer": said,
                    "eos_to_first_audio_s": audio[0] - (t0 + question.speech_end_s),
                    "vad_end_to_first_audio_s": audio[0] - vad_end if vad_end else None,
                }
            )
            # The user listens to the answer (it plays in real time), then asks again.
            with contextlib.suppress(TimeoutError):
                await session.wait_for("output_audio_buffer.stopped", mark, timeout_s=60)
            await asyncio.sleep(PAUSE_S)
        mark = len(session.events)
        await ws.send(orjson.dumps({"type": "session.close"}).decode())
        with contextlib.suppress(TimeoutError):
            await session.wait_for("session.closed", mark, timeout_s=10)
    return rows


async def run_level(
    url: str, pid: int, questions: list[Question], sessions: int, turns: int
) -> dict[str, Any]:
    peak = tree_rss_mb(pid)
    stop = asyncio.Event()

    async def watch_memory() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_rss_mb(pid))
            await asyncio.sleep(0.5)

    watcher = asyncio.create_task(watch_memory())
    spread = 3.0  # staggered starts: turns do not all end at the same instant
    results = await asyncio.gather(
        *(conversation(url, questions, k, turns, spread * k / sessions) for k in range(sessions))
    )
    stop.set()
    await watcher
    rows = [row for rows in results for row in rows]
    ok = [r for r in rows if "error" not in r]
    return {
        "sessions": sessions,
        "turns": len(rows),
        "failed": len(rows) - len(ok),
        "errors": sorted({r["error"] for r in rows if "error" in r}),
        "peak_rss_mb": peak,
        "answers": [(r["text"], r["answer"]) for r in ok[:3]],
        **summary([r["eos_to_first_audio_s"] for r in ok]),
        "vad": summary([v for r in ok if (v := r["vad_end_to_first_audio_s"]) is not None]),
    }


async def serve_and_measure(
    deployment: str, questions: list[Question], levels: list[int], samples: int
) -> dict[str, Any]:
    port = free_port()
    url = f"ws://127.0.0.1:{port}/v1/realtime?model={deployment}"
    process = start_server(deployment, port, max_sessions=16)
    try:
        await wait_ready(url, process, timeout_s=180)
        idle = tree_rss_mb(process.pid)
        rows = []
        for sessions in levels:
            turns = max(2, -(-samples // sessions))
            row = await run_level(url, process.pid, questions, sessions, turns)
            row["per_conversation_mb"] = round((row["peak_rss_mb"] - idle) / sessions, 1)
            rows.append(row)
            print(
                f"{deployment:>13} {sessions:>2} sessions  turns {row['turns']:>2}  "
                f"failed {row['failed']}  p50 {row.get('p50_ms', '-')} ms  "
                f"p95 {row.get('p95_ms', '-')} ms  (from the VAD's end of speech p50 "
                f"{row['vad'].get('p50_ms', '-')} ms)  peak {row['peak_rss_mb']} MB",
                flush=True,
            )
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
    return {"deployment": deployment, "start_rss_mb": idle, "levels": rows}


def asr_figures(voice: Any) -> dict[str, Any]:
    """WER and real-time factor per engine, in-process, on the 20 sentences."""
    speech = [synthesize(voice, text, 16_000) for text in SENTENCES]
    figures = {}
    for engine in ("whisper", "pocketsphinx"):
        model = AsrStageModel(asr=engine, asr_partials=False)
        errors = words = 0
        compute = audio_s = 0.0
        for k, (text, audio) in enumerate(zip(SENTENCES, speech, strict=True)):
            started = time.perf_counter()
            model.add_request(f"u{k}", StageInput({"audio": audio}, final=True))
            outputs = []
            while not outputs:
                outputs = model.step(model.ready_request_ids())
            compute += time.perf_counter() - started
            audio_s += audio.size / 16_000
            heard = normalise_sentence(outputs[-1].data["transcript"])
            reference = normalise_sentence(text)
            errors += word_errors(reference, heard)
            words += len(reference.split())
        model.close()
        figures[engine] = {"wer": round(errors / words, 4), "rtf": round(compute / audio_s, 3)}
        print(f"ASR {engine:>12}: WER {errors / words:.1%}  RTF {compute / audio_s:.3f}")
    return figures


def _llm_figures(questions: list[str], results: Any) -> None:
    from omniduplex.model_executor.models.cascade.local_llm import (
        default_model_path,
        load_context,
    )
    from omniduplex.model_executor.models.cascade.options import CascadeOptions

    options = CascadeOptions()
    llm = load_context(options, str(default_model_path()))
    system = {"role": "system", "content": options.system_prompt}
    rows = []
    for question in questions:
        started = time.perf_counter()
        stamps = []
        for chunk in llm.create_chat_completion(
            messages=[system, {"role": "user", "content": question}],
            stream=True,
            temperature=options.llm_temperature,
            max_tokens=96,
            seed=options.llm_seed,
        ):
            if chunk["choices"][0]["delta"].get("content"):
                stamps.append(time.perf_counter() - started)
        rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0
        rows.append({"ttft_s": stamps[0], "tokens": len(stamps), "tokens_per_s": rate})
    results.put(rows)


def llm_figures(questions: list[str]) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_llm_figures, args=(questions, results))
    child.start()
    rows = results.get(timeout=300)
    child.join(30)
    ttft = [r["ttft_s"] for r in rows]
    rates = [r["tokens_per_s"] for r in rows if r["tokens_per_s"]]
    figures = {
        "ttft_p50_ms": round(1000 * float(np.median(ttft)), 1),
        "ttft_max_ms": round(1000 * max(ttft), 1),
        "tokens_per_s_p50": round(float(np.median(rates)), 1),
        "note": "after the system prompt is cached, as the server's contexts are at start",
    }
    print(f"LLM: TTFT p50 {figures['ttft_p50_ms']} ms, {figures['tokens_per_s_p50']} tokens/s")
    return figures


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for run in result["latency"]:
        levels = [row["sessions"] for row in run["levels"] if "p50_ms" in row]
        for stat, style in (("p50_ms", "-o"), ("p95_ms", "--s")):
            values = [row[stat] for row in run["levels"] if "p50_ms" in row]
            axis.plot(levels, values, style, label=f"{run['deployment']} {stat[:3]}")
    axis.axhline(TARGET_MS, color="grey", linewidth=0.8, label="target (1 conversation)")
    axis.set_yscale("log")
    axis.set_xlabel("concurrent conversations")
    axis.set_ylabel("end of speech -> first reply audio (ms)")
    axis.set_title("embedded assistant vs the rule cascade (2 CPU cores)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    levels = [int(x) for x in args.levels.split(",")]
    voice = PiperSpeechVoice(sampled=False)
    questions = [Question(voice, text) for text in QUESTIONS]
    deployments = args.deployments.split(",")
    latency = [await serve_and_measure(d, questions, levels, args.samples) for d in deployments]
    return {
        "benchmark": "assistant",
        "metric": "end of speech -> first reply audio (includes the 500 ms server_vad silence)",
        "target_one_conversation_ms": TARGET_MS,
        "latency": latency,
        "asr": asr_figures(voice),
        "llm": llm_figures(QUESTIONS),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "note": "server and client processes share the machine",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,4,8")
    parser.add_argument("--samples", type=int, default=8, help="turns per level, at least")
    parser.add_argument("--deployments", default=",".join(DEPLOYMENTS))
    parser.add_argument("--out", type=Path, default=RESULTS / "assistant.json")
    parser.add_argument("--replot", action="store_true", help="only redraw the saved run")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads((RESULTS / "assistant.json").read_text()), RESULTS / "assistant.png")
        return
    result = asyncio.run(main_async(args))
    RESULTS.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    with contextlib.suppress(ImportError):
        plot(result, args.out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("asr", "llm")}, indent=2))


if __name__ == "__main__":
    main()
