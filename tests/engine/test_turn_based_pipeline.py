"""AsyncOmni over real stage workers: streaming, batching, errors, abort."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from omniduplex.config import PipelineConfig, StageConfig
from omniduplex.engine.errors import EngineBusyError, EngineNotRunningError, RequestFailedError
from omniduplex.engine.outputs import RequestOutput
from omniduplex.engine.stage import StageModelSpec
from omniduplex.entrypoints.async_omni import AsyncOmni

TIMEOUT_S = 20.0


def stage(name: str, factory: str, worker: str = "thread", max_batch: int = 8, **kwargs):
    spec = StageModelSpec(f"stage_models:{factory}", dict(kwargs))
    return StageConfig(name=name, model=spec, worker=worker, max_batch=max_batch)


def pipeline(*stages: StageConfig) -> PipelineConfig:
    return PipelineConfig(name="test", stages=stages)


async def collect(stream: AsyncIterator[RequestOutput]) -> list[RequestOutput]:
    async def run() -> list[RequestOutput]:
        return [item async for item in stream]

    return await asyncio.wait_for(run(), TIMEOUT_S)


@pytest.mark.parametrize("worker", ["thread", "process"])
async def test_two_stage_pipeline_streams_through_a_resumable_second_stage(worker):
    config = pipeline(
        stage("upper", "UpperChunker", worker, chunk_size=4),
        stage("record", "StepRecorder", worker),
    )
    async with AsyncOmni(config) as omni:
        outputs = await collect(omni.generate({"text": "hello world"}, request_id="r1"))
        assert [o.data["text"] for o in outputs] == ["HELL", "O WO", "RLD"]
        assert [o.finished for o in outputs] == [False, False, True]
        assert {o.request_id for o in outputs} == {"r1"}
        # Stage 1 saw one request: one add, then one update per stage-0 chunk.
        assert [o.data["input_index"] for o in outputs] == [0, 1, 2]
        assert outputs[-1].stage_metrics[1].inputs_received == 3
        assert outputs[-1].stage_metrics[0].step_count == 3
        assert outputs[-1].stage_index == 1

        # The engine keeps serving; concurrent requests stay separate.
        texts = ["ab", "cdefgh", "ijklmnopq"]
        results = await asyncio.gather(*(collect(omni.generate({"text": t})) for t in texts))
        for text, outs in zip(texts, results, strict=True):
            assert "".join(o.data["text"] for o in outs) == text.upper()
            assert outs[-1].finished


async def test_batching_is_real():
    config = pipeline(
        stage("record", "StepRecorder", max_batch=4),
        stage("upper", "UpperChunker", chunk_size=100),
    )
    async with AsyncOmni(config) as omni:
        requests = [
            collect(omni.generate({"text": f"req{i}", "wait_for_peers": 8})) for i in range(8)
        ]
        results = await asyncio.gather(*requests)
        recorder = omni.engine.stages[0].worker.model
        assert recorder.batch_sizes == [4, 4]
        batch_sizes = [outs[-1].stage_metrics[0].batch_size for outs in results]
        assert max(batch_sizes) == 4  # > 1 and <= max_batch
        assert [outs[-1].data["text"] for outs in results] == [f"REQ{i}" for i in range(8)]


async def test_model_error_fails_only_that_request_and_the_engine_keeps_serving():
    config = pipeline(
        stage("record", "StepRecorder", poison_word="poison"),
        stage("upper", "UpperChunker"),
    )
    async with AsyncOmni(config) as omni:
        texts = ["one", "poison", "two", "three"]
        tasks = [
            asyncio.ensure_future(collect(omni.generate({"text": t, "wait_for_peers": 4})))
            for t in texts
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        error = results[1]
        assert isinstance(error, RequestFailedError)
        assert error.stage_index == 0 and "poisoned input" in error.error
        for text, outs in zip(texts, results, strict=True):
            if text != "poison":
                assert "".join(o.data["text"] for o in outs) == text.upper()
        # The poisoned request shared its batch with the others.
        assert omni.engine.stages[0].worker.model.batch_sizes[0] == 4
        outs = await collect(omni.generate({"text": "after"}))
        assert "".join(o.data["text"] for o in outs) == "AFTER"


async def test_cancelling_the_iterator_aborts_the_request_in_every_stage():
    config = pipeline(
        stage("first", "HoldThenEchoDouble"),
        stage("second", "HoldThenEchoDouble"),
    )
    async with AsyncOmni(config) as omni:
        stream = omni.generate({"hold": True}, request_id="held")
        first = await asyncio.wait_for(anext(stream), TIMEOUT_S)
        assert first.data["held_by"] == [0, 1] and not first.finished
        await stream.aclose()
        for stage_handle in omni.engine.stages:
            observed = stage_handle.worker.model.observed
            assert await asyncio.to_thread(observed.wait_aborted, "held", TIMEOUT_S)

        # Cancelling the task that consumes the iterator aborts just the same.
        reached_last_stage = asyncio.Event()

        async def consume(request_id: str) -> None:
            async for _ in omni.generate({"hold": True}, request_id=request_id):
                reached_last_stage.set()  # the first output comes from the last stage

        task = asyncio.ensure_future(consume("held2"))
        await asyncio.wait_for(reached_last_stage.wait(), TIMEOUT_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for stage_handle in omni.engine.stages:
            observed = stage_handle.worker.model.observed
            assert await asyncio.to_thread(observed.wait_aborted, "held2", TIMEOUT_S)

        # So does AsyncOmni.abort, and the iterator says why it ended.
        reached_last_stage.clear()
        task = asyncio.ensure_future(consume("held3"))
        await asyncio.wait_for(reached_last_stage.wait(), TIMEOUT_S)
        await omni.abort("held3")
        with pytest.raises(RequestFailedError, match="aborted"):
            await asyncio.wait_for(task, TIMEOUT_S)
        for stage_handle in omni.engine.stages:
            observed = stage_handle.worker.model.observed
            assert await asyncio.to_thread(observed.wait_aborted, "held3", TIMEOUT_S)


async def test_lifecycle_lazy_start_rpc_and_idempotent_shutdown():
    omni = AsyncOmni(pipeline(stage("echo", "HoldThenEchoDouble")))
    assert not omni.started
    outs = await collect(omni.generate({"text": "hi"}))
    assert omni.started and [o.data for o in outs] == [{"text": "hi"}]
    assert await omni.engine.call(lambda orch: orch.stage_count) == 1

    held = omni.generate({"hold": True}, request_id="dup")
    await asyncio.wait_for(anext(held), TIMEOUT_S)
    with pytest.raises(ValueError, match="already in use"):
        await anext(omni.generate({"text": "x"}, request_id="dup"))
    await held.aclose()

    # An RPC still running at shutdown is answered, not left hanging.
    never = asyncio.ensure_future(omni.engine.call(lambda orch: asyncio.Event().wait()))
    await asyncio.sleep(0)
    await omni.shutdown()
    with pytest.raises(EngineNotRunningError):
        await asyncio.wait_for(never, TIMEOUT_S)

    await omni.shutdown()
    assert not omni.engine.running
    with pytest.raises(EngineNotRunningError):
        omni.engine.submit(object())


async def test_requests_beyond_max_requests_are_refused_at_once_and_admitted_later():
    spec = StageModelSpec("stage_models:HoldThenEchoDouble")
    config = PipelineConfig(name="admit", stages=[StageConfig("hold", spec)], max_requests=2)
    async with AsyncOmni(config) as omni:
        held = [omni.generate({"hold": True}, request_id=f"held{n}") for n in range(2)]
        for stream in held:
            assert (await asyncio.wait_for(anext(stream), TIMEOUT_S)).data["held_by"] == [0]
        assert omni.requests_in_flight == 2
        with pytest.raises(EngineBusyError) as refused:
            await collect(omni.generate({"text": "one too many"}, request_id="third"))
        assert refused.value.limit == 2 and refused.value.code == "resource_exhausted"
        assert omni.requests_in_flight == 2  # the refused one never started
        await held[0].aclose()  # leaving the iteration aborts it: its slot frees at once
        assert omni.requests_in_flight == 1
        outputs = await collect(omni.generate({"text": "now"}, request_id="fourth"))
        assert outputs[-1].finished and outputs[-1].data["text"] == "now"
        await held[1].aclose()
        assert omni.requests_in_flight == 0


def test_max_requests_must_be_a_positive_integer():
    spec = StageModelSpec("stage_models:HoldThenEchoDouble")
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_requests"):
            PipelineConfig(name="admit", stages=[StageConfig("hold", spec)], max_requests=bad)
