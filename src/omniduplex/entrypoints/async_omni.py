"""``AsyncOmni``: the turn-based in-process API."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ..config.pipeline import PipelineConfig
from ..engine.async_omni_engine import AsyncOmniEngine
from ..engine.errors import EngineDeadError, EngineError, EngineNotRunningError, RequestFailedError
from ..engine.outputs import RequestOutput
from ..engine.stage.messages import AbortRequest, AddRequest, StageInput
from .async_omni_base import AsyncOmniBase

log = logging.getLogger(__name__)

_StreamItem = RequestOutput | BaseException


class AsyncOmni(AsyncOmniBase):
    """Runs one request at a time per ``generate`` call; many calls run concurrently.

    ``async with AsyncOmni(pipeline) as omni: async for out in omni.generate({...})``.
    """

    def __init__(self, pipeline: PipelineConfig | str | os.PathLike[str], **engine_kwargs: Any):
        self._streams: dict[str, asyncio.Queue[_StreamItem]] = {}
        super().__init__(pipeline, **engine_kwargs)

    def _create_engine(self, *, pipeline: PipelineConfig, **engine_kwargs: Any) -> AsyncOmniEngine:
        return AsyncOmniEngine(pipeline, **engine_kwargs)

    async def generate(
        self, inputs: Mapping[str, Any], request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        """Stream the final stage's outputs for one request; the last one is ``finished``.

        Raises ``RequestFailedError`` if a stage fails the request and ``EngineDeadError``
        if the engine dies. Leaving the iteration early (cancelling the consuming task,
        or closing the iterator) aborts the request in every stage.
        """
        if not isinstance(inputs, Mapping):
            raise TypeError(f"inputs must be a mapping, got {type(inputs).__name__}")
        await self.start()
        if self._dead_reason is not None:
            raise EngineDeadError(self._dead_reason)
        request_id = request_id or f"req-{uuid.uuid4().hex}"
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already in use")
        stream: asyncio.Queue[_StreamItem] = asyncio.Queue()
        self._streams[request_id] = stream
        done = False
        try:
            self.engine.submit(AddRequest(request_id, StageInput(dict(inputs), final=True)))
            while True:
                item = await stream.get()
                if isinstance(item, BaseException):
                    done = True
                    raise item
                if item.error is not None:
                    done = True
                    raise RequestFailedError(request_id, item.error, stage_index=item.stage_index)
                done = item.finished
                yield item
                if done:
                    return
        finally:
            if self._streams.get(request_id) is stream:
                del self._streams[request_id]
            if not done:
                self._abort_quietly(request_id)

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
