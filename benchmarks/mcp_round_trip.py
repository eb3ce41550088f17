"""Remote MCP tool round trip: the server calls the tool vs. the client calls it (issue 34).

One MCP server (the ``mcp`` SDK's ``MCPServer`` on uvicorn, started here on 127.0.0.1)
with one tool, ``check_weather(place)``, which answers at once (or after
``--tool-delay-ms``). ``omniduplex serve`` runs ``cascade-rules`` in a subprocess (ASR
restricted to the benchmark's sentences; the rule responder calls a tool when every word
of its name is among the user's words and speaks the tool's output) with the MCP server's
URL allowed (``--mcp-allow``). Two arms, the same tool on the same MCP server:

- ``server_mcp``: the ``openai`` SDK (``client.realtime.connect``, GA) declares the server
  as an ``mcp`` tool (``require_approval: "never"``); the server lists the tools, calls
  ``check_weather`` and the same response speaks the result;
- ``client_mcp``: the OpenAI Agents SDK (``RealtimeAgent(mcp_servers=[
  MCPServerStreamableHttp(...)])`` run by a ``RealtimeRunner``): the model's
  ``function_call`` goes to the client, which calls the MCP server and sends the
  ``function_call_output`` and a ``response.create`` back; a second response speaks it.

Both use server VAD (500 ms of silence ends a turn) and speak in real time through the
same live-microphone helper (``client_compat.report.Microphone``). Per round,
client-side:

- ``speech_end_to_answer_audio``: the last speech sample of the request sent -> the first
  audio of the answer that carries the tool's result (it includes the VAD's 500 ms and
  the ASR, the same in both arms);
- ``call_to_answer_audio``: the call known to the client (``response.mcp_call_arguments.done``;
  the ``function_call``'s ``response.output_item.done``) -> that first audio: the tool's
  round trip and the answer's start, without the turn-taking before it.

The requests (``draw_cases``): per split its own
phrasings and places, each in one of five voices (``turn_taking_cases.VOICES``); the
held-out split is fixed and never tuned on. Rounds interleave the arms (server, client,
server, ...) so machine noise hits both alike. A round whose request got no call, or
whose answer does not carry the result, is a miss and has no latency.

Run: ``python benchmarks/mcp_round_trip.py [--rounds 20] [--tool-delay-ms 0]`` (rounds per
split and arm); writes ``benchmarks/results/mcp_round_trip.json`` and ``.png`` and
prints the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import platform
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import uvicorn
from agents.mcp import MCPServerStreamableHttp
from agents.realtime import RealtimeAgent, RealtimeRunner
from mcp.server.mcpserver import MCPServer
from openai import AsyncOpenAI
from PIL import Image, ImageDraw

from client_compat.report import Microphone
from omniduplex.model_executor.models.cascade.synthetic import pcm16
from paced_session import RATE
from serving import Server
from talk_over import percentiles, write_deploy
from turn_taking_cases import VOICES, trimmed

RESULTS = Path(__file__).parent / "results"
SPLITS = {"tuning": 1, "held_out": 2}
ARMS = ("server_mcp", "client_mcp")
TOOL = "check_weather"
FORECAST = "Sunny and eighteen degrees."
# Every phrasing holds "check" and "weather" (the rule responder's cue to call the tool);
# the held-out split shares no phrasing and no place with the tuning one.
PHRASINGS = {
    "tuning": [
        "Check the weather in {place} please.",
        "Can you check the weather for {place}?",
        "Please check the weather in {place} for me.",
        "I want you to check the weather in {place}.",
    ],
    "held_out": [
        "Could you check what the weather is like in {place}?",
        "Check the weather over in {place}.",
        "Would you check the weather in {place} today?",
        "Quickly check the {place} weather for me.",
    ],
}
PLACES = {
    "tuning": ["Paris", "London", "Boston", "Madrid", "Tokyo", "Chicago"],
    "held_out": ["Denver", "Dublin", "Seattle", "Berlin", "Vienna", "Toronto"],
}
SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 300}
CHUNK_MS = 40
ROUND_TIMEOUT_S = 30.0
# Each measure: its key in a row, in the results and the start it is timed from.
MEASURES = (
    ("latency_s", "speech_end_to_answer_audio_ms", "last speech sample sent"),
    ("call_to_audio_s", "call_to_answer_audio_ms", "call known to the client"),
)


def draw_cases(split: str, count: int) -> list[dict[str, str]]:
    """``count`` requests of ``split``: phrasing x place drawn with the split's fixed seed,
    voices round robin, so a split's cases are the same in every run."""
    rng = random.Random(SPLITS[split])
    voices = sorted(VOICES)
    cases = []
    for k in range(count):
        text = rng.choice(PHRASINGS[split]).format(place=rng.choice(PLACES[split]))
        cases.append({"text": text, "voice": voices[k % len(voices)]})
    return cases


