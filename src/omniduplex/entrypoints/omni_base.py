"""The root of every in-process API: owns one engine, built by a factory method."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

from ..config.pipeline import PipelineConfig, load_deploy_config
from ..engine.omni_engine_base import OmniEngineBase


class OmniBase(ABC):
    """``pipeline`` is a ``PipelineConfig``, a deploy YAML path, or a shipped deploy name.

    Subclasses pick their engine in ``_create_engine``; extra keyword arguments go to it.
    """

    def __init__(self, pipeline: PipelineConfig | str | os.PathLike[str], **engine_kwargs: Any):
        if not isinstance(pipeline, PipelineConfig):
            pipeline = load_deploy_config(pipeline)
        self.pipeline = pipeline
        self.engine = self._create_engine(pipeline=pipeline, **engine_kwargs)

    @abstractmethod
    def _create_engine(self, *, pipeline: PipelineConfig, **engine_kwargs: Any) -> OmniEngineBase:
        """Build (not start) this API's engine."""
