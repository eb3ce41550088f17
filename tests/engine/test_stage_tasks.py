"""Stage tasks: a request addressed to the one stage that offers it, on real workers."""

from __future__ import annotations

import pytest
from test_turn_based_pipeline import collect, pipeline, stage

from omniduplex.entrypoints.async_omni import AsyncOmni


async def test_a_task_request_enters_its_stage_and_ends_there() -> None:
    config = pipeline(stage("record", "StepRecorder"), stage("shout", "ShoutTaskChunker"))
    async with AsyncOmni(config) as omni:
        assert omni.stage_for_task("shout") == 1
        assert omni.stage_for_task("whisper") is None
        outputs = await collect(omni.run_task("shout", {"text": "hello"}, request_id="t1"))
        assert "".join(o.data["text"] for o in outputs) == "HELLO"
        assert {o.stage_index for o in outputs} == {1}
        assert outputs[-1].finished and set(outputs[-1].stage_metrics) == {1}
        # The whole pipeline still serves ordinary requests.
        whole = await collect(omni.generate({"text": "hi"}))
        assert whole[-1].stage_index == 1 and 0 in whole[-1].stage_metrics
        with pytest.raises(LookupError):
            await collect(omni.run_task("whisper", {"text": "x"}))


async def test_a_task_of_stage_zero_never_reaches_the_next_stage() -> None:
    config = pipeline(stage("shout", "ShoutTaskChunker"), stage("record", "StepRecorder"))
    async with AsyncOmni(config) as omni:
        outputs = await collect(omni.run_task("shout", {"text": "abcdef"}))
        assert [o.data for o in outputs] == [{"text": "ABCD"}, {"text": "EF"}]
        assert {o.stage_index for o in outputs} == {0}
        assert omni.engine._orchestrator.get_request(outputs[-1].request_id) is None
