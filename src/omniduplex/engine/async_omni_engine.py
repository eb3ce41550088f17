"""The turn-based engine: requests in, final-stage outputs out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config.pipeline import PipelineConfig
from .omni_engine_base import OmniEngineBase
from .orchestrator import Orchestrator, OutputSink
from .stage.handle import StageHandle
from .stage.messages import AbortRequest, AddRequest, StageInput, UpdateRequest


class AsyncOmniEngine(OmniEngineBase):
    def _create_orchestrator(
        self,
        *,
        stages: Sequence[StageHandle],
        output_sink: OutputSink,
        pipeline: PipelineConfig,
        **kwargs: Any,
    ) -> Orchestrator:
        return Orchestrator(stages=stages, output_sink=output_sink, pipeline=pipeline, **kwargs)

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        self.submit(AddRequest(request_id, inputs))

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        """Stream more input into stage 0 of an open request."""
        self.submit(UpdateRequest(request_id, inputs))

    def abort_request(self, request_id: str) -> None:
        self.submit(AbortRequest(request_id))
