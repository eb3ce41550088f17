"""Kyutai's ``moshi.server`` (the installed ``moshi`` package) on personaplex-tiny's weights,
driven like ``omniduplex bench --scenario stream``: the baseline of
``personaplex_realtime.py``.

``export_tiny`` writes the tiny model's LM and Mimi state dicts (built exactly as the
``personaplex-tiny`` stage builds them: same configs, same seed) as safetensors, the LM
config as moshi's ``config.json`` (pointing at a Mimi config file), and a SentencePiece
model covering the tiny text vocabulary (the server prints text pieces). ``MoshiServer``
runs ``python -m moshi.server`` on CPU through a launcher that makes
``torch.cuda.synchronize`` a no-op (its warm-up calls it; this torch has no CUDA), loads
the LM in float32 and uses one torch thread, as ``personaplex-tiny`` does (the server has
no float32 flag: its default is bfloat16, which this CPU runs several times slower), and
runs the server module otherwise unchanged. Its protocol: WebSocket ``/api/chat``, the server sends
``0x00`` once the session is ready, then both sides exchange ``0x01`` + Ogg Opus bytes
(24 kHz) and the server adds ``0x02`` + text. One session per process: further
connections wait on the server's lock.

``stream_sessions`` streams 80 ms frames at real-time pace to each URL (one session each)
and measures every session with the bench's ``StreamTimeline``: the same output rate,
frame latency (anchored at the first output audio) and growth as for our server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import connect

from omniduplex.bench.stats import summarize
from omniduplex.bench.timeline import StreamTimeline

SAMPLE_RATE = 24_000
FRAME = 1920  # 80 ms
LAUNCHER = (
    "import runpy, sys, torch\n"
    "import moshi.models.loaders as loaders\n"
    "torch.cuda.synchronize = lambda *args, **kwargs: None  # CPU-only torch: warm-up calls it\n"
    "torch.set_num_threads(1)  # as personaplex-tiny's torch_threads\n"
    "get_moshi = loaders.CheckpointInfo.get_moshi\n"
    "loaders.CheckpointInfo.get_moshi = lambda self, device='cpu', dtype=None, **kw: get_moshi(\n"
    "    self, device=device, dtype=torch.float32, **kw)  # as personaplex-tiny's dtype\n"
    "sys.argv = ['moshi.server', *sys.argv[1:]]\n"
    "runpy.run_module('moshi.server', run_name='__main__')\n"
)


def export_tiny(folder: Path) -> dict[str, Path]:
    """The personaplex-tiny weights and configs as files moshi.server loads."""
    import sentencepiece
    import torch
    from safetensors.torch import save_file

    from omniduplex.config import load_deploy_config
    from omniduplex.model_executor.models.personaplex.options import PersonaPlexOptions
    from omniduplex.model_executor.models.personaplex.runtime import _build_tiny, tiny_configs

    kwargs = load_deploy_config("personaplex-tiny").stages[0].model.kwargs
    known = set(PersonaPlexOptions.__dataclass_fields__)
    options = PersonaPlexOptions(**{k: v for k, v in kwargs.items() if k in known})
    mimi_cfg, lm_cfg = tiny_configs(options)
    mimi, lm = _build_tiny(options, torch.device("cpu"))
    paths = {
        "moshi": folder / "tiny_lm.safetensors",
        "mimi": folder / "tiny_mimi.safetensors",
        "mimi_config": folder / "tiny_mimi.json",
        "config": folder / "config.json",
        "tokenizer": folder / "tiny_text.model",
    }
    save_file({k: v.contiguous() for k, v in lm.state_dict().items()}, str(paths["moshi"]))
    save_file({k: v.contiguous() for k, v in mimi.state_dict().items()}, str(paths["mimi"]))
    paths["mimi_config"].write_text(json.dumps(mimi_cfg))
    config = {**lm_cfg, "model_type": "moshi"}
    config["mimi_config_name"] = f"file://{paths['mimi_config']}"
    paths["config"].write_text(json.dumps(config))
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join("abcdefgh"[i:] + " " + "hgfedcba"[: i + 1] for i in range(8)))
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(paths["tokenizer"].with_suffix("")),
        vocab_size=max(16, options.tiny_text_card),
        model_type="char",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return paths


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MoshiServer:
    """One ``moshi.server`` process on CPU serving the exported weights."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.port = free_port()
        descriptor, name = tempfile.mkstemp(prefix="moshi-server-", suffix=".log")
        self.log = Path(name)
        args = [
            "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
            "--static", "none", "--hf-repo", "unused/local-files",
            "--moshi-weight", str(paths["moshi"]), "--mimi-weight", str(paths["mimi"]),
            "--tokenizer", str(paths["tokenizer"]), "--config-path", str(paths["config"]),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, *args], stdout=descriptor, stderr=subprocess.STDOUT
        )
        os.close(descriptor)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/chat"

    async def wait_ready(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moshi.server exited: {self.log.read_text()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1.0),
            ):
                return
            await asyncio.sleep(0.2)
        raise RuntimeError("moshi.server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.unlink(missing_ok=True)


async def _session(url: str, duration_s: float, handshake_timeout_s: float) -> dict[str, Any]:
    import sphn

    timeline = StreamTimeline()
    writer = sphn.OpusStreamWriter(SAMPLE_RATE)
    reader = sphn.OpusStreamReader(SAMPLE_RATE)
    rng = np.random.default_rng(0)
    t = np.arange(FRAME) / SAMPLE_RATE
    async with connect(url, max_size=None, compression=None) as ws:
        try:
            async with asyncio.timeout(handshake_timeout_s):
                while await ws.recv() != b"\x00":
                    pass
        except TimeoutError:
            return {"handshake": False, "stream": None}

        async def read() -> None:
            async for message in ws:
                if isinstance(message, bytes) and message[:1] == b"\x01":
                    pcm = reader.append_bytes(message[1:])
                    if pcm.shape[-1]:
                        at = time.perf_counter()
                        timeline.on_audio(at, "moshi", pcm.shape[-1] * 1000.0 / SAMPLE_RATE)

        reading = asyncio.ensure_future(read())
        started = time.perf_counter()
        k = 0
        while (due := started + k * FRAME / SAMPLE_RATE) < started + duration_s:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tone = 0.2 * np.sin(2 * np.pi * (150 + 50 * np.sin(k / 7)) * (t + k * 0.08))
            frame = (tone + 0.01 * rng.standard_normal(FRAME)).astype(np.float32)
            payload = writer.append_pcm(frame)
            timeline.on_sent(time.perf_counter(), FRAME * 1000.0 / SAMPLE_RATE)
            if payload:
                await ws.send(b"\x01" + payload)
            k += 1
        timeline.ended(time.perf_counter())
        await asyncio.sleep(0.5)
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reading
    return {"handshake": True, "stream": timeline.summary()}


async def stream_sessions(urls: list[str], duration_s: float) -> dict[str, Any]:
    """One session per URL at once; sessions that never get the handshake (waiting on a
    busy server's lock) count as not held."""
    sessions = await asyncio.gather(
        *(_session(url, duration_s, handshake_timeout_s=duration_s) for url in urls)
    )
    streams = [s["stream"] for s in sessions if s["stream"] is not None]
    latencies = [s["frame_latency_ms"] for s in streams if s["frame_latency_ms"]]
    return {
        "sessions": len(urls),
        "handshakes": sum(s["handshake"] for s in sessions),
        "sessions_held_realtime": sum(s["held_realtime"] for s in streams),
        "output_rate_min": min((s["output_rate"] or 0.0 for s in streams), default=None),
        "frame_latency_p50_ms_median": summarize(d["p50"] for d in latencies),
        "frame_latency_p95_ms_max": max((d["p95"] for d in latencies), default=None),
        "per_session": streams,
    }
