"""The shared pieces of the compatibility drivers and the table script, without a server."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from client_compat.report import (
    COLUMNS,
    CompatReport,
    EventLog,
    Microphone,
    question_pcm16,
    silence_pcm16,
)

ROOT = Path(__file__).resolve().parents[2]


def _script() -> Any:
    path = ROOT / "benchmarks" / "client_compat.py"
    spec = importlib.util.spec_from_file_location("client_compat_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_report_is_ok_only_when_every_step_worked_and_the_client_saw_no_error() -> None:
    report = CompatReport("x", "1.0", "loopback")
    assert not report.ok and set(report.steps) == set(COLUMNS)
    for column in COLUMNS:
        report.mark(column)
    assert report.ok
    report.error("error event: bad_event: nope")
    assert not report.ok
    data = report.to_json()
    assert data["ok"] is False and list(data["steps"]) == list(COLUMNS)
    assert data["errors"] == ["error event: bad_event: nope"]


def test_the_question_is_speech_and_silence_is_silent() -> None:
    pcm = np.frombuffer(question_pcm16(24_000), dtype="<i2").astype(np.float32) / 32768
    assert pcm.size > 24_000 // 2 and float(np.sqrt(np.mean(pcm**2))) > 0.02
    assert silence_pcm16(100, 16_000) == bytes(3200)


async def test_the_microphone_streams_silence_between_utterances_in_real_time() -> None:
    sent: list[bytes] = []

    async def send(chunk: bytes) -> None:
        sent.append(chunk)

    mic = Microphone(send, 16_000, chunk_ms=20)
    await mic.say(b"\x01\x00" * 480)  # 30 ms: two chunks, the second padded
    await asyncio.sleep(0.05)
    await mic.stop()
    assert all(len(c) == 640 for c in sent)
    assert sent[0] == b"\x01\x00" * 320 and sent[1].startswith(b"\x01\x00" * 160)
    assert any(c == bytes(640) for c in sent[2:])


async def test_the_event_log_waits_for_a_match_after_a_position() -> None:
    log: EventLog[int] = EventLog()
    log.add(1)

    async def later() -> None:
        await asyncio.sleep(0.01)
        log.add(2)

    task = asyncio.create_task(later())
    assert await log.wait(lambda n: n > 0, after=1, timeout_s=5) == 2
    await task
    assert await log.wait(lambda n: n > 5, timeout_s=0.01) is None


def test_the_table_script_renders_a_row_per_run_between_the_readme_markers(tmp_path: Path) -> None:
    script = _script()
    clean = CompatReport("openai (GA, server_vad)", "3.57.0", "loopback")
    for column in COLUMNS:
        clean.mark(column)
    broken = CompatReport("openai-agents", "0.24.0", "cascade")
    broken.mark("connect")
    broken.error("RealtimeError: model_update_unsupported: nope")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{script.BEGIN}\nold\n{script.END}\nafter\n")
    script.rewrite_readme(readme, script.readme_block([clean, broken], "2026-12-01"))
    text = readme.read_text()
    assert "old" not in text and text.endswith(f"{script.END}\nafter\n")
    assert "| openai (GA, server_vad) | 3.57.0 | loopback | yes |" in text
    assert "| openai-agents | 0.24.0 | cascade | yes | **no** |" in text
    assert "1 of 2 runs clean" in " ".join(text.split()) and "model_update_unsupported" in text
    assert script.BEGIN in (ROOT / "docs" / "clients.md").read_text()
