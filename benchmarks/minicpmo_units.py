"""MiniCPM-o 4.5: can one stage keep N conversations in real time? (for a GPU machine)

Builds the ``minicpmo-4.5`` stage model from a deploy YAML (its ``model_dir``, voice and
``slots``), opens N conversations (1, then each size up to ``--sessions``), feeds each
``--units`` seconds of input and times every round: one 1 s unit of every conversation,
i.e. N ``streaming_prefill`` + N ``streaming_generate`` calls, one after another on the
stage's one worker, exactly as the server steps them. A round must take under 1 s for
the stage to keep up; the single-conversation round, measured in the same run, is the
baseline. Reports round p50/p90/max per N, the prefill and generate shares, and how many
units spoke. Writes ``benchmarks/results/minicpmo_units.json`` (or ``--out``).

Input: ``--input-wav`` (16-bit PCM; it is looped), else quiet noise (the model will
mostly listen; give it speech to time speak units, which cost the talker and token2wav).

Run on a GPU: ``python benchmarks/minicpmo_units.py --deploy ./minicpmo.yaml``.
Without one, ``--double`` swaps upstream for the test double
(``tests/model_executor/minicpmo_double.py``): a smoke test of this script and of the
stage's stepping, whose timings mean nothing about the model. It has not been run on a
GPU here (none was lent): it carries no measured claim yet.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np

from omniduplex.config import load_deploy_config
from omniduplex.engine.duplex.contracts import DuplexFence, stage_request_id
from omniduplex.engine.stage import StageInput
from omniduplex.model_executor.models.minicpmo_4_5.options import INPUT_RATE_HZ, UNIT_SAMPLES
from omniduplex.model_executor.models.minicpmo_4_5.stage import MiniCPMO45StageModel
from omniduplex.model_executor.models.minicpmo_4_5.voice import wav_to_ref_audio

RESULTS = Path(__file__).parent / "results"
TESTS = Path(__file__).resolve().parents[1] / "tests" / "model_executor"


def stage_kwargs(args: argparse.Namespace, sessions: int) -> dict[str, Any]:
    kwargs = dict(load_deploy_config(args.deploy).stages[0].model.kwargs)
    kwargs["slots"] = sessions
    if args.double:
        sys.path.insert(0, str(TESTS))
        voice_dir = Path(tempfile.mkdtemp(prefix="minicpmo-units-"))
        tone = (0.2 * np.sin(np.arange(INPUT_RATE_HZ) / 8) * 32767).astype("<i2")
        with wave.open(str(voice_dir / "voice.wav"), "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(INPUT_RATE_HZ)
            wav.writeframes(tone.tobytes())
        kwargs.update(
            upstream_factory="minicpmo_double:DoubleDuplexFactory",
            upstream_factory_kwargs={"script": ["L", "S:a", "S:b", "E:c"] * 8},
            device="cpu",
            voice_dir=str(voice_dir),
            default_voice="voice",
        )
    return kwargs


def input_audio(args: argparse.Namespace) -> np.ndarray:
    if args.input_wav:
        return wav_to_ref_audio(Path(args.input_wav).read_bytes())
    rng = np.random.default_rng(0)
    return (0.01 * rng.standard_normal(UNIT_SAMPLES * 4)).astype(np.float32)


def run(args: argparse.Namespace, sessions: int, audio: np.ndarray) -> dict[str, Any]:
    model = MiniCPMO45StageModel(**stage_kwargs(args, sessions))
    model.stage_index = 0
    request_ids = [stage_request_id(DuplexFence(f"bench{i}", 0), "stage0") for i in range(sessions)]

    def unit(k: int) -> np.ndarray:
        start = (k * UNIT_SAMPLES) % max(1, audio.size - UNIT_SAMPLES + 1)
        return np.ascontiguousarray(audio[start : start + UNIT_SAMPLES])

    rounds: list[float] = []
    prefill_s: list[float] = []
    generate_s: list[float] = []
    spoke = 0
    first_round_s = 0.0
    try:
        for k in range(args.units):
            for rid in request_ids:
                data = {"audio": unit(k)}
                if k == 0:
                    model.add_request(rid, StageInput({**data, "config": {}}))
                else:
                    model.update_request(rid, StageInput(data))
            started = time.perf_counter()
            phase_started = started
            # Two steps per unit: every conversation's prefill, then every generate
            # (the first step of a conversation also runs its prepare).
            for phase in (prefill_s, generate_s):
                outputs = model.step(model.ready_request_ids())
                errors = [o.error for o in outputs if o.error]
                if errors:
                    raise RuntimeError(errors[0])
                spoke += sum(1 for o in outputs if o.data.get("audio") is not None)
                now = time.perf_counter()
                if k > 0:  # unit 0 includes prepare: reported apart
                    phase.append(now - phase_started)
                phase_started = now
            elapsed = time.perf_counter() - started
            if k == 0:
                first_round_s = elapsed
            else:
                rounds.append(elapsed)
    finally:
        model.close()
    ordered = sorted(rounds)
    return {
        "sessions": sessions,
        "units": args.units,
        "first_round_s_with_prepare": round(first_round_s, 4),
        "round_ms_p50": round(1000 * statistics.median(ordered), 2),
        "round_ms_p90": round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 2),
        "round_ms_max": round(1000 * ordered[-1], 2),
        "prefill_ms_mean": round(1000 * statistics.fmean(prefill_s), 2),
        "generate_ms_mean": round(1000 * statistics.fmean(generate_s), 2),
        "speak_units": spoke,
        "keeps_real_time_p90": ordered[int(0.9 * (len(ordered) - 1))] < 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deploy", default="minicpmo-4.5", help="deploy YAML path or name")
    parser.add_argument("--sessions", type=int, default=4, help="largest number of conversations")
    parser.add_argument("--units", type=int, default=20, help="seconds of input per conversation")
    parser.add_argument("--input-wav", default=None, help="16-bit PCM WAV to feed (looped)")
    parser.add_argument("--double", action="store_true", help="CPU smoke test with the double")
    parser.add_argument("--out", default=str(RESULTS / "minicpmo_units.json"))
    args = parser.parse_args()
    if args.units < 2 or args.sessions < 1:
        parser.error("--units must be at least 2 and --sessions at least 1")
    audio = input_audio(args)
    sizes = sorted({1, *range(2, args.sessions + 1)})
    results = [run(args, n, audio) for n in sizes]
    report = {
        "what": "rounds of one 1 s unit per conversation on one minicpmo stage (must be < 1 s)",
        "upstream": "test double (timings meaningless)" if args.double else "real model",
        "deploy": args.deploy,
        "machine": platform.platform(),
        "baseline": results[0],
        "by_sessions": results,
    }
    for row in results:
        print(
            f"N={row['sessions']}: round p50 {row['round_ms_p50']} ms, p90 "
            f"{row['round_ms_p90']} ms (prefill {row['prefill_ms_mean']} ms, generate "
            f"{row['generate_ms_mean']} ms), speak units {row['speak_units']}, real time: "
            f"{row['keeps_real_time_p90']}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
