"""MiniCPM-o 4.5 served as model-native duplex sessions.

The engine streams every 1 s of 16 kHz input to ``plan_input_unit`` (``streams_input``);
each unit updates the session's stage-0 request, whose first unit of an epoch also
carries the session's instructions, voice and sampling. The stage answers each unit the
model spoke in (listen units say nothing); the data plane maps them:

* a speak unit opening a turn -> ``ModelSpeak`` + ``ModelAudio``: ``response.speak`` and
  the response's first second of 24 kHz audio with its text;
* a speak unit inside the turn -> ``ModelAudio``: audio and transcript deltas;
* the turn's end (upstream's ``end_of_turn``, or a listen unit) -> ``ModelListen``:
  ``response.listen``, then the response completes.

Barge-in and ``response.cancel`` advance the epoch; the stage then sets the model's
break event (see ``stage.py``) and the engine drops anything of the old epoch.

Images (``input_image`` parts of a user item, or an append's ``video_frames``) are
decoded when they arrive (a bad one is refused then, ``invalid_image`` /
``invalid_video_frames``) and ride the next input unit: the stage hands them to
upstream's ``streaming_prefill`` as that unit's ``frame_list``, which feeds them before
the unit's audio.
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
    InputImage,
    InputImageError,
    ModelAudio,
    ModelError,
    ModelListen,
    ModelResult,
    ModelSpeak,
    ModelText,
    ResponseRequest,
    StreamedSessionState,
)

from .images import decode_image
from .options import INPUT_RATE_HZ, OUTPUT_RATE_HZ, UNIT_MS, UNIT_SAMPLES, MiniCPMO45Options
from .voice import VoiceError, decode_ref_audio_url, resolve_voice, wav_to_ref_audio

LISTEN_REASON = "model_listen"
INPUT_AUDIO_FORMATS = ("pcm_f32le", "pcm16")
_MODALITIES = frozenset({"audio", "text"})


@dataclass(slots=True)
class MiniCPMO45SessionState(StreamedSessionState):
    """What a session sends with the first unit of each epoch's stage-0 request."""


class MiniCPMO45DataPlane(DuplexDataPlane):
    def project(self, data: Mapping[str, Any]) -> Sequence[ModelResult]:
        kind = data.get("kind")
        if kind == "superseded":
            return []
        if kind != "unit":
            return [ModelError(code="minicpmo_unknown_output", message=f"output {kind!r}")]
        results: list[ModelResult] = []
        if data.get("opens"):
            results.append(ModelSpeak(reason="model_speak"))
        text = str(data.get("text") or "")
        audio = data.get("audio")
        if audio is not None:
            results.append(ModelAudio(samples=np.asarray(audio, dtype=np.float32), text=text))
        elif text:
            results.append(ModelText(delta=text))
        if data.get("closes"):
            results.append(ModelListen(reason=LISTEN_REASON))
        return results


