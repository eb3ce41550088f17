"""How far an event travels through the engine: calls and files crossed on three paths.

Issue 31's measure. A path is the stretch of our code that runs between two points a
user can see and that no refactor of the engine moves:

- ``append``: the server's WebSocket receive returns an ``input_audio_buffer.append``
  -> the stage model is handed that audio (``add_request``/``update_request``). Measured
  on ``StreamingLoopbackPlugin``, a benchmark double of a model that streams its input
  (as PersonaPlex and MiniCPM-o do): loopback's stage, handed every 100 ms unit;
- ``delta``: the loopback stage's ``step`` returns an audio unit (the third unit of a
  reply onward, so no response-opening events are in the window) -> the server's
  ``send_text`` of that ``response.output_audio.delta``;
- ``cancel``: the receive returns a ``response.cancel`` while audio streams -> the
  ``send_text`` of ``response.done``.

Every thread's Python calls are recorded with ``sys.setprofile``/``threading.setprofile``
(the server runs in this process, its client is a raw ``websockets`` client, so only the
server's frames are ours). A window counts the functions of ``omniduplex`` that were
entered in it, on any thread: ``forwarders`` (distinct functions that called another of
ours in the window: the hops of the path, without the leaf helpers such as parsers and
getters that any design calls), ``functions`` (distinct code objects), ``files``
(distinct source files) and ``calls`` (every entry, a coroutine's resumption included). Each path is
repeated and the median reported, which keeps out the odd unrelated timer that fires in
a window. Generated code (dataclass ``__init__`` and the like) has no file of ours and is
not counted.

Two source trees are measured the same way in the same run: a baseline revision (a git
worktree) and the working tree, each in its own subprocess with that tree's ``src/``.

Run: ``python benchmarks/engine_paths.py --baseline REV [--rounds 15]``; writes
``benchmarks/results/engine_paths.json`` and prints the comparison (``--list`` also
prints the functions of one window of each path, in the order they were first entered).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from outbound_path import worktree

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
PATHS = ("append", "delta", "cancel")
# The frame whose sending ends a path that ends at the socket.
ENDS = {"append": "\x00", "delta": '"response.output_audio.delta"', "cancel": '"response.done"'}


# ---- the traced server (runs in the subprocess) ---------------------------------------


def streaming_loopback_plugin() -> type:
    """Benchmark double: the loopback plugin, declared as streaming its input, so each
    whole unit of an append is submitted to the stage as PersonaPlex's are."""
    from omniduplex.model_executor.models.loopback.plugin import LoopbackDuplexPlugin

    class StreamingLoopbackPlugin(LoopbackDuplexPlugin):
        plugin_id = "streaming-loopback-benchmark"
        streams_input = True

        def plan_input_unit(self, state: Any, samples: Any, *, fence: Any) -> dict[str, Any]:
            return {"audio": samples}

    return StreamingLoopbackPlugin


StreamingLoopbackPlugin = streaming_loopback_plugin() if __name__ == "engine_paths" else None


