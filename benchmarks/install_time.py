"""How long the README's first command takes on this machine: install into a fresh venv,
then the first start of ``omniduplex serve`` until ``/health`` answers.

The checkout's committed tree (``git archive HEAD``) is installed, as a new user would
install a clone, with pip's cache off so every wheel is fetched and llama-cpp-python is
compiled from source. The baseline, measured in the same run, is the install without the
``llm`` extra (no compiler needed): the difference is the cost of the local language
model. The server's first start loads every model the default deployment runs.

Run: ``python benchmarks/install_time.py``; prints the figures and writes
``benchmarks/results/install_time.json``. Takes about 10 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# The README's first command, less its `omniduplex serve` (timed on its own below).
LLM_BUILD = {"CMAKE_ARGS": "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF", "PIP_NO_CACHE_DIR": "1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def install(folder: Path, target: str) -> float:
    """Seconds to pip-install ``target`` into a new venv in ``folder``."""
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
    pip = [str(folder / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", target]
    started = time.perf_counter()
    subprocess.run(pip, check=True, cwd=folder / "src", env={**os.environ, **LLM_BUILD})
    return time.perf_counter() - started


def first_start(folder: Path) -> tuple[float, dict]:
    """Seconds from ``omniduplex serve`` to a 200 from ``/health``, and ``/v1/models``."""
    port = free_port()
    command = [str(folder / "venv" / "bin" / "omniduplex"), "serve", "--port", str(port)]
    started = time.perf_counter()
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - started < 300:
            if server.poll() is not None:
                raise RuntimeError("omniduplex serve exited during startup")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        elapsed = time.perf_counter() - started
                        url = f"http://127.0.0.1:{port}/v1/models"
                        with urllib.request.urlopen(url, timeout=5) as models:
                            return elapsed, json.load(models)["data"][0].get("metadata", {})
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("omniduplex serve did not become healthy in 300 s")
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    rows = {}
    for name, target in (("base", ".[semantic-vad]"), ("with_llm", ".[llm,semantic-vad]")):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "src").mkdir()
            archive = subprocess.run(
                ["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(folder / "src")], input=archive, check=True)
            install_s = install(folder, target)
            start_s, metadata = first_start(folder)
            rows[name] = {
                "install_s": round(install_s, 1),
                "first_start_s": round(start_s, 1),
                "engines": metadata,
            }
            print(
                f"{name:>9}: install {install_s:6.1f} s   first start {start_s:5.1f} s   "
                f"{metadata}",
                flush=True,
            )
    result = {
        "benchmark": "install_time",
        "command": (
            'CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" pip install ".[llm,semantic-vad]"'
        ),
        "baseline": 'pip install ".[semantic-vad]" (no llm extra: the rule responder answers)',
        "rows": rows,
        "llm_extra_cost_s": round(rows["with_llm"]["install_s"] - rows["base"]["install_s"], 1),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "pip_cache": "off",
        },
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "install_time.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
