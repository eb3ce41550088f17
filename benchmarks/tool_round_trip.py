"""Tool round trip on the cascade with the rule responder, over the wire.

``omniduplex serve`` runs the ``cascade-rules`` deployment (ASR restricted to the benchmark's
sentences) in a subprocess. One client, server VAD, declares ``check_weather`` and asks
"Check the weather please." ``--rounds`` times, spoken in real time. Per round,
client-side:

- ``speech_to_call``: the question's last speech sample sent ->
  ``response.function_call_arguments.done`` (includes the VAD's 500 ms of silence: the
  turn-taking policy, not compute);
- ``output_to_audio``: the ``function_call_output`` + ``response.create`` sent -> the
  first audio of the spoken answer.

Run: ``python benchmarks/tool_round_trip.py [--rounds 20]``; writes
``benchmarks/results/tool_round_trip.json`` and prints the figures.
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

import orjson
from websockets.asyncio.client import connect

from paced_session import PacedSession
from serving import Server
from talk_over import percentiles, spoken, write_deploy

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
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS / "tool_round_trip.json")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for key in ("speech_to_call_ms", "output_to_audio_ms"):
        print(f"{key:22} {result[key]}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
