"""Tool round trip over the wire: the rule responder's (``cascade-rules``) and the
default ``cascade``'s own model (``--deployment cascade``).

``omniduplex serve`` runs the deployment in a subprocess; one client, server VAD (500 ms of
silence ends a turn), speaking in real time. Per round, client-side:

- ``speech_to_call``: the question's last speech sample sent ->
  ``response.function_call_arguments.done`` (includes the VAD's 500 ms of silence: the
  turn-taking policy, not compute);
- ``output_to_audio``: the ``function_call_output`` + ``response.create`` sent -> the
  first audio of the spoken answer.

``cascade-rules`` (ASR restricted to the benchmark's sentences) is asked "Check the
weather please." ``--rounds`` times with ``check_weather`` declared. ``cascade`` (Whisper,
SmolLM2, the tool picked by meaning) is asked the tool-needing requests of
``tool_choice_cases.py`` with its five tools declared, both splits, each request in one
of five voices (``turn_taking_cases.VOICES``); a round whose request got no call (or
another tool) counts as a miss and has no latency.

Run: ``python benchmarks/tool_round_trip.py [--deployment cascade] [--rounds 20]``;
writes ``benchmarks/results/tool_round_trip[_cascade].json`` and prints the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from websockets.asyncio.client import connect

from omniduplex.model_executor.models.cascade.synthetic import pcm16
from paced_session import RATE, PacedSession
from serving import Server
from talk_over import percentiles, spoken, write_deploy
from tool_choice_cases import SPLITS, TOOLS, draw_tool_cases
from turn_taking_cases import VOICES, trimmed

RESULTS = Path(__file__).parent / "results"
WEATHER = {
    "type": "function",
    "name": "check_weather",
    "description": "The weather forecast.",
    "parameters": {"type": "object", "properties": {"place": {"type": "string"}}},
}
SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 300}
QUESTION = "Check the weather please."


async def rounds(url: str, count: int) -> list[dict[str, float]]:
    ws = await connect(url, max_size=None)
    paced = PacedSession(ws)
    question, speech_end = spoken(QUESTION, 300, 800)
    rows = []
    try:
        await paced.wait_for("session.created", 0)
        update = {"turn_detection": SERVER_VAD, "tools": [WEATHER], "tool_choice": "auto"}
        await ws.send(orjson.dumps({"type": "session.update", "session": update}).decode())
        await paced.wait_for("session.updated", 0)
        for _ in range(count):
            mark = len(paced.events)
            t0 = await paced.send_pcm(question)
            t_call, call = await paced.wait_for("response.function_call_arguments.done", mark)
            await paced.wait_for("response.done", mark)
            mark = len(paced.events)
            output = {
                "type": "function_call_output",
                "call_id": call["call_id"],
                "output": json.dumps({"forecast": "sunny"}),
            }
            t_out = time.perf_counter()
            item = {"type": "conversation.item.create", "item": output}
            await ws.send(orjson.dumps(item).decode())
            await ws.send('{"type":"response.create"}')
            t_audio, _ = await paced.wait_for("response.output_audio.delta", mark)
            _, done = await paced.wait_for("response.done", mark)
            said = done["response"]["output"][0]["content"][0].get("transcript")
            if said != "sunny." or paced.first("error", mark) is not None:
                raise RuntimeError(f"the answer did not use the tool's output: {said!r}")
            rows.append(
                {
                    "speech_to_call_s": t_call - (t0 + speech_end),
                    "output_to_audio_s": t_audio - t_out,
                }
            )
    finally:
        await ws.close()
    return rows


async def model_rounds(url: str, split: str, count: int) -> list[dict[str, Any]]:
    """``count`` of the split's tool-needing requests, spoken to the default cascade."""
    cases = [case for case in draw_tool_cases(split) if case["tool"]][:count]
    names = sorted(VOICES)
    speakers = {name: VOICES[name](RATE) for name in names}
    ws = await connect(url, max_size=None)
    paced = PacedSession(ws)
    rows = []
    try:
        await paced.wait_for("session.created", 0)
        update = {"turn_detection": SERVER_VAD, "tools": TOOLS, "tool_choice": "auto"}
        await ws.send(orjson.dumps({"type": "session.update", "session": update}).decode())
        await paced.wait_for("session.updated", 0)
        for k, case in enumerate(cases):
            voice = names[k % len(names)]
            speech = trimmed(speakers[voice](case["text"]))
            lead, tail = np.zeros(RATE * 3 // 10, np.float32), np.zeros(RATE * 8 // 10, np.float32)
            question = pcm16(np.concatenate((lead, speech, tail)))
            speech_end = (lead.size + speech.size) / RATE
            mark = len(paced.events)
            t0 = await paced.send_pcm(question)
            _, done = await paced.wait_for("response.done", mark, timeout_s=60)
            calls = [i for i in done["response"]["output"] if i["type"] == "function_call"]
            row: dict[str, Any] = {"text": case["text"], "voice": voice, "want": case["tool"]}
            row["got"] = calls[0]["name"] if calls else None
            if row["got"] == case["tool"]:
                found = paced.first("response.function_call_arguments.done", mark)
                row["speech_to_call_s"] = found[0] - (t0 + speech_end) if found else None
                mark = len(paced.events)
                output = {
                    "type": "function_call_output",
                    "call_id": calls[0]["call_id"],
                    "output": json.dumps({"result": "done, all fine"}),
                }
                t_out = time.perf_counter()
                item = {"type": "conversation.item.create", "item": output}
                await ws.send(orjson.dumps(item).decode())
                await ws.send('{"type":"response.create"}')
                t_audio, _ = await paced.wait_for("response.output_audio.delta", mark, 60)
                await paced.wait_for("response.done", mark, 60)
                row["output_to_audio_s"] = t_audio - t_out
            rows.append(row)
    finally:
        await ws.close()
    return rows


def _ms(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [1000 * row[key] for row in rows if row.get(key) is not None]


async def run_model(args: argparse.Namespace) -> dict[str, Any]:
    server = Server("cascade")
    result: dict[str, Any] = {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "deployment": "cascade",
    }
    try:
        await server.wait_ready()
        for split in SPLITS:
            rows = await model_rounds(server.url("?model=cascade"), split, args.rounds)
            result[split] = {
                "rounds": len(rows),
                "right_call_rate": round(sum(r["got"] == r["want"] for r in rows) / len(rows), 3),
                "speech_to_call_ms": percentiles(_ms(rows, "speech_to_call_s")),
                "output_to_audio_ms": percentiles(_ms(rows, "output_to_audio_s")),
                "rows": rows,
            }
    finally:
        server.stop()
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        server = Server(str(write_deploy(Path(folder), sentences=[QUESTION, "Hello."])))
        try:
            await server.wait_ready()
            rows = await rounds(server.url("?model=cascade"), args.rounds)
        finally:
            server.stop()
    ms = lambda key: [1000 * row[key] for row in rows]  # noqa: E731
    return {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "rounds": len(rows),
        "speech_to_call_ms": percentiles(ms("speech_to_call_s")),
        "output_to_audio_ms": percentiles(ms("output_to_audio_s")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="per split for cascade")
    parser.add_argument(
        "--deployment", choices=("cascade-rules", "cascade"), default="cascade-rules"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    model = args.deployment == "cascade"
    args.out = args.out or RESULTS / (
        "tool_round_trip_cascade.json" if model else "tool_round_trip.json"
    )
    result = asyncio.run(run_model(args) if model else run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for part in [result[split] for split in SPLITS] if model else [result]:
        for key in ("right_call_rate", "speech_to_call_ms", "output_to_audio_ms"):
            if key in part:
                print(f"{key:22} {part[key]}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
