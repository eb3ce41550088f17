"""The client-compatibility table: stock Realtime client libraries against `omniduplex serve`.

Starts `omniduplex serve loopback` and `omniduplex serve cascade` as subprocesses on free
loopback ports (as a user would), runs every driver of `benchmarks/client_compat/` (each
drives one client library through its public API: connect, configure with the client's
defaults, speak a question, hear the reply and its transcripts, interrupt a reply,
close) against each, prints the table, saves every report to
`benchmarks/results/client_compat.json` and rewrites the table in docs/clients.md between the
`<!-- client-compat:begin -->` / `<!-- client-compat:end -->` markers.

    python3 benchmarks/client_compat.py [--deployments loopback cascade]
        [--clients openai_sdk openai_agents livekit pipecat] [--no-readme]

A driver module that is not there yet, or fails to import, is a row that says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

# Pipecat logs every frame at DEBUG to stderr through loguru unless told otherwise; its
# driver collects the warnings and errors it needs with a sink of its own.
os.environ.setdefault("LOGURU_LEVEL", "WARNING")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_compat.report import COLUMNS, CompatReport, Target, package_version  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "client_compat.json"
README = ROOT / "docs" / "clients.md"
BEGIN, END = "<!-- client-compat:begin -->", "<!-- client-compat:end -->"
DEPLOYMENTS = ("loopback", "cascade")
# driver module -> the distribution whose version the row names
DRIVERS = {
    "openai_sdk": "openai",
    "openai_agents": "openai-agents",
    "livekit": "livekit-plugins-openai",
    "pipecat": "pipecat-ai",
}
START_TIMEOUT_S = 180.0  # guards against hangs only
FLOW_TIMEOUT_S = 300.0
HEADINGS = {
    "connect": "connect",
    "configure": "configure (defaults)",
    "audio_in": "audio in",
    "reply_audio": "reply audio",
    "transcripts": "transcripts",
    "interruption": "interruption",
    "close": "close",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve_command(deployment: str, port: int) -> list[str]:
    args = ["serve", deployment, "--host", "127.0.0.1", "--port", str(port)]
    exe = shutil.which("omniduplex")
    if exe is not None:
        return [exe, *args]
    return [sys.executable, "-m", "omniduplex.entrypoints.cli", *args]


@contextlib.contextmanager
def serve(deployment: str) -> Iterator[Target]:
    """`omniduplex serve DEPLOYMENT` on a free loopback port, until the block ends."""
    port = _free_port()
    with tempfile.TemporaryFile() as log:
        cmd = _serve_command(deployment, port)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield _started(deployment, port, proc, log)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _started(deployment: str, port: int, proc: subprocess.Popen[bytes], log: Any) -> Target:
    """The target once the server answers ``/health``, with its served model name."""
    http_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            log.seek(0)
            tail = log.read().decode("utf-8", "replace")[-2000:]
            raise RuntimeError(f"omniduplex serve {deployment} exited: {tail}")
        try:
            if httpx.get(f"{http_url}/health", timeout=2.0, trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"omniduplex serve {deployment} did not start")
        time.sleep(0.2)
    models = (
        httpx.get(f"{http_url}/v1/models", timeout=10.0, trust_env=False).json().get("data") or []
    )
    model = str(models[0]["id"]) if models else deployment
    return Target(http_url, f"ws://127.0.0.1:{port}/v1/realtime", model, deployment)


def flows(module: Any) -> list[dict[str, Any]]:
    """The keyword arguments of each flow a driver module offers: its ``FLOWS`` mapping
    (label -> kwargs) or sequence of ``turn_detection`` values, else one default flow."""
    declared = getattr(module, "FLOWS", None)
    if isinstance(declared, dict):
        return [dict(kwargs) for kwargs in declared.values()]
    if isinstance(declared, list | tuple):
        return [{"turn_detection": flow} for flow in declared]
    return [{}]


def _failed(name: str, distribution: str, deployment: str, why: str) -> CompatReport:
    report = CompatReport(distribution, package_version(distribution), deployment)
    report.error(f"{name}: {why}")
    return report


async def run_flow(module: Any, target: Target, kwargs: dict[str, Any]) -> CompatReport:
    name = module.__name__.rsplit(".", 1)[-1]
    try:
        return await asyncio.wait_for(module.run_conversation(target, **kwargs), FLOW_TIMEOUT_S)
    except Exception as exc:  # a driver that breaks is a row that says how
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return _failed(f"{name} {kwargs}", DRIVERS.get(name, name), target.deployment, why)


def run_all(deployments: list[str], clients: list[str]) -> list[CompatReport]:
    modules: dict[str, Any] = {}
    reports: list[CompatReport] = []
    for name in clients:
        try:
            modules[name] = importlib.import_module(f"client_compat.{name}")
        except Exception as exc:
            for deployment in deployments:
                why = f"driver not available ({type(exc).__name__}: {exc})"
                reports.append(_failed(name, DRIVERS.get(name, name), deployment, why))
    for deployment in deployments:
        with serve(deployment) as target:
            for module in modules.values():
                for kwargs in flows(module):
                    started = time.perf_counter()
                    report = asyncio.run(run_flow(module, target, kwargs))
                    took = time.perf_counter() - started
                    print(
                        f"{deployment:10s} {report.client:50s} {'ok' if report.ok else 'FAILED'}"
                        f" ({took:.1f} s)",
                        flush=True,
                    )
                    reports.append(report)
    return reports


def table(reports: list[CompatReport]) -> str:
    """The Markdown table: one row per client flow and deployment."""
    head = ["client", "version", "deployment", *(HEADINGS[c] for c in COLUMNS), "client errors"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in reports:
        marks = ["yes" if r.steps.get(c) else "**no**" for c in COLUMNS]
        errors = str(len(r.errors)) if r.errors else "none"
        lines.append("| " + " | ".join([r.client, r.version, r.deployment, *marks, errors]) + " |")
    return "\n".join(lines)


def error_lines(reports: list[CompatReport], limit: int = 3, width: int = 160) -> str:
    """What each failing row's client reported (first ``limit`` distinct errors)."""
    out = []
    for r in reports:
        if r.ok:
            continue
        distinct = list(dict.fromkeys(r.errors))
        failed = [HEADINGS[c] for c in COLUMNS if not r.steps.get(c)]
        parts = []
        if failed:
            parts.append("failed: " + ", ".join(failed))
        for e in distinct[:limit]:
            text = " ".join(e.split())
            parts.append("`" + (text[: width - 1] + "…" if len(text) > width else text) + "`")
        if len(distinct) > limit:
            parts.append(f"and {len(distinct) - limit} more")
        out.append(f"- {r.client} on {r.deployment}: " + "; ".join(parts))
    return "\n".join(out)