class Recorder:
    """A timeline of the calls into ``omniduplex`` and the few marker frames."""

    def __init__(self, package_dir: str) -> None:
        self.package_dir = package_dir
        self.timeline: list[tuple[str, Any]] = []
        self._ours: dict[Any, bool] = {}
        self._stacks: dict[int, list[Any]] = {}

    def _is_ours(self, code: Any) -> bool:
        known = self._ours.get(code)
        if known is None:
            known = self._ours[code] = code.co_filename.startswith(self.package_dir)
        return known

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call":
            if self._is_ours(code):
                stack = self._stacks.setdefault(threading.get_ident(), [])
                self.timeline.append(("call", (code, stack[-1] if stack else None)))
                stack.append(code)
            elif code.co_name == "send_text" and "starlette" in code.co_filename:
                self.timeline.append(("send", frame.f_locals.get("data", "")))
            return
        if event != "return":
            return
        if self._is_ours(code):
            stack = self._stacks.get(threading.get_ident())
            if stack and stack[-1] is code:
                stack.pop()
        name = code.co_name
        if name == "receive" and "starlette" in code.co_filename:
            if isinstance(arg, dict) and arg.get("text"):
                self.timeline.append(("received", arg["text"]))
        elif "models/loopback" in code.co_filename:
            if name == "step" and arg:
                self.timeline.append(("stepped", arg))
            elif name in ("add_request", "update_request"):
                self.timeline.append(("staged", name))

    def install(self) -> None:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)

    def uninstall(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def _window_figures(calls: list[Any]) -> dict[str, Any]:
    entered = {code for code, _ in calls}
    return {
        "calls": len(calls),
        "functions": len(entered),
        "files": len({code.co_filename for code in entered}),
        # Functions that handed on to another of ours in the window: the path's hops,
        # without the leaf helpers (parsers, getters) that any design calls.
        "forwarders": len({caller for _, caller in calls if caller is not None} & entered),
    }


def _windows(timeline: list[tuple[str, Any]]) -> dict[str, list[list[Any]]]:
    """Cut the timeline into the three paths' windows."""
    out: dict[str, list[list[Any]]] = {name: [] for name in PATHS}
    open_window: tuple[str, list[Any]] | None = None
    audio_units = 0
    for kind, value in timeline:
        if kind == "received":
            if '"input_audio_buffer.append"' in value:
                open_window = ("append", [])
            elif '"response.cancel"' in value:
                open_window = ("cancel", [])
            elif '"response.create"' in value:
                audio_units = 0
            continue
        if kind == "stepped":
            audio_units += 1
            if audio_units >= 3 and (open_window is None or open_window[0] == "delta"):
                open_window = ("delta", [])
            continue
        if open_window is None:
            continue
        name, calls = open_window
        if kind == "call":
            calls.append(value)
        elif (kind, name) == ("staged", "append") or (kind == "send" and ENDS[name] in value):
            out[name].append(calls)
            open_window = None
    return out


def _pcm16(ms: int) -> list[str]:
    import numpy as np

    t = np.arange(24 * ms) / 24_000
    pcm = (0.3 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()
    return [base64.b64encode(pcm[i : i + 4800]).decode() for i in range(0, len(pcm), 4800)]


async def _until(ws: Any, wanted: str, count: int = 1) -> None:
    import orjson

    seen = 0
    while seen < count:
        if orjson.loads(await ws.recv())["type"] == wanted:
            seen += 1


async def _open(url: str) -> Any:
    import orjson
    from websockets.asyncio.client import connect

    ws = await connect(url, max_size=None)
    await _until(ws, "session.created")
    update = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
    await ws.send(orjson.dumps({"type": "session.update", "session": update}).decode())
    await _until(ws, "session.updated")
    return ws


async def _stream_appends(url: str, rounds: int) -> None:
    """``rounds`` appends of 100 ms, one at a time, so each window holds only its own."""
    import orjson

    ws = await _open(url)
    for chunk in _pcm16(100 * rounds):
        await ws.send(orjson.dumps({"type": "input_audio_buffer.append", "audio": chunk}).decode())
        await asyncio.sleep(0.05)
    await ws.close()


async def _cancel_replies(url: str, rounds: int) -> None:
    """``rounds`` turns: a second of audio, commit, reply, cancel after six deltas."""
    import orjson

    ws = await _open(url)
    for _ in range(rounds):
        for chunk in _pcm16(1000):
            await ws.send(
                orjson.dumps({"type": "input_audio_buffer.append", "audio": chunk}).decode()
            )
        await ws.send('{"type":"input_audio_buffer.commit"}')
        await ws.send('{"type":"response.create"}')
        await _until(ws, "response.output_audio.delta", 6)
        await ws.send('{"type":"response.cancel"}')
        await _until(ws, "response.done")
        await asyncio.sleep(0.1)
    await ws.close()


def trace(rounds: int, out: Path, show: bool) -> None:
    import omniduplex
    from omniduplex.config.pipeline import load_deploy_config
    from omniduplex.entrypoints.duplex_omni import DuplexOmni
    from omniduplex.entrypoints.openai.api_server import build_app

    sys.path.insert(0, str(ROOT / "tests" / "entrypoints" / "openai"))
    from server_harness import run_app

    def serve(pipeline: Any, drive: Any) -> list[tuple[str, Any]]:
        recorder = Recorder(str(Path(omniduplex.__file__).parent))
        recorder.install()
        try:
            app = build_app(DuplexOmni(pipeline), model_name=pipeline.served_model_name)
            with run_app(app) as running:
                asyncio.run(drive(running.ws_url + "?model=loopback", rounds))
        finally:
            recorder.uninstall()
        return recorder.timeline

    paced = load_deploy_config("loopback")
    streaming = dataclasses.replace(paced, duplex_plugin="engine_paths:StreamingLoopbackPlugin")
    windows = {"append": _windows(serve(streaming, _stream_appends))["append"]}
    replies = _windows(serve(paced, _cancel_replies))
    windows.update(delta=replies["delta"], cancel=replies["cancel"])
    package_dir = str(Path(omniduplex.__file__).parent)
    result: dict[str, Any] = {}
    for name in PATHS:
        figures = [_window_figures(calls) for calls in windows[name]]
        result[name] = {
            "windows": len(figures),
            **{
                key: statistics.median(f[key] for f in figures) if figures else None
                for key in ("forwarders", "functions", "files", "calls")
            },
        }
        if show and windows[name]:
            sample = windows[name][len(windows[name]) // 2]
            seen: dict[Any, None] = dict.fromkeys(code for code, _ in sample)
            result[name]["sample"] = [
                f"{Path(code.co_filename).relative_to(package_dir)}:{code.co_qualname}"
                for code in seen
            ]
    out.write_text(json.dumps(result, indent=2))


# ---- the comparison (runs in the parent) ----------------------------------------------


def measure_tree(source: Path, rounds: int, show: bool) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "PYTHONPATH": str(source / "src")}
        command = [sys.executable, __file__, "--trace", out.name, "--rounds", str(rounds)]
        subprocess.run([*command, *(["--list"] if show else [])], check=True, env=env)
        return json.loads(Path(out.name).read_text())


def main(args: argparse.Namespace) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.baseline],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "baseline": commit,
        "rounds": args.rounds,
    }
    with worktree(commit) as baseline:
        result["before"] = measure_tree(baseline, args.rounds, args.list)
    result["after"] = measure_tree(ROOT, args.rounds, args.list)
    return result


def report(result: dict[str, Any], show: bool) -> None:
    print(f"baseline {result['baseline'][:10]} vs working tree (median of each path's windows)")
    keys = ("forwarders", "functions", "files", "calls")
    print(f"{'':10}" + "".join(f"{key:>20}" for key in keys))
    for name in PATHS:
        cells = []
        for key in keys:
            before, after = result["before"][name][key], result["after"][name][key]
            cells.append(f"{before:>8} -> {after:<8}")
        print(f"{name:10}" + "".join(f"{cell:>20}" for cell in cells))
    if show:
        for side in ("before", "after"):
            for name in PATHS:
                print(f"\n-- {side} / {name}")
                for line in result[side][name].get("sample", []):
                    print(f"   {line}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="HEAD", help="the revision to compare against")
    parser.add_argument("--rounds", type=int, default=15, help="turns (each: 1 s of appends)")
    parser.add_argument("--list", action="store_true", help="print one window of each path")
    parser.add_argument("--trace", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trace is not None:
        trace(args.rounds, args.trace, args.list)
        sys.exit(0)
    results = main(args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "engine_paths.json").write_text(json.dumps(results, indent=2))
    report(results, args.list)
    print(f"wrote {RESULTS / 'engine_paths.json'}")
