"""PersonaPlex (Moshi architecture) served as model-native duplex sessions.

The engine streams every 80 ms of 24 kHz input to ``plan_input_unit`` (``streams_input``);
each unit updates the session's stage-0 request, whose first unit of an epoch also carries
the session's persona, voice and sampling. The stage answers with one frame per tick
while the model speaks; the data plane maps its turn state onto model results:

* ``speak``    -> ``ModelSpeak`` + ``ModelAudio``: opens a response (``response.speak``);
* ``speaking`` -> ``ModelAudio``: 80 ms of 24 kHz audio + the text stream's piece;
* ``listen``   -> ``ModelAudio`` + ``ModelListen``: the stretch of speech ended
  (``listen_hangover_frames`` of text padding): ``response.listen``, then the response
  completes.

The model cannot rewind, so there is no barge-in (its overlap is native) and no resume.
Persona, voice and sampling are fixed when the session's first unit reaches the model:
a ``session.update`` before any audio applies them, a later one does not change the
conversation. ``response.cancel`` drops the rest of the current stretch of speech; the
conversation (and its slot) goes on and the model's next stretch opens a new response.
Use ``turn_detection: null`` (the client preset does): the model takes its own turns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from omniduplex.engine.duplex.capabilities import DuplexCapabilities
from omniduplex.engine.duplex.contracts import DuplexFence
from omniduplex.engine.duplex.plugin import (
    DuplexDataPlane,
    DuplexModelPlugin,
    DuplexModelSessionState,
    DuplexRuntimeConfigError,
    ModelAudio,
    ModelError,
    ModelListen,
    ModelResult,
    ModelSpeak,
    ResponseRequest,
    StreamedSessionState,
)

from .options import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE_HZ, PersonaPlexOptions
from .prompts import VoicePromptError, resolve_voice

LISTEN_REASON = "model_listen"
INPUT_AUDIO_FORMATS = ("pcm_f32le", "pcm16")
_MODALITIES = frozenset({"audio", "text"})


@dataclass(slots=True)
class PersonaPlexSessionState(StreamedSessionState):
    """What a session sends with the first unit of each epoch's stage-0 request."""


class PersonaPlexDataPlane(DuplexDataPlane):
    def project(self, data: Mapping[str, Any]) -> Sequence[ModelResult]:
        kind = data.get("kind")
        if kind == "superseded":
            return []
        if kind != "frame":
            return [ModelError(code="personaplex_unknown_output", message=f"output {kind!r}")]
        phase = data.get("phase")
        audio = ModelAudio(
            samples=np.asarray(data["audio"], dtype=np.float32), text=str(data.get("text", ""))
        )
        if phase == "speak":
            return [ModelSpeak(reason="model_speak"), audio]
        if phase == "listen":
            return [audio, ModelListen(reason=LISTEN_REASON)]
        return [audio]


class PersonaPlexDuplexPlugin(DuplexModelPlugin):
    """Options: stage 0's model kwargs (``PersonaPlexOptions``)."""

    plugin_id = "personaplex"
    streams_input = True
    input_sample_rate_hz = SAMPLE_RATE_HZ
    output_sample_rate_hz = SAMPLE_RATE_HZ

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.pp_options = PersonaPlexOptions.from_mapping(self.options)
        self._data_plane = PersonaPlexDataPlane()

    @property
    def data_plane(self) -> DuplexDataPlane:
        return self._data_plane

    def capabilities(self, *, max_sessions: int) -> DuplexCapabilities:
        return DuplexCapabilities(
            supports_model_native_turn_policy=True,
            supports_external_turn_signal=False,
            supports_client_commit=False,
            supports_barge_in=False,
            supports_core_resumable_request=True,
            supports_session_resume=False,
            supports_audio_truncate=False,
            supports_text_input=False,
            supports_text_only_turn=False,
            supports_chat_completions=False,
            signal_sources=("model_native",),
            chunk_period_ms=FRAME_MS,
            extra={
                "input_audio_formats": list(INPUT_AUDIO_FORMATS),
                "input_sample_rate_hz": SAMPLE_RATE_HZ,
                "output_sample_rate_hz": SAMPLE_RATE_HZ,
                "batch_slots": self.pp_options.slots,
            },
        )

    def validate_session_config(self, config: Mapping[str, Any]) -> None:
        modalities = config.get("modalities")
        if modalities is not None and (not modalities or set(modalities) - _MODALITIES):
            raise DuplexRuntimeConfigError(
                f"personaplex supports modalities {sorted(_MODALITIES)}, got {list(modalities)}",
                param="modalities",
            )
        try:
            resolve_voice(self.pp_options, config.get("voice"))
        except VoicePromptError as exc:
            raise DuplexRuntimeConfigError(str(exc), code=exc.code, param="voice") from None
        temperature = config.get("temperature")
        if temperature is not None and not 0.0 <= float(temperature) <= 2.0:
            raise DuplexRuntimeConfigError("temperature must be within [0, 2]", param="temperature")
        extra = config.get("extra_body") or {}
        for key in ("top_k", "top_k_text", "seed"):
            value = extra.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise DuplexRuntimeConfigError(f"{key} must be an integer", param=key)
        for key in ("top_k", "top_k_text"):
            if extra.get(key) is not None and extra[key] < 1:
                raise DuplexRuntimeConfigError(f"{key} must be positive", param=key)
        value = extra.get("temperature_text")
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < 0
        ):
            raise DuplexRuntimeConfigError(
                "temperature_text must be a non-negative number", param="temperature_text"
            )

    def create_session_state(self, config: Mapping[str, Any]) -> PersonaPlexSessionState:
        extra = config.get("extra_body") or {}
        stage_config: dict[str, Any] = {
            "persona": config.get("instructions") or "",
            "voice": config.get("voice"),
            "temperature": config.get("temperature"),
            "temperature_text": extra.get("temperature_text"),
            "top_k": extra.get("top_k"),
            "top_k_text": extra.get("top_k_text"),
            "seed": extra.get("seed"),
        }
        return PersonaPlexSessionState(config=stage_config)

    def plan_input_unit(
        self, state: DuplexModelSessionState, samples: np.ndarray, *, fence: DuplexFence
    ) -> dict[str, Any] | None:
        if not isinstance(state, PersonaPlexSessionState):
            raise TypeError("personaplex plan_input_unit needs a PersonaPlexSessionState")
        return state.plan_unit(
            samples, unit_samples=FRAME_SAMPLES, fence=fence, model="personaplex"
        )

    def plan_response(
        self, state: DuplexModelSessionState, request: ResponseRequest
    ) -> dict[str, Any]:
        raise NotImplementedError("personaplex responses come from its stream, not from turns")