def every_sentence() -> list[str]:
    """The sentences the ASR is restricted to: every phrasing with every place."""
    return [
        phrasing.format(place=place)
        for split in SPLITS
        for phrasing in PHRASINGS[split]
        for place in PLACES[split]
    ] + ["Hello."]


class WeatherMcp:
    """The benchmark's MCP server on a thread of its own (streamable HTTP on 127.0.0.1,
    on a socket bound before it starts); ``url`` is its endpoint."""

    def __init__(self, delay_s: float) -> None:
        server = MCPServer(name="omniduplex-bench-weather", log_level="WARNING")

        @server.tool(name=TOOL)
        async def check_weather(place: str) -> str:
            """The weather forecast for a place."""
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            return FORECAST

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            server.streamable_http_app(),
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=0.5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._socket])), daemon=True
        )
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/mcp"

    def __enter__(self) -> WeatherMcp:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the benchmark's MCP server did not start")
            self._thread.join(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()


class Timeline:
    """Events one client saw, each with its ``perf_counter`` arrival time."""

    def __init__(self) -> None:
        self.events: list[tuple[float, Any]] = []

    def add(self, event: Any) -> None:
        self.events.append((time.perf_counter(), event))

    async def wait(self, accept: Callable[[Any], bool], after: int) -> tuple[float, Any]:
        deadline = time.perf_counter() + ROUND_TIMEOUT_S
        while time.perf_counter() < deadline:
            found = next(((t, e) for t, e in self.events[after:] if accept(e)), None)
            if found is not None:
                return found
            await asyncio.sleep(0.002)
        raise TimeoutError("no event the round waited for")


class ServerMcpArm:
    """The ``openai`` SDK's GA connection with the MCP server as an ``mcp`` tool."""

    def __init__(self, http_url: str, mcp_url: str) -> None:
        self._client = AsyncOpenAI(api_key="unused", base_url=http_url + "/v1")
        self._mcp_url = mcp_url
        self.timeline = Timeline()

    async def open(self) -> None:
        self._manager = self._client.realtime.connect(model="cascade-rules")
        self._conn = await self._manager.enter()
        self._reader = asyncio.create_task(self._read())
        tool = {
            "type": "mcp",
            "server_label": "weather",
            "server_url": self._mcp_url,
            "require_approval": "never",
        }
        audio = {"input": {"turn_detection": SERVER_VAD}}
        await self._conn.session.update(
            session={"type": "realtime", "tools": [tool], "audio": audio}  # type: ignore[typeddict-item]
        )
        await self.timeline.wait(lambda e: e.type == "mcp_list_tools.completed", 0)
        self.mic = Microphone(self._send, RATE, CHUNK_MS)
        self.mic.start()

    async def _send(self, chunk: bytes) -> None:
        await self._conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())

    async def _read(self) -> None:
        async for event in self._conn:  # parsed and validated by the SDK
            self.timeline.add(event)

    async def ask(self, speech: bytes) -> dict[str, Any]:
        mark = len(self.timeline.events)
        await self.mic.say(speech)
        spoke_at = time.perf_counter()
        _, done = await self.timeline.wait(lambda e: e.type == "response.done", mark)
        calls = [o for o in done.response.output if o.type == "mcp_call" and o.name == TOOL]
        said = " ".join(
            part.transcript or ""
            for o in done.response.output
            if o.type == "message"
            for part in o.content
        )
        if not calls or calls[0].output != FORECAST or FORECAST.lower() not in said.lower():
            return {"miss": True, "said": said}
        audio_at, _ = await self.timeline.wait(
            lambda e: e.type == "response.output_audio.delta" and e.response_id == done.response.id,
            mark,
        )
        called_at, _ = await self.timeline.wait(
            lambda e: e.type == "response.mcp_call_arguments.done", mark
        )
        return {
            "miss": False,
            "said": said,
            "latency_s": audio_at - spoke_at,
            "call_to_audio_s": audio_at - called_at,
        }

    async def close(self) -> None:
        await self.mic.stop()
        await self._conn.close()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


