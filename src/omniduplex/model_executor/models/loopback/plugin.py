"""The loopback model served as turn-based duplex sessions.

The engine buffers a turn (``streams_input`` is False) and hands it over when a response
starts; ``plan_response`` turns it into the one stage input of ``LoopbackStageModel`` and
the data plane turns each stage output back into a model result.

A response to the empty user turn an idle timeout committed (history ends with a user
message carrying ``silent_ms``) checks in: one tone per word of ``IDLE_CHECK_IN``, so a
test hears the user prompted, deterministically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from omniduplex.engine.duplex.capabilities import DuplexCapabilities
from omniduplex.engine.duplex.plugin import (
    DuplexDataPlane,
    DuplexModelPlugin,
    DuplexModelSessionState,
    DuplexRuntimeConfigError,
    ModelAudio,
    ModelError,
    ModelListen,
    ModelResult,
    ModelText,
    ResponseRequest,
)

from .options import LoopbackOptions

# What loopback says to a user who went quiet (``idle_timeout_ms``), as tones.
IDLE_CHECK_IN = "are you still there"

_MODALITIES = frozenset({"audio", "text"})


@dataclass(slots=True)
class LoopbackSessionState(DuplexModelSessionState):
    """Per-session state: loopback keeps nothing between turns (each response reads the
    session's modalities in force from its request)."""

    responses_planned: int = 0


class LoopbackDataPlane(DuplexDataPlane):
    """Maps ``LoopbackStageModel`` output dicts to model results."""

    def project(self, data: Mapping[str, Any]) -> Sequence[ModelResult]:
        kind = data.get("kind")
        end_of_turn = bool(data.get("end_of_turn", False))
        if kind == "audio":
            samples = np.asarray(data["audio"], dtype=np.float32)
            return [
                ModelAudio(samples=samples, text=str(data.get("text", "")), end_of_turn=end_of_turn)
            ]
        if kind == "text":
            return [ModelText(delta=str(data.get("text", "")), end_of_turn=end_of_turn)]
        if kind == "listen":
            return [ModelListen(reason=str(data.get("reason", "model_listen")))]
        if kind == "error":
            return [
                ModelError(
                    code=str(data.get("code", "loopback_error")),
                    message=str(data.get("message", "loopback model failed")),
                )
            ]
        return [ModelError(code="loopback_unknown_output", message=f"unknown output kind {kind!r}")]


class LoopbackDuplexPlugin(DuplexModelPlugin):
    """Deterministic CPU reference model; options: ``unit_ms``, ``realtime``,
    ``max_reply_ms``, ``silence_rms`` (and ``pitch_ratio``), as in ``LoopbackOptions``."""

    plugin_id = "loopback"
    streams_input = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.loopback_options = LoopbackOptions.from_mapping(self.options)
        self.input_sample_rate_hz = self.loopback_options.input_rate_hz
        self.output_sample_rate_hz = self.loopback_options.output_rate_hz
        self._data_plane = LoopbackDataPlane()

    @property
    def data_plane(self) -> DuplexDataPlane:
        return self._data_plane

    def default_session(self) -> dict[str, Any]:
        if self.loopback_options.server_vad_by_default:
            return {"turn_detection": {"type": "server_vad"}}
        return {}

    def capabilities(self, *, max_sessions: int) -> DuplexCapabilities:
        return DuplexCapabilities(
            supports_model_native_turn_policy=False,
            supports_barge_in=True,
            supports_session_resume=True,
            supports_audio_truncate=True,
            supports_text_input=True,
            supports_text_only_turn=True,
            supports_chat_completions=True,
            optional_input_modalities=frozenset({"text"}),
            # Loopback never opens a response by itself: turns come from the client or VAD.
            signal_sources=("client_event", "server_policy"),
            chunk_period_ms=self.loopback_options.unit_ms,
        )

    def validate_session_config(self, config: Mapping[str, Any]) -> None:
        modalities = config.get("modalities")
        if modalities is None:
            return
        unknown = sorted(set(modalities) - _MODALITIES)
        if unknown or not modalities:
            raise DuplexRuntimeConfigError(
                f"loopback supports modalities {sorted(_MODALITIES)}, got {list(modalities)}",
                param="modalities",
            )

    def create_session_state(self, config: Mapping[str, Any]) -> LoopbackSessionState:
        return LoopbackSessionState()

    def plan_response(
        self, state: DuplexModelSessionState, request: ResponseRequest
    ) -> dict[str, Any]:
        if not isinstance(state, LoopbackSessionState):
            raise TypeError("loopback plan_response needs a LoopbackSessionState")
        state.responses_planned += 1
        # Per-response modalities (response.create, either dialect's key) win over the
        # session's.
        modalities = (
            request.options.get("output_modalities")
            or request.options.get("modalities")
            or request.session.get("modalities")
            or ("text", "audio")
        )
        text = request.input_text or None
        history = request.history
        went_quiet = bool(history) and history[-1].get("silent_ms") is not None
        if text is None and not len(request.input_audio) and went_quiet:
            text = IDLE_CHECK_IN
        return {
            "audio": np.asarray(request.input_audio, dtype=np.float32),
            "text": text,
            "response_id": request.response_id,
            "with_audio": "audio" in modalities,
        }
