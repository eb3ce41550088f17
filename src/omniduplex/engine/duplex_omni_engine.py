"""``DuplexOmniEngine``: the engine of a duplex deployment.

It loads the deployment's model plugin before any stage starts, builds the
``DuplexOrchestrator`` (which hosts the sessions) and offers the session surface: open /
close / resume / touch are calls run on the orchestrator (``engine.call``), commands are
one-way. Session events come back
on ``outputs`` as ``SessionEventMessage``. Turn-based requests (``add_request``) keep
working on the same engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config.pipeline import PipelineConfig
from .async_omni_engine import AsyncOmniEngine
from .duplex.messages import AbandonOpenMessage, SessionCommandMessage
from .duplex.plugin import DuplexModelPlugin, load_duplex_plugin
from .duplex.runtime_config import DuplexSessionRuntimeConfig
from .duplex.session.lease import LeaseActivity
from .duplex.session.manager import OpenResult
from .duplex_orchestrator import DuplexOrchestrator
from .errors import EngineError
from .orchestrator import OutputSink
from .stage.handle import StageHandle


class DuplexOmniEngine(AsyncOmniEngine):
    """``clock`` drives session leases (inject one to test expiry without sleeping).

    The plugin is built from ``pipeline.duplex_plugin`` with the first stage's model
    kwargs as its options (plugin and stage model read the same settings block).
    """

    def __init__(
        self,
        pipeline: PipelineConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        plugin_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(pipeline, **kwargs)
        self.clock = clock
        self._plugin_options = plugin_options
        self.plugin: DuplexModelPlugin | None = None
        self.runtime_config: DuplexSessionRuntimeConfig | None = None

    # ---- seams --------------------------------------------------------------------------

    def _validate_deployment(self) -> None:
        pipeline = self.pipeline
        if pipeline.session_mode != "duplex" or pipeline.duplex_plugin is None:
            raise ValueError(
                f"pipeline {pipeline.name!r} is not a duplex deployment "
                f"(session_mode {pipeline.session_mode!r}, duplex_plugin "
                f"{pipeline.duplex_plugin!r}); serve it with AsyncOmni"
            )
        self.runtime_config = DuplexSessionRuntimeConfig.from_mapping(pipeline.duplex_session)
        options = self._plugin_options
        if options is None:
            options = pipeline.stages[0].model.kwargs
        self.plugin = load_duplex_plugin(pipeline.duplex_plugin, options)

    def _create_orchestrator(
        self,
        *,
        stages: Sequence[StageHandle],
        output_sink: OutputSink,
        pipeline: PipelineConfig,
        **kwargs: Any,
    ) -> DuplexOrchestrator:
        assert self.plugin is not None and self.runtime_config is not None
        return DuplexOrchestrator(
            stages=stages,
            output_sink=output_sink,
            pipeline=pipeline,
            plugin=self.plugin,
            runtime=self.runtime_config,
            clock=self.clock,
            **kwargs,
        )

    # ---- sessions -------------------------------------------------------------------------

    async def open_session(self, session_id: str, session: Mapping[str, Any]) -> OpenResult:
        """Admit a session; its ``session.created`` is on ``outputs`` before this returns.

        Raises ``DuplexSessionError`` (``resource_exhausted``, ``invalid_session_config``
        ...). A cancelled open releases its admission slot.
        """
        try:
            config = dict(session)
            return await self.call(lambda o: o.open_session(session_id, config))
        except asyncio.CancelledError:
            with contextlib.suppress(EngineError):
                self.submit(AbandonOpenMessage(session_id))
            raise

    async def close_session(self, session_id: str, reason: str = "client_close") -> bool:
        """Close a session; its ``session.closed`` is on ``outputs`` before this returns."""
        return await self.call(lambda o: o.manager.close(session_id, reason))

    async def resume_session(self, session_id: str, expected_lease_generation: int) -> OpenResult:
        return await self.call(lambda o: o.manager.resume(session_id, expected_lease_generation))

    async def touch_session(
        self,
        session_id: str,
        activity: LeaseActivity = LeaseActivity.HEARTBEAT,
        *,
        expected_lease_generation: int | None = None,
    ) -> int:
        activity = LeaseActivity(activity)
        return await self.call(
            lambda o: o.manager.touch(
                session_id, activity, expected_generation=expected_lease_generation
            )
        )

    def submit_command(self, session_id: str, command: Any) -> None:
        """Queue one command for a session (one-way, ordered with every other message)."""
        self.submit(SessionCommandMessage(session_id, command))