class ClientMcpArm:
    """The Agents SDK's ``RealtimeAgent`` with the MCP server attached client-side."""

    def __init__(self, ws_url: str, mcp_url: str) -> None:
        self._ws_url = ws_url
        self._mcp = MCPServerStreamableHttp(
            params={"url": mcp_url}, name="weather", cache_tools_list=True
        )
        self.timeline = Timeline()

    async def open(self) -> None:
        await self._mcp.connect()
        agent: RealtimeAgent[Any] = RealtimeAgent(
            name="Assistant", instructions="Answer in one short sentence.", mcp_servers=[self._mcp]
        )
        runner = RealtimeRunner(agent, config={"model_settings": {"turn_detection": SERVER_VAD}})
        config = {"url": self._ws_url, "api_key": "unused"}
        self._session = await runner.run(model_config=config)  # type: ignore[arg-type]
        await self._session.__aenter__()
        self._reader = asyncio.create_task(self._read())
        await self.timeline.wait(lambda e: _raw_type(e) == "session.updated", 0)
        self.mic = Microphone(self._session.send_audio, RATE, CHUNK_MS)
        self.mic.start()

    async def _read(self) -> None:
        async for event in self._session:
            self.timeline.add(event)

    async def ask(self, speech: bytes) -> dict[str, Any]:
        mark = len(self.timeline.events)
        await self.mic.say(speech)
        spoke_at = time.perf_counter()
        _, first = await self.timeline.wait(lambda e: _raw_type(e) == "response.done", mark)
        output = first.data.data["response"]["output"]
        if not any(o["type"] == "function_call" and o["name"] == TOOL for o in output):
            return {"miss": True, "said": _said(output)}
        called = first.data.data["response"]["id"]
        _, ran = await self.timeline.wait(lambda e: e.type == "tool_end", mark)
        _, done = await self.timeline.wait(
            lambda e: _raw_type(e) == "response.done" and e.data.data["response"]["id"] != called,
            mark,
        )
        said = _said(done.data.data["response"]["output"])
        # The SDK hands the model the MCP result's content as JSON ({"type": "text", "text":
        # ...}), which the rule responder speaks as it is: the result is in it all the same.
        if FORECAST not in str(ran.output) or FORECAST.lower() not in said.lower():
            return {"miss": True, "said": said}
        answer = done.data.data["response"]["id"]
        audio_at, _ = await self.timeline.wait(
            lambda e: e.type == "audio" and e.audio.response_id == answer, mark
        )
        called_at, _ = await self.timeline.wait(lambda e: _is_call_done(e), mark)
        return {
            "miss": False,
            "said": said,
            "latency_s": audio_at - spoke_at,
            "call_to_audio_s": audio_at - called_at,
        }

    async def close(self) -> None:
        await self.mic.stop()
        await self._session.__aexit__(None, None, None)
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        await self._mcp.cleanup()


def _raw_type(event: Any) -> str | None:
    """The type of the server event a ``raw_model_event`` forwards, if it forwards one."""
    if event.type != "raw_model_event" or event.data.type != "raw_server_event":
        return None
    data = event.data.data
    return data.get("type") if isinstance(data, dict) else None


def _is_call_done(event: Any) -> bool:
    """The function call's ``response.output_item.done``: the call is the client's now."""
    if _raw_type(event) != "response.output_item.done":
        return False
    item = event.data.data["item"]
    return item["type"] == "function_call" and item["name"] == TOOL


