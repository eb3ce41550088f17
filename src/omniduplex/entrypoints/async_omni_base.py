"""Asyncio lifecycle and the output pump shared by the async in-process APIs."""

from __future__ import annotations

import asyncio
import logging
import os
from types import TracebackType
from typing import Any, Self

from ..config.pipeline import PipelineConfig
from ..engine.outputs import EngineDead
from .omni_base import OmniBase

log = logging.getLogger(__name__)


class AsyncOmniBase(OmniBase):
    """Starts the engine on the caller's loop and pumps its outputs.

    The pump reads the engine's output queue on the caller's loop and hands each message
    to ``_route_engine_message``; subclasses route what they know and pass the rest to
    ``super()``.
    """

    def __init__(self, pipeline: PipelineConfig | str | os.PathLike[str], **engine_kwargs: Any):
        self._pump_task: asyncio.Task[None] | None = None
        self._start_lock: asyncio.Lock | None = None
        self._closed = False
        self._dead_reason: str | None = None
        self._dead = asyncio.Event()
        super().__init__(pipeline, **engine_kwargs)

    @property
    def started(self) -> bool:
        return self._pump_task is not None

    @property
    def dead_reason(self) -> str | None:
        """Why the engine can serve nothing more (a stage's restart budget is spent), or
        None while it serves."""
        return self._dead_reason or self.engine.dead_reason

    async def wait_dead(self) -> str:
        """Wait until the engine has died and everything waiting on it has been failed
        (sessions closed); returns why."""
        await self._dead.wait()
        assert self._dead_reason is not None
        return self._dead_reason

    async def start(self) -> None:
        """Start the engine (idempotent); raises ``EngineStartupError`` if a stage fails.

        An engine starts once: after a failed start, build a new instance.
        """
        if self._start_lock is None:
            # Created lazily so it binds to the loop the API is used from.
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._pump_task is not None:
                return
            if self._closed:
                raise RuntimeError(f"{type(self).__name__} is shut down")
            await self.engine.start_async()
            self._pump_task = asyncio.create_task(self._pump_outputs(), name="omni-output-pump")

    async def _pump_outputs(self) -> None:
        outputs = self.engine.outputs
        while True:
            message = await outputs.get()
            try:
                handled = self._route_engine_message(message)
            except Exception:
                log.exception("routing %s failed", type(message).__name__)
                continue
            if not handled:
                log.warning("engine message %s had no route", type(message).__name__)
            if self._let_consumers_run(message):
                await asyncio.sleep(0)

    def _let_consumers_run(self, message: object) -> bool:
        """Whether the pump should yield to the consumers after routing ``message``."""
        return False

    def _route_engine_message(self, message: object) -> bool:
        """Deliver one engine message; False if no class in the chain knows it."""
        if isinstance(message, EngineDead):
            self._on_engine_dead(message.reason)
            return True
        return False

    def _on_engine_dead(self, reason: str) -> None:
        """The engine can serve nothing more; subclasses fail what is waiting on it
        (then ``wait_dead`` returns)."""
        self._dead_reason = reason
        self._dead.set()

    async def shutdown(self) -> None:
        """Stop the pump and the engine. Idempotent."""
        if self._closed:
            return
        self._closed = True
        task, self._pump_task = self._pump_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.engine.shutdown_async()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()