def readme_block(reports: list[CompatReport], when: str) -> str:
    ok = sum(r.ok for r in reports)
    intro = (
        f"Generated by `python3 benchmarks/client_compat.py` on {when} ({platform.machine()}, "
        f"{os.cpu_count()} CPUs): {ok} of {len(reports)} runs clean. Each run is one whole "
        "conversation; a step is *yes* when the client library did it, and *client errors* "
        "counts the error events and exceptions the library itself surfaced. Every report: "
        "`benchmarks/results/client_compat.json`."
    )
    body = [BEGIN, textwrap.fill(intro, width=90), "", table(reports)]
    details = error_lines(reports)
    if details:
        body += ["", details]
    body.append(END)
    return "\n".join(body)


def rewrite_readme(path: Path, block: str) -> None:
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN} / {END} markers")
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    path.write_text(before + block + after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployments", nargs="+", default=list(DEPLOYMENTS))
    parser.add_argument("--clients", nargs="+", default=list(DRIVERS), choices=list(DRIVERS))
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--no-readme", action="store_true", help="leave docs/clients.md as it is")
    args = parser.parse_args(argv)

    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    reports = run_all(args.deployments, args.clients)
    print()
    print(table(reports))
    details = error_lines(reports)
    if details:
        print()
        print(details)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "generated_by": "benchmarks/client_compat.py",
        "date": when,
        "machine": {"arch": platform.machine(), "cpus": os.cpu_count()},
        "python": platform.python_version(),
        "omniduplex": package_version("omniduplex"),
        "deployments": args.deployments,
        "columns": list(COLUMNS),
        "reports": [r.to_json() for r in reports],
    }
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    if not args.no_readme:
        rewrite_readme(args.readme, readme_block(reports, when))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
