"""Turn responses (chat completions) on the duplex engine: planned, run and projected there."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest
from duplex_helpers import TIMEOUT_S, deployment

from omniduplex.engine.duplex.plugin import ModelAudio, ModelText
from omniduplex.engine.duplex.turn_response import (
    TurnFailure,
    TurnResponseError,
    TurnResponseRequest,
)
from omniduplex.entrypoints.duplex_omni import DuplexOmni


def text_turn(text: str, **session: object) -> TurnResponseRequest:
    return TurnResponseRequest(
        request_id=f"turn-{uuid.uuid4().hex}",
        input_audio=np.zeros(0, dtype=np.float32),
        input_text=text,
        options={"modalities": ["text"], "output_modalities": ["text"]},
        session={"model": "loopback", "modalities": ["text"], **session},
    )


async def results_of(omni: DuplexOmni, request: TurnResponseRequest) -> list[object]:
    async def run() -> list[object]:
        return [result async for result in omni.respond(request)]

    return await asyncio.wait_for(run(), TIMEOUT_S)


async def test_a_text_turn_comes_back_as_model_results_and_holds_nothing() -> None:
    async with DuplexOmni(deployment("loopback-fast", max_sessions=1)) as omni:
        # More turns at once than the deployment has session slots: none takes one.
        requests = [text_turn(f"turn number {i}") for i in range(4)]
        answers = await asyncio.gather(*(results_of(omni, r) for r in requests))
        for i, results in enumerate(answers):
            assert results and all(isinstance(r, ModelText | ModelAudio) for r in results)
            text = "".join(r.delta if isinstance(r, ModelText) else r.text for r in results)
            assert text == f"turn number {i}"
        orchestrator = omni.engine._orchestrator
        assert all(orchestrator.get_request(r.request_id) is None for r in requests)
        assert omni._streams == {}


async def test_a_planning_failure_is_a_typed_failure(monkeypatch) -> None:
    async with DuplexOmni(deployment("loopback-fast")) as omni:
        plugin = omni.engine.plugin

        def broken(state, request):
            raise RuntimeError("no plan today")

        monkeypatch.setattr(plugin, "plan_response", broken)
        with pytest.raises(TurnResponseError) as failed:
            await results_of(omni, text_turn("hello"))
        assert failed.value.kind is TurnFailure.MODEL_FAILED
        assert "no plan today" in failed.value.message
        monkeypatch.undo()
        assert await results_of(omni, text_turn("hello"))
