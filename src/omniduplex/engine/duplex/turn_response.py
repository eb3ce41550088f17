"""Turn responses: one response of the duplex model outside any session.

``POST /v1/chat/completions`` on a duplex deployment is one of these (DESIGN decision 14).
The caller sends ``StartTurnResponse``; on the orchestrator loop the engine plans the
response with the plugin (``validate_session_config``, ``create_session_state``,
``plan_response``), runs it through the stages as a request the orchestrator owns, and
projects every stage output with the plugin's data plane. What reaches the caller's loop
is one ``TurnResponseOutput`` per stage output that yielded model results, and one
finished output at the end (or its failure). A turn response holds no session slot, and
its model state lives only as long as its planning.

The response ends at the first ``ModelListen`` or ``end_of_turn`` result, at the first
``ModelError`` (its failure), or when the stages are done with it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from ..errors import EngineError
from ..outputs import RequestOutput
from .contracts import DuplexFence
from .plugin import (
    DuplexModelPlugin,
    DuplexRuntimeConfigError,
    ModelError,
    ModelListen,
    ModelResult,
    ResponseRequest,
)

log = logging.getLogger(__name__)


class TurnFailure(StrEnum):
    """Why a turn response did not complete."""

    # The request asks for something the model refuses (a client error).
    REFUSED = "refused"
    # The model or a stage failed it.
    MODEL_FAILED = "model_failed"
    # The engine can serve nothing (dead, or shut down).
    UNAVAILABLE = "unavailable"
    # The engine has as many requests in flight as it admits; a retry may succeed.
    BUSY = "busy"


class TurnResponseError(EngineError):
    """A turn response that did not complete; ``code`` / ``param`` name the cause."""

    def __init__(
        self, kind: TurnFailure, code: str, message: str, *, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class TurnResponseRequest:
    """One turn for the model: the user's input, what came before, and the settings.

    ``input_audio`` is float32 mono at the plugin's input rate (empty for a text turn).
    ``session`` is the model configuration the response runs under (what
    ``validate_session_config`` / ``create_session_state`` read: ``model``,
    ``modalities``, ``instructions``, ``voice`` ...); ``options`` are the response's own
    options, as ``ResponseRequest.options``.
    """

    request_id: str
    input_audio: np.ndarray
    input_text: str = ""
    history: Sequence[Mapping[str, Any]] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    session: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StartTurnResponse:
    """Client message: plan and run one turn response (one-way; outputs follow)."""

    request: TurnResponseRequest


@dataclass(frozen=True, slots=True)
class TurnResponseOutput(RequestOutput):
    """One stage output of a turn response projected into model results, or its end.

    ``data`` is the stage's raw output; ``results`` what the data plane made of it.
    ``finished``: the response is over. ``failure`` (with ``error`` its message) says why
    it did not complete; the results before the failure are still valid.
    """

    results: tuple[ModelResult, ...] = ()
    failure: TurnResponseError | None = None

    @classmethod
    def failed(
        cls, request_id: str, failure: TurnResponseError, **fields: Any
    ) -> TurnResponseOutput:
        return cls(
            request_id=request_id,
            data={},
            finished=True,
            error=failure.message,
            failure=failure,
            **fields,
        )


@dataclass(frozen=True, slots=True)
class TurnProjection:
    """What one stage output contributes to a turn response."""

    results: tuple[ModelResult, ...]
    ended: bool = False
    failure: TurnResponseError | None = None


class TurnResponsePlanner:
    """The plugin's side of a turn response: planning it and reading its stage outputs.

    Plain functions of the plugin, run wherever the engine drives the request (the
    duplex orchestrator's loop, or beside ``AsyncOmni`` on a turn deployment).
    """

    def __init__(self, plugin: DuplexModelPlugin) -> None:
        self.plugin = plugin

    def plan(self, request: TurnResponseRequest) -> dict[str, Any]:
        """Stage-0 data that starts the response; raises ``TurnResponseError``."""
        plugin = self.plugin
        config = dict(request.session)
        try:
            plugin.validate_session_config(config)
            state = plugin.create_session_state(config)
            response = ResponseRequest(
                fence=DuplexFence(session_id=request.request_id),
                response_id=f"resp_{uuid.uuid4().hex[:24]}",
                input_audio=request.input_audio,
                input_text=request.input_text,
                history=list(request.history),
                options=dict(request.options),
                session=config,
            )
            return plugin.plan_response(state, response)
        except DuplexRuntimeConfigError as exc:
            raise TurnResponseError(
                TurnFailure.REFUSED, exc.code, str(exc), param=exc.param
            ) from exc
        except Exception as exc:
            log.exception("turn response %s: planning failed", request.request_id)
            raise TurnResponseError(
                TurnFailure.MODEL_FAILED,
                "model_backend_failed",
                f"could not start the response: {exc}",
            ) from exc

    def project(self, data: Mapping[str, Any]) -> TurnProjection:
        """The model results of one stage output, up to the response's end."""
        results: list[ModelResult] = []
        try:
            projected = self.plugin.data_plane.project(data)
        except Exception as exc:
            log.exception("turn response: projecting a stage output failed")
            failure = TurnResponseError(TurnFailure.MODEL_FAILED, "model_backend_failed", str(exc))
            return TurnProjection((), ended=True, failure=failure)
        for result in projected:
            if isinstance(result, ModelError):
                failure = TurnResponseError(TurnFailure.MODEL_FAILED, result.code, result.message)
                return TurnProjection(tuple(results), ended=True, failure=failure)
            results.append(result)
            if isinstance(result, ModelListen) or getattr(result, "end_of_turn", False):
                return TurnProjection(tuple(results), ended=True)
        return TurnProjection(tuple(results))


def stage_failure(error: str) -> TurnResponseError:
    """The failure of a turn response whose stage request failed with ``error``."""
    return TurnResponseError(TurnFailure.MODEL_FAILED, "model_backend_failed", error)


__all__ = [
    "StartTurnResponse",
    "TurnFailure",
    "TurnProjection",
    "TurnResponseError",
    "TurnResponseOutput",
    "TurnResponsePlanner",
    "TurnResponseRequest",
    "stage_failure",
]