def _said(output: list[dict[str, Any]]) -> str:
    return " ".join(
        part.get("transcript") or ""
        for o in output
        if o["type"] == "message"
        for part in o["content"]
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    speakers = {name: VOICES[name](RATE) for name in VOICES}
    lead = np.zeros(RATE * 3 // 10, np.float32)
    with tempfile.TemporaryDirectory() as folder, WeatherMcp(args.tool_delay_ms / 1000) as mcp:
        deploy = write_deploy(Path(folder), sentences=every_sentence())
        server = Server(str(deploy), extra=("--mcp-allow", mcp.url.rsplit("/", 1)[0] + "/"))
        arms: dict[str, Any] = {}
        try:
            await server.wait_ready()
            arms = {
                "server_mcp": ServerMcpArm(f"http://127.0.0.1:{server.port}", mcp.url),
                "client_mcp": ClientMcpArm(server.url("?model=cascade-rules"), mcp.url),
            }
            for arm in arms.values():
                await arm.open()
            rows: dict[str, dict[str, list[dict[str, Any]]]] = {a: {} for a in ARMS}
            for split in SPLITS:
                for arm_name in ARMS:
                    rows[arm_name][split] = []
                for case in draw_cases(split, args.rounds):
                    speech = pcm16(
                        np.concatenate((lead, trimmed(speakers[case["voice"]](case["text"]))))
                    )
                    for arm_name in ARMS:  # interleaved: the same request to each arm in turn
                        row = {**case, **await arms[arm_name].ask(speech)}
                        rows[arm_name][split].append(row)
                        print(f"{split:9} {arm_name:10} {row.get('latency_s')} {case['text']!r}")
                        await asyncio.sleep(1.0)  # the answer plays out before the next turn
        finally:
            for arm in arms.values():
                await arm.close()
            server.stop()
    result: dict[str, Any] = {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "deployment": "cascade-rules",
        "tool_delay_ms": args.tool_delay_ms,
        "rounds_per_split_and_arm": args.rounds,
    }
    for arm_name in ARMS:
        result[arm_name] = {}
        for split, split_rows in rows[arm_name].items():
            result[arm_name][split] = {
                "speech_end_to_answer_audio_ms": _summary(split_rows, "latency_s"),
                "call_to_answer_audio_ms": _summary(split_rows, "call_to_audio_s"),
                "misses": sum(r["miss"] for r in split_rows),
                "rows": split_rows,
            }
    return result


def _summary(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    """p50 / p95 / max / mean / n in ms of ``key`` over the rounds that were not misses."""
    values = [1000 * row[key] for row in rows if not row["miss"]]
    summary = percentiles(values)
    if values:
        summary["mean"] = round(float(np.mean(values)), 2)
    return summary


def plot(result: dict[str, Any], path: Path) -> None:
    """Each round as a dot, a bar at the median: one row per measure, split and arm, on
    one ms axis (both measures end at the answer's first audio)."""
    rows = [(m, arm, split) for m in MEASURES for split in SPLITS for arm in ARMS]
    values = {
        row: [r[row[0][0]] * 1000 for r in result[row[1]][row[2]]["rows"] if not r["miss"]]
        for row in rows
    }
    top = max([v for vs in values.values() for v in vs] + [1.0]) * 1.1
    width, row_h, left = 900, 56, 300
    height = 60 + row_h * len(rows)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    x = lambda ms: left + (width - left - 30) * ms / top  # noqa: E731
    draw.text((10, 10), "-> first audio of the answer carrying the tool's result (ms)", "black")
    for k, row in enumerate(rows):
        (_, key, start), arm, split = row
        y = 30 + k * row_h + row_h // 2
        colour = (31, 119, 180) if arm == "server_mcp" else (214, 39, 40)
        summary = result[arm][split][key]
        draw.text((10, y - 12), f"{start}: {arm} {split}", "black")
        draw.text((10, y + 2), f"p50 {summary.get('p50')} n={summary['n']}", "gray")
        for ms in values[row]:
            draw.ellipse((x(ms) - 3, y - 3, x(ms) + 3, y + 3), fill=colour)
        if "p50" in summary:
            draw.line((x(summary["p50"]), y - 14, x(summary["p50"]), y + 14), colour, 3)
    axis_y = height - 25
    draw.line((left, axis_y, width - 30, axis_y), "black")
    for tick in np.linspace(0, top, 6):
        draw.text((x(tick) - 10, axis_y + 4), f"{tick:.0f}", "black")
    image.save(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="per split and arm")
    parser.add_argument("--tool-delay-ms", type=int, default=0, help="the tool's own delay")
    parser.add_argument("--out", type=Path, default=RESULTS / "mcp_round_trip.json")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out.with_suffix(".png"))
    for arm in ARMS:
        for split in SPLITS:
            part = result[arm][split]
            print(f"{arm:10} {split:9} misses {part['misses']}")
            for _, key, _ in MEASURES:
                print(f"  {key:30} {part[key]}")
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
