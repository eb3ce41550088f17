"""The ``minicpmo-4.5`` deployment behind the real server, its upstream model replaced by
``MiniCPMODuplexDouble`` through the deployment's injectable ``upstream_factory``."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import io
import sys
import time
import wave
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))

from minicpmo_double import DoubleDuplexFactory, MiniCPMODuplexDouble
from server_harness import TIMEOUT_S, RunningServer, run_app

from omniduplex.config.pipeline import PipelineConfig, load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.entrypoints.openai.api_server import build_app

UNIT = 16_000  # 1 s at 16 kHz
URL_QUERY = "?model=minicpmo-4.5&duplex=1"  # reads the listen/speak decisions


def voice_wav(seconds: float = 1.0, rate: int = 24_000) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    pcm = (0.2 * np.sin(2 * np.pi * 180 * t) * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm.tobytes())
    return buffer.getvalue()


def data_url(wav: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(wav).decode()


def pipeline_with_double(
    voice_dir: Path, script: Sequence[str], *, slots: int = 2
) -> PipelineConfig:
    """The shipped deployment, its upstream factory pointed at the double (no CUDA)."""
    (voice_dir / "house.wav").write_bytes(voice_wav())
    pipeline = load_deploy_config("minicpmo-4.5")
    stage = pipeline.stages[0]
    kwargs = {
        **stage.model.kwargs,
        "upstream_factory": "minicpmo_double:DoubleDuplexFactory",
        "upstream_factory_kwargs": {"script": list(script)},
        "voice_dir": str(voice_dir),
        "default_voice": "house",
        "device": "cpu",
        "slots": slots,
    }
    model = dataclasses.replace(stage.model, kwargs=kwargs)
    return dataclasses.replace(
        pipeline,
        stages=(dataclasses.replace(stage, model=model),),
        duplex_session={**pipeline.duplex_session, "max_sessions": slots},
    )


@contextlib.contextmanager
def serve(pipeline: PipelineConfig) -> Iterator[RunningServer]:
    app = build_app(DuplexOmni(pipeline), model_name="minicpmo-4.5")
    with run_app(app) as running:
        yield running


def stage_model(server: RunningServer) -> Any:
    return server.app.state.omni.engine.stages[0].worker.model


def factory_of(server: RunningServer) -> DoubleDuplexFactory:
    return stage_model(server).factory


def f32(samples: np.ndarray) -> str:
    return base64.b64encode(samples.astype("<f4").tobytes()).decode()


async def wait_for(condition: Any, factory: DoubleDuplexFactory, what: str) -> None:
    """Poll ``condition`` (a hang guard bounds it); a contract violation fails at once."""
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert not factory.violations, f"upstream contract violated: {factory.violations}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)
    assert not factory.violations, f"upstream contract violated: {factory.violations}"


def double_of(factory: DoubleDuplexFactory, index: int = -1) -> MiniCPMODuplexDouble:
    return factory.opened[index][1]


async def send_unit(client: Any, level: float) -> None:
    await client.send(
        {"type": "input_audio_buffer.append", "audio": f32(np.full(UNIT, level, np.float32))}
    )


def check_lifecycles(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Responses are well formed: created, speak, deltas, then listen + done(completed)
    or done(cancelled); nothing of a response after its done, nothing outside one."""
    responses: dict[str, list[dict[str, Any]]] = {}
    order: list[str] = []
    current: str | None = None
    finished: set[str] = set()
    for event in events:
        kind = event["type"]
        rid = event.get("response_id", event.get("response", {}).get("id"))
        if rid is not None and rid in finished:
            raise AssertionError(f"{kind} of {rid} after its response.done")
        if kind == "response.created":
            assert current is None, "a response opened inside another"
            current = rid
            responses[rid] = [event]
            order.append(rid)
        elif kind.startswith("response.") and rid is not None:
            assert rid == current, f"{kind} of {rid} outside its response ({current})"
            responses[rid].append(event)
            if kind == "response.done":
                finished.add(rid)
                current = None
    for rid in order:
        kinds = [e["type"] for e in responses[rid]]
        # The model decided to speak before any of its output (the decision events go
        # out when the model decides; audio deltas are paced as they play).
        assert "response.speak" in kinds, kinds
        assert kinds.count("response.speak") == 1
        if "response.output_audio.delta" in kinds:
            assert kinds.index("response.speak") < kinds.index("response.output_audio.delta")
        if kinds[-1] == "response.done":
            status = responses[rid][-1]["response"]["status"]
            assert status in ("completed", "cancelled"), status
            if status == "completed":
                assert kinds.count("response.listen") == 1  # ... and decided to listen
                assert kinds.index("response.speak") < kinds.index("response.listen")
    return [responses[rid] for rid in order]