class MiniCPMO45DuplexPlugin(DuplexModelPlugin):
    """Options: stage 0's model kwargs (``MiniCPMO45Options``)."""

    plugin_id = "minicpmo_4_5"
    streams_input = True
    input_sample_rate_hz = INPUT_RATE_HZ
    output_sample_rate_hz = OUTPUT_RATE_HZ

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.minicpmo_options = MiniCPMO45Options.from_mapping(self.options)
        self._data_plane = MiniCPMO45DataPlane()

    @property
    def data_plane(self) -> DuplexDataPlane:
        return self._data_plane

    def capabilities(self, *, max_sessions: int) -> DuplexCapabilities:
        return DuplexCapabilities(
            supports_model_native_turn_policy=True,
            supports_external_turn_signal=False,
            supports_client_commit=False,
            supports_barge_in=True,
            supports_core_resumable_request=True,
            supports_multi_session=max_sessions > 1,
            supports_session_resume=False,
            supports_audio_truncate=False,
            supports_image_input=True,
            supports_text_input=False,
            supports_text_only_turn=False,
            supports_chat_completions=False,
            required_input_modalities=frozenset({"audio"}),
            optional_input_modalities=frozenset({"video"}),
            signal_sources=("model_native", "client_event"),
            chunk_period_ms=UNIT_MS,
            extra={
                "input_audio_formats": list(INPUT_AUDIO_FORMATS),
                "input_sample_rate_hz": INPUT_RATE_HZ,
                "output_sample_rate_hz": OUTPUT_RATE_HZ,
                "conversation_slots": self.minicpmo_options.slots,
            },
        )

    def validate_session_config(self, config: Mapping[str, Any]) -> None:
        modalities = config.get("modalities")
        if modalities is not None and (not modalities or set(modalities) - _MODALITIES):
            raise DuplexRuntimeConfigError(
                f"minicpmo supports modalities {sorted(_MODALITIES)}, got {list(modalities)}",
                param="modalities",
            )
        try:
            resolve_voice(self.minicpmo_options, config.get("voice"))
            if config.get("ref_audio"):
                wav_to_ref_audio(decode_ref_audio_url(str(config["ref_audio"])))
        except VoiceError as exc:
            param = "ref_audio" if config.get("ref_audio") else "voice"
            raise DuplexRuntimeConfigError(str(exc), code=exc.code, param=param) from None
        temperature = config.get("temperature")
        if temperature is not None and not 0.0 < float(temperature) <= 2.0:
            raise DuplexRuntimeConfigError("temperature must be within (0, 2]", param="temperature")
        extra = config.get("extra_body") or {}
        _check_int(extra, "top_k", minimum=1)
        _check_int(extra, "force_listen_count", minimum=0)
        top_p = _check_number(extra, "top_p")
        if top_p is not None and not 0.0 < top_p <= 1.0:
            raise DuplexRuntimeConfigError("top_p must be within (0, 1]", param="top_p")
        scale = _check_number(extra, "listen_prob_scale")
        if scale is not None and scale < 0:
            raise DuplexRuntimeConfigError(
                "listen_prob_scale must be a non-negative number", param="listen_prob_scale"
            )

    def create_session_state(self, config: Mapping[str, Any]) -> MiniCPMO45SessionState:
        extra = config.get("extra_body") or {}
        stage_config: dict[str, Any] = {
            "instructions": config.get("instructions") or "",
            "voice": config.get("voice"),
            "ref_audio": config.get("ref_audio"),
            "temperature": config.get("temperature"),
            "top_k": extra.get("top_k"),
            "top_p": extra.get("top_p"),
            "listen_prob_scale": extra.get("listen_prob_scale"),
            "force_listen_count": extra.get("force_listen_count"),
        }
        return MiniCPMO45SessionState(config=stage_config)

    def plan_input_unit(
        self, state: DuplexModelSessionState, samples: np.ndarray, *, fence: DuplexFence
    ) -> dict[str, Any] | None:
        if not isinstance(state, MiniCPMO45SessionState):
            raise TypeError("minicpmo plan_input_unit needs a MiniCPMO45SessionState")
        return state.plan_unit(samples, unit_samples=UNIT_SAMPLES, fence=fence, model="minicpmo")

    def take_input_images(
        self, state: DuplexModelSessionState, images: Sequence[InputImage]
    ) -> None:
        if not isinstance(state, MiniCPMO45SessionState):
            raise TypeError("minicpmo take_input_images needs a MiniCPMO45SessionState")
        for index, image in enumerate(images):
            try:
                decode_image(image)  # the stage decodes again for upstream; this one checks
            except InputImageError as exc:
                raise InputImageError(str(exc), index=index) from None
        state.pending_images.extend(images)

    def plan_response(
        self, state: DuplexModelSessionState, request: ResponseRequest
    ) -> dict[str, Any]:
        raise NotImplementedError("minicpmo responses come from its stream, not from turns")


def _check_int(extra: Mapping[str, Any], key: str, *, minimum: int) -> None:
    value = extra.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DuplexRuntimeConfigError(f"{key} must be an integer >= {minimum}", param=key)


def _check_number(extra: Mapping[str, Any], key: str) -> float | None:
    value = extra.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DuplexRuntimeConfigError(f"{key} must be a number", param=key)
    return float(value)
