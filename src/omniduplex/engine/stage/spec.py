"""How to build a stage model where it runs: an import path plus keyword arguments.

A spec, not a model instance, travels to the worker so that a subprocess (or a remote
worker) builds its own model and nothing unpicklable crosses the boundary.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from .model import StageModel


@dataclass(frozen=True)
class StageModelSpec:
    """``factory`` is ``"package.module:Attr"``; ``Attr(**kwargs)`` returns the model."""

    factory: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        module, sep, attr = (
            self.factory.partition(":") if isinstance(self.factory, str) else ("", "", "")
        )
        if not sep or not module or not attr:
            raise ValueError(
                f"stage model factory must look like 'package.module:Class', got {self.factory!r}"
            )
        if not isinstance(self.kwargs, dict) or not all(isinstance(k, str) for k in self.kwargs):
            raise ValueError(f"stage model kwargs must be a mapping of names, got {self.kwargs!r}")

    def load_factory(self) -> Any:
        module_name, _, attr_path = self.factory.partition(":")
        target: Any = importlib.import_module(module_name)
        for part in attr_path.split("."):
            target = getattr(target, part)
        if not callable(target):
            raise TypeError(f"stage model factory {self.factory!r} is not callable")
        return target

    def build(self) -> StageModel:
        model = self.load_factory()(**self.kwargs)
        if not isinstance(model, StageModel):
            raise TypeError(
                f"stage model factory {self.factory!r} returned {type(model).__name__}, "
                "not a StageModel"
            )
        return model
