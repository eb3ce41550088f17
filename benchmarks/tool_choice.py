"""How well the embedded model calls a client's tools (issue 30): the right tool or none,
and the right arguments, on spoken-style requests.

Four declared tools (time, weather, reminders, table booking) and requests drawn from
templates by each split's seed: requests that need one of them (with the city, reminder,
time and party size to find in the arguments), chit-chat and open questions that need
none. The tuning split (seed 1) is the one the prompts may be tuned on; the held-out
split (seed 2) draws other fillers and other templates' order and is only reported.
The model runs as the server runs it: ``LocalChatResponder`` in a child process, with
``tool_choice: auto``.

Per split: the right choice (tool or none), false calls on requests that need none,
arguments that parse and carry the schema's required keys with their types, arguments
that hold the request's values, and the time from the request to the call's last
argument piece (p50/p95). Baseline in the same run: the rule responder's choice by
tool-name words (``RuleResponder.tool_call``), what ``cascade-rules`` does.

Run: ``python benchmarks/tool_choice.py [--cases 40]``; writes
``benchmarks/results/tool_choice.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "tool_choice.json"
SPLITS = {"tuning": 1, "held_out": 2}

TOOLS = [
    {
        "type": "function",
        "name": "get_time",
        "description": "Get the current local time.",
        "parameters": {"type": "object", "properties": {}},
    },
    {
        "type": "function",
        "name": "get_weather",
        "description": "Get the weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    {
        "type": "function",
        "name": "set_reminder",
        "description": "Set a reminder for the user at a given time.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "when": {"type": "string"}},
            "required": ["text", "when"],
        },
    },
    {
        "type": "function",
        "name": "book_table",
        "description": "Book a restaurant table.",
        "parameters": {
            "type": "object",
            "properties": {"people": {"type": "integer"}, "time": {"type": "string"}},
            "required": ["people", "time"],
        },
    },
]
TYPES = {"string": str, "integer": int}

CITIES = ["Paris", "Tokyo", "Boston", "Madrid", "Cairo", "Lima", "Oslo", "Denver"]
TASKS = ["call my sister", "buy milk", "water the plants", "send the report", "take my pills"]
TIMES = ["five", "noon", "eight tonight", "nine tomorrow", "half past six"]
PEOPLE = {"two": 2, "three": 3, "four": 4, "six": 6}
NEEDS = {
    "get_time": [
        "What time is it?",
        "Do you know what time it is right now?",
        "Could you tell me the time please?",
        "What's the time?",
    ],
    "get_weather": [
        "What's the weather like in {city}?",
        "Will it rain in {city} tomorrow?",
        "How warm is it in {city} today?",
        "Can you check the weather in {city} for me?",
    ],
    "set_reminder": [
        "Remind me to {task} at {when}.",
        "Please set a reminder to {task} at {when}.",
        "Can you remind me at {when} to {task}?",
        "Don't let me forget to {task} at {when}.",
    ],
    "book_table": [
        "Book a table for {people} at {when}.",
        "I'd like a table for {people} people at {when}.",
        "Can you reserve a table for {people} tonight at {when}?",
        "Get us a table for {people} at {when} please.",
    ],
}
NONE = [
    "Tell me a joke.",
    "How are you today?",
    "What is the capital of France?",
    "Why is the sky blue?",
    "Thanks, that's all.",
    "Can you explain how a rainbow forms?",
    "What's a good name for a cat?",
    "Hello there!",
    "Give me a tip for sleeping better.",
    "Who wrote Romeo and Juliet?",
]


def draw(split: str, cases: int) -> list[dict[str, Any]]:
    """``cases`` requests: three in five need a tool (spread over the four), the rest none."""
    rng = random.Random(SPLITS[split])
    out: list[dict[str, Any]] = []
    names = list(NEEDS)
    for k in range(cases):
        if k % 5 < 3:
            name = names[(k // 5 * 3 + k % 5) % len(names)]
            people = rng.choice(list(PEOPLE))
            fill = {
                "city": rng.choice(CITIES),
                "task": rng.choice(TASKS),
                "when": rng.choice(TIMES),
                "people": people,
            }
            text = rng.choice(NEEDS[name]).format(**fill)
            expect: dict[str, Any] = {}
            if name == "get_weather":
                expect = {"city": fill["city"]}
            elif name == "set_reminder":
                expect = {"text": fill["task"].split()[-1], "when": fill["when"].split()[0]}
            elif name == "book_table":
                expect = {"people": PEOPLE[people]}
            out.append({"text": text, "tool": name, "expect": expect})
        else:
            out.append({"text": rng.choice(NONE), "tool": None, "expect": {}})
    return out


def _run_model(cases: list[dict[str, Any]], results: Any) -> None:
    """In the child: each request through the local model, as the server streams it."""
    try:
        from omniduplex.model_executor.models.cascade.local_llm import LocalChatResponder
        from omniduplex.model_executor.models.cascade.local_tools import ToolCallPiece
        from omniduplex.model_executor.models.cascade.options import CascadeOptions

        options = CascadeOptions(responder="local", llm_pool_size=1)
        model = LocalChatResponder(options)
        never = threading.Event()
        system = {"role": "system", "content": options.system_prompt}
        answers = []
        for case in cases:
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
        results.put(("ok", answers))
    except Exception as exc:  # reported to the parent, not lost in the child
        results.put(("error", repr(exc)))


def _rules(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from omniduplex.model_executor.models.cascade.responder import RuleResponder

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
    return {
        "cases": len(cases),
        "right_choice_rate": round(right / len(cases), 3),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=40, help="requests per split")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "machine": {"cpus": multiprocessing.cpu_count(), "python": platform.python_version()},
        "tools": [tool["name"] for tool in TOOLS],
        "baseline": "rules",
    }
    context = multiprocessing.get_context("spawn")
    for split in SPLITS:
        cases = draw(split, args.cases)
        results = context.Queue()
        child = context.Process(target=_run_model, args=(cases, results))
        child.start()
        outcome = results.get(timeout=1800)
        child.join(timeout=30)
        if outcome[0] != "ok":
            raise SystemExit(f"the model failed: {outcome[1]}")
        report[split] = {
            "local": score(cases, outcome[1]),
            "rules": score(cases, _rules(cases)),
            "answers": [
                {**case, "got": answer} for case, answer in zip(cases, outcome[1], strict=True)
            ],
        }
        for name in ("local", "rules"):
            print(split, name, json.dumps(report[split][name]))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
