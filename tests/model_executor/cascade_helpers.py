"""The cascade deployment the cascade tests run: a grammar of expected sentences (exact
recognition of espeak speech) and a pinned clock for the built-in responder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from omniduplex.config.pipeline import DEPLOY_DIR

SENTENCES = [
    "what time is it",
    "what day is it",
    "hello",
    "thank you",
    "i would like to know what the weather is like today",
]
NOW = "2026-01-02T15:04:00"
SERVER_VAD = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
}


def write_deploy(folder: Path, **overrides: Any) -> Path:
    """``cascade.yaml`` with the test grammar and clock (and ``overrides``) in ``folder``."""
    raw = yaml.safe_load((DEPLOY_DIR / "cascade.yaml").read_text())
    kwargs = raw["stages"][0]["model"]["kwargs"]
    kwargs.update({"asr_sentences": SENTENCES, "responder_now": NOW, **overrides})
    for stage in raw["stages"]:
        stage["model"]["kwargs"] = kwargs
    path = folder / "cascade-test.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
