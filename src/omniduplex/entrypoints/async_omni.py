"""``AsyncOmni``: the turn-based in-process API."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any

from ..config.pipeline import PipelineConfig
from ..engine.async_omni_engine import AsyncOmniEngine
from ..engine.errors import (
    EngineBusyError,
    EngineDeadError,
    EngineError,
    EngineNotRunningError,
    RequestFailedError,
)
from ..engine.orchestrator import AddStageRequest
from ..engine.outputs import RequestOutput
from ..engine.stage.messages import AbortRequest, AddRequest, StageInput
from ..engine.stage.spec import StageModelSpec
from ..engine.stage.tasks import (
    SPEECH,
    TRANSCRIPTION,
    SpeechAudio,
    SpeechInput,
    StageTaskError,
    TranscriptionInput,
    speech_of,
    transcript_of,
)
from .async_omni_base import AsyncOmniBase

log = logging.getLogger(__name__)

_StreamItem = RequestOutput | BaseException


def _offered_tasks(spec: StageModelSpec) -> frozenset[str]:
    try:
        factory = spec.load_factory()
    except Exception:
        # A factory this process cannot import offers nothing; the engine reports the
        # failure itself when it starts the stage.
        log.debug("stage factory %s not importable here", spec.factory, exc_info=True)
        return frozenset()
    return frozenset(getattr(factory, "tasks", ()))


class AsyncOmni(AsyncOmniBase):
    """Runs one request at a time per ``generate`` call; many calls run concurrently.

    ``run_task`` (and ``transcribe`` / ``speak`` on top of it) addresses a request to the
    one stage that offers a standalone task (``engine/stage/tasks.py``).

    ``async with AsyncOmni(pipeline) as omni: async for out in omni.generate({...})``.
    """

    def __init__(self, pipeline: PipelineConfig | str | os.PathLike[str], **engine_kwargs: Any):
        self._streams: dict[str, asyncio.Queue[_StreamItem]] = {}
        self._task_stages: dict[str, int | None] = {}
        super().__init__(pipeline, **engine_kwargs)

    def _create_engine(self, *, pipeline: PipelineConfig, **engine_kwargs: Any) -> AsyncOmniEngine:
        return AsyncOmniEngine(pipeline, **engine_kwargs)

    async def generate(
        self, inputs: Mapping[str, Any], request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        """Stream the final stage's outputs for one request; the last one is ``finished``.

        Raises ``RequestFailedError`` if a stage fails the request, ``EngineDeadError``
        if the engine dies and ``EngineBusyError`` if ``max_requests`` are in flight.
        Leaving the iteration early (cancelling the consuming task, or closing the
        iterator) aborts the request in every stage.
        """
        if not isinstance(inputs, Mapping):
            raise TypeError(f"inputs must be a mapping, got {type(inputs).__name__}")
        request_id = request_id or f"req-{uuid.uuid4().hex}"
        message = AddRequest(request_id, StageInput(dict(inputs), final=True))
        async with aclosing(self._request_stream(request_id, message)) as outputs:
            async for item in outputs:
                if item.error is not None:
                    raise RequestFailedError(request_id, item.error, stage_index=item.stage_index)
                yield item

    # ---- stage tasks (requests addressed to one stage alone) ---------------------------

    def stage_for_task(self, task: str) -> int | None:
        """The first stage whose model offers ``task`` (``StageModel.tasks``), or ``None``."""
        if task not in self._task_stages:
            self._task_stages[task] = next(
                (
                    index
                    for index, stage in enumerate(self.pipeline.stages)
                    if task in _offered_tasks(stage.model)
                ),
                None,
            )
        return self._task_stages[task]

    async def run_task(
        self, task: str, inputs: Mapping[str, Any], request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        """Stream the outputs of one stage task; the last one is ``finished``.

        The request enters the stage that offers ``task`` and ends there. Raises
        ``LookupError`` if no stage offers it, otherwise as ``generate``.
        """
        stage_index = self.stage_for_task(task)
        if stage_index is None:
            raise LookupError(f"no stage of {self.pipeline.name!r} offers the task {task!r}")
        request_id = request_id or f"{task}-{uuid.uuid4().hex}"
        message = AddStageRequest(request_id, stage_index, StageInput(dict(inputs), final=True))
        async with aclosing(self._request_stream(request_id, message)) as outputs:
            async for item in outputs:
                if item.error is not None:
                    raise RequestFailedError(request_id, item.error, stage_index=item.stage_index)
                yield item

    async def transcribe(self, speech: TranscriptionInput) -> str:
        """The transcript of ``speech`` (``TRANSCRIPTION``); raises ``StageTaskError``."""
        data: Mapping[str, Any] = {}
        async with aclosing(self.run_task(TRANSCRIPTION, speech.stage_data())) as outputs:
            async for output in outputs:
                data = output.data
        return transcript_of(data)

    async def speak(self, text: SpeechInput) -> SpeechAudio:
        """``text`` spoken (``SPEECH``), as one buffer."""
        async with aclosing(self.run_task(SPEECH, text.stage_data())) as outputs:
            return speech_of([output.data async for output in outputs])

    async def _request_stream(
        self, request_id: str, message: object
    ) -> AsyncIterator[RequestOutput]:
        """Submit ``message`` (which opens ``request_id``) and yield the request's outputs.

        The last output is ``finished`` (a failure is one too). Engine death or shutdown
        raises; so does ``EngineBusyError`` when ``max_requests`` are in flight already
        (nothing was submitted). Leaving the iteration early aborts the request in every
        stage.
        """
        await self.start()
        if self._dead_reason is not None:
            raise EngineDeadError(self._dead_reason)
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already in use")
        if len(self._streams) >= self.pipeline.max_requests:
            raise EngineBusyError(self.pipeline.max_requests)
        stream: asyncio.Queue[_StreamItem] = asyncio.Queue()
        self._streams[request_id] = stream
        done = False
        try:
            self.engine.submit(message)
            while not done:
                item = await stream.get()
                if isinstance(item, BaseException):
                    done = True
                    raise item
                done = item.finished
                yield item
        finally:
            if self._streams.get(request_id) is stream:
                del self._streams[request_id]
            if not done:
                self._abort_quietly(request_id)

    @property
    def requests_in_flight(self) -> int:
        """Requests outside sessions running now (bounded by ``max_requests``)."""
        return len(self._streams)

    async def abort(self, request_id: str) -> None:
        """Abort a request; its ``generate`` iterator raises ``RequestFailedError``."""
        stream = self._streams.pop(request_id, None)
        self._abort_quietly(request_id)
        if stream is not None:
            stream.put_nowait(RequestFailedError(request_id, "aborted"))

    def _abort_quietly(self, request_id: str) -> None:
        with contextlib.suppress(EngineError):  # a dead or stopped engine holds nothing
            self.engine.submit(AbortRequest(request_id))

    def _route_engine_message(self, message: object) -> bool:
        if isinstance(message, RequestOutput):
            stream = self._streams.get(message.request_id)
            if stream is not None:
                stream.put_nowait(message)
            else:
                log.debug("output for a request nobody waits on: %s", message.request_id)
            return True
        return super()._route_engine_message(message)

    def _on_engine_dead(self, reason: str) -> None:
        super()._on_engine_dead(reason)
        self._fail_streams(EngineDeadError(reason))

    def _fail_streams(self, error: BaseException) -> None:
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.put_nowait(error)

    async def shutdown(self) -> None:
        self._fail_streams(EngineNotRunningError(f"{type(self).__name__} shut down"))
        await super().shutdown()


# The in-process turn-based API, and the engine's value types its callers use.
__all__ = [
    "SPEECH",
    "TRANSCRIPTION",
    "AsyncOmni",
    "SpeechAudio",
    "SpeechInput",
    "StageTaskError",
    "TranscriptionInput",
]
