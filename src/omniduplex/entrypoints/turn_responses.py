"""Turn responses (``/v1/chat/completions``) behind one seam, for either kind of deployment.

``TurnResponder`` is what the chat completions route talks to: the model's declared
capabilities and sample rates, and ``respond`` (a ``TurnResponseRequest`` in, model
results out, every failure a ``TurnResponseError``).

- ``EngineTurnResponder`` serves a duplex deployment through ``DuplexOmni.respond``: the
  orchestrator plans the response with the plugin, the stage workers run it, and the
  orchestrator projects its outputs, so it is scheduled and batched like a session's work.
- ``PluginTurnResponder`` serves a turn deployment (``session_mode: turn``). Its
  orchestrator is the turn-based one, which knows no plugin, so the response is planned
  and its outputs projected here, with the same ``TurnResponsePlanner``, around
  ``AsyncOmni.generate``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass

from ..config.pipeline import PipelineConfig
from ..engine.duplex.capabilities import DuplexCapabilities
from ..engine.duplex.plugin import (
    DuplexModelPlugin,
    ModelAudio,
    ModelResult,
    ModelText,
    load_duplex_plugin,
)
from ..engine.duplex.turn_response import (
    TurnFailure,
    TurnResponseError,
    TurnResponsePlanner,
    TurnResponseRequest,
    stage_failure,
)
from ..engine.errors import (
    EngineBusyError,
    EngineDeadError,
    EngineNotRunningError,
    RequestFailedError,
)
from .async_omni import AsyncOmni
from .duplex_omni import DuplexOmni


@dataclass(frozen=True, slots=True)
class TurnModel:
    """What a caller must know of the model to build a turn for it."""

    capabilities: DuplexCapabilities
    input_sample_rate_hz: int
    output_sample_rate_hz: int


class TurnResponder(ABC):
    """Runs turn responses of one deployment's model."""

    @abstractmethod
    def model(self) -> TurnModel | None:
        """The model's declarations, or ``None`` while the engine is still starting."""

    @abstractmethod
    def _results(self, request: TurnResponseRequest) -> AsyncIterator[ModelResult]:
        """The response's model results; engine errors propagate as they are."""

    async def respond(self, request: TurnResponseRequest) -> AsyncIterator[ModelResult]:
        """Yield the response's model results, up to its end.

        Raises ``TurnResponseError`` when it does not complete. Leaving the iteration
        early aborts the request in every stage.
        """
        try:
            async with aclosing(self._results(request)) as results:
                async for result in results:
                    yield result
        except EngineBusyError as exc:
            raise TurnResponseError(TurnFailure.BUSY, exc.code, str(exc)) from exc
        except (EngineDeadError, EngineNotRunningError) as exc:
            raise TurnResponseError(
                TurnFailure.UNAVAILABLE, "engine_unavailable", str(exc)
            ) from exc
        except RequestFailedError as exc:
            raise stage_failure(exc.error) from exc


class EngineTurnResponder(TurnResponder):
    """A duplex deployment: the engine plans, runs and projects the response."""

    def __init__(self, omni: DuplexOmni) -> None:
        self.omni = omni

    def model(self) -> TurnModel | None:
        plugin = self.omni.engine.plugin  # loaded when the engine starts
        if plugin is None:
            return None
        capabilities = plugin.capabilities(max_sessions=self.omni.runtime_config.max_sessions)
        return TurnModel(capabilities, plugin.input_sample_rate_hz, plugin.output_sample_rate_hz)

    def _results(self, request: TurnResponseRequest) -> AsyncIterator[ModelResult]:
        return self.omni.respond(request)


class PluginTurnResponder(TurnResponder):
    """A turn deployment: ``AsyncOmni`` runs the stages; the plugin plans and projects."""

    def __init__(self, omni: AsyncOmni, plugin: DuplexModelPlugin) -> None:
        self.omni = omni
        self.planner = TurnResponsePlanner(plugin)

    def model(self) -> TurnModel | None:
        plugin = self.planner.plugin
        capabilities = plugin.capabilities(max_sessions=1)  # a turn deployment has no sessions
        return TurnModel(capabilities, plugin.input_sample_rate_hz, plugin.output_sample_rate_hz)

    async def _results(self, request: TurnResponseRequest) -> AsyncIterator[ModelResult]:
        inputs = self.planner.plan(request)
        outputs = self.omni.generate(inputs, request_id=request.request_id)
        async with aclosing(outputs):
            async for output in outputs:
                projection = self.planner.project(output.data)
                for result in projection.results:
                    yield result
                if projection.failure is not None:
                    raise projection.failure
                if projection.ended:
                    return


def turn_plugin(pipeline: PipelineConfig) -> DuplexModelPlugin | None:
    """The plugin that plans a turn deployment's chat requests (``None``: it has none)."""
    if pipeline.duplex_plugin is None:
        return None
    return load_duplex_plugin(pipeline.duplex_plugin, pipeline.stages[0].model.kwargs)


def turn_responder(omni: AsyncOmni, plugin: DuplexModelPlugin | None) -> TurnResponder | None:
    """The responder of a deployment: its engine's own, or ``plugin``'s beside ``omni``."""
    if isinstance(omni, DuplexOmni):
        return EngineTurnResponder(omni)
    if plugin is not None:
        return PluginTurnResponder(omni, plugin)
    return None


# The in-process API of turn responses: the responders, and the engine's value types a
# caller builds requests from and reads results as.
__all__ = [
    "DuplexCapabilities",
    "DuplexModelPlugin",
    "EngineTurnResponder",
    "ModelAudio",
    "ModelResult",
    "ModelText",
    "PluginTurnResponder",
    "TurnFailure",
    "TurnModel",
    "TurnResponder",
    "TurnResponseError",
    "TurnResponseRequest",
    "turn_plugin",
    "turn_responder",
]
