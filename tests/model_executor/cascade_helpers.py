"""The cascade deployment the cascade tests run: ``cascade-rules`` with a grammar of
expected sentences (exact recognition of espeak speech) and a pinned clock for the rule
responder."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from omniduplex.config.pipeline import DEPLOY_DIR
from omniduplex.model_executor.models.cascade.synthetic import pcm16
from omniduplex.protocol.duplex import command_from_realtime

SENTENCES = [
    "what time is it",
    "what day is it",
    "hello",
    "thank you",
    "i would like to know what the weather is like today",
]
NOW = "2026-01-02T15:04:00"
IN_RATE = 16_000  # what the in-process tests send (the cascade's own rate)
TIMEOUT_S = 30.0  # a guard against hangs only
SERVER_VAD = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
}


def write_deploy(folder: Path, **overrides: Any) -> Path:
    """``cascade-rules.yaml`` with the test grammar and clock (and ``overrides``) in ``folder``."""
    raw = yaml.safe_load((DEPLOY_DIR / "cascade-rules.yaml").read_text())
    kwargs = raw["stages"][0]["model"]["kwargs"]
    kwargs.update({"asr_sentences": SENTENCES, "responder_now": NOW, **overrides})
    for stage in raw["stages"]:
        stage["model"]["kwargs"] = kwargs
    path = folder / "cascade-test.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _append(samples: np.ndarray) -> Any:
    audio = base64.b64encode(pcm16(samples)).decode()
    return command_from_realtime(
        {
            "type": "input_audio_buffer.append",
            "audio": audio,
            "format": {"type": "audio/pcm", "rate": IN_RATE},
        }
    )


def speak(handle: Any, samples: np.ndarray, piece_ms: int = 100) -> None:
    """Submit ``samples`` (16 kHz) as appends of ``piece_ms``, without pacing."""
    step = IN_RATE * piece_ms // 1000
    for k in range(0, samples.size, step):
        handle.submit(_append(samples[k : k + step]))


def silence(ms: int) -> np.ndarray:
    return np.zeros(IN_RATE * ms // 1000, dtype=np.float32)


class Reader:
    """Reads one in-process session's events; every wait is bounded by ``TIMEOUT_S``."""

    def __init__(self, handle: Any) -> None:
        self._it = handle.events().__aiter__()
        self.seen: list[Any] = []

    async def until(self, accept: Callable[[Any], bool]) -> list[Any]:
        out = []
        while True:
            event = await asyncio.wait_for(self._it.__anext__(), TIMEOUT_S)
            self.seen.append(event)
            out.append(event)
            if accept(event):
                return out

    async def until_type(self, wire_type: str) -> list[Any]:
        return await self.until(lambda e: e.type == wire_type)
