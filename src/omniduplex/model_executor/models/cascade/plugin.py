"""The cascade served as turn-based duplex sessions.

The engine buffers a turn (``streams_input`` is False): server VAD (Silero, through
``create_speech_classifier``) or the client commits it, and ``plan_response`` hands its
16 kHz audio, any typed text and the conversation to stage 0 (ASR). The final stage's
outputs come back through the data plane: the user's transcript first, then reply audio
units with their words, or a listen / error.

Under ``semantic_vad`` the plugin's turn-completion model (Smart Turn v3.2, ``turn_model``)
decides whether a paused user has finished; it is loaded once, when the plugin is built,
and shared by every session.

With ``asr_partials`` (the default) the plugin ``transcribes_while_speaking``: under
server VAD each utterance's audio reaches the ASR stage as it is spoken, hypotheses come
back as partial transcripts, and at commit only the utterance's tail is left to decode.

With ``draft_replies`` as well the plugin ``drafts_replies``: the utterance's opening
piece carries the response data a commit would plan now (``draft``); at each pause Whisper
decodes, the ASR stage sends the responder a draft (that data and the pause's text), which
writes the reply and has TTS voice its first sentence, all held back. At commit the
response's own data either matches the draft's (the same text, history, instructions and
settings), and what was held goes out at once, or the draft is dropped and the reply
starts afresh. Nothing of a draft reaches the session before the response's transcript.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
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
    ModelInputTranscript,
    ModelListen,
    ModelResult,
    ModelText,
    ModelToolCall,
    ResponseRequest,
)
from omniduplex.engine.duplex.vad import (
    SpeechClassifier,
    TranscriptCompletionModel,
    TurnCompletionModel,
)
from omniduplex.protocol.duplex import LOGPROBS_INCLUDE, wants_logprobs

from .engines import resolve_engines
from .options import CascadeOptions
from .turn_model import SmartTurnModel, smart_turn_available
from .vad import SileroClassifier
from .words_turn_model import SmolLMWordsModel, words_model_unavailable

log = logging.getLogger(__name__)

_MODALITIES = frozenset({"audio", "text"})


@dataclass(slots=True)
class CascadeSessionState(DuplexModelSessionState):
    """Per session the cascade only counts responses: each one reads the session's
    settings in force from its request, and the stages keep everything else."""

    responses_planned: int = 0


class CascadeDataPlane(DuplexDataPlane):
    """Maps the TTS stage's outputs (and what it passes through) to model results."""

    def project(self, data: Mapping[str, Any]) -> Sequence[ModelResult]:
        kind = data.get("kind")
        if kind == "audio":
            return [
                ModelAudio(
                    samples=np.asarray(data["audio"], dtype=np.float32),
                    text=str(data.get("text", "")),
                    end_of_turn=bool(data.get("end_of_turn", False)),
                )
            ]
        if kind == "text":
            return [
                ModelText(
                    delta=str(data.get("text", "")),
                    end_of_turn=bool(data.get("end_of_turn", False)),
                )
            ]
        if kind == "partial_transcript":
            text = str(data.get("transcript") or "")
            logprobs = _logprobs(data)
            return [ModelInputTranscript(text=text, final=False, logprobs=logprobs)] if text else []
        if kind == "transcript":
            text = str(data.get("transcript") or "")
            if data.get("heard_audio") and text:
                return [ModelInputTranscript(text=text, final=True, logprobs=_logprobs(data))]
            return []
        if kind == "listen":
            return [ModelListen(reason=str(data.get("reason", "model_listen")))]
        if kind == "tool_call":
            return [
                ModelToolCall(
                    call_id=str(data["call_id"]),
                    name=str(data.get("name") or ""),
                    arguments=str(data.get("arguments") or ""),
                    done=bool(data.get("done")),
                )
            ]
        if kind == "error":
            return [
                ModelError(
                    code=str(data.get("code", "cascade_error")),
                    message=str(data.get("message", "the cascade failed")),
                )
            ]
        return [ModelError(code="cascade_unknown_output", message=f"unknown output kind {kind!r}")]


class CascadeDuplexPlugin(DuplexModelPlugin):
    """Silero VAD + ASR + responder + TTS; options: ``CascadeOptions``. The engines that
    run (``engines.py``) are resolved once here, each fallback logged once."""

    plugin_id = "cascade"
    streams_input = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.cascade_options = CascadeOptions.from_mapping(self.options)
        self.input_sample_rate_hz = self.cascade_options.input_rate_hz
        self.output_sample_rate_hz = self.cascade_options.output_rate_hz
        self.transcribes_while_speaking = self.cascade_options.asr_partials
        self.drafts_replies = self.transcribes_while_speaking and self.cascade_options.draft_replies
        self._data_plane = CascadeDataPlane()
        self._turn_model = _load_turn_model(self.cascade_options.turn_model)
        if self._turn_model is not None and self.cascade_options.turn_words_model == "auto":
            self._turn_model.words_model = _load_words_model()
        engines = resolve_engines(self.cascade_options)
        if self.cascade_options.session_turn_detection == "semantic_vad" and not self._turn_model:
            note = (
                "sessions start with server_vad, not semantic_vad: no turn-completion model"
                " (Smart Turn needs the semantic-vad extra, or turn_model is none)"
            )
            engines = replace(engines, fallbacks=(*engines.fallbacks, note))
        self.engines = engines
        # pocketsphinx has each word's posterior; the Whisper decode here scores only
        # whole sequences.
        self.reports_logprobs = engines.asr == "pocketsphinx"
        for note in self.engines.fallbacks:
            log.warning("cascade: %s", note)

    @property
    def data_plane(self) -> DuplexDataPlane:
        return self._data_plane

    @property
    def uses_llm(self) -> bool:
        return self.engines.responder in ("local", "openai")

    def capabilities(self, *, max_sessions: int) -> DuplexCapabilities:
        llm = self.uses_llm
        return DuplexCapabilities(
            supports_model_native_turn_policy=False,
            supports_barge_in=True,
            supports_session_resume=True,
            supports_audio_truncate=True,
            supports_text_input=True,
            supports_text_only_turn=True,
            supports_chat_completions=True,
            supports_input_transcription=True,
            # The rule responder has no prompt, sampling or length to steer.
            supports_response_instructions=llm,
            supports_response_temperature=llm,
            supports_response_max_output_tokens=llm,
            supports_response_voice=True,
            supports_semantic_vad=self._turn_model is not None,
            # The rule responder calls tools by its documented rule, the openai one through
            # the chat endpoint's function calling, the local one under grammars.
            supports_tools=True,
            optional_input_modalities=frozenset({"text"}),
            signal_sources=("client_event", "server_policy"),
            chunk_period_ms=self.cascade_options.unit_ms,
            extra={
                "asr": self.engines.asr,
                "responder": self.engines.responder,
                "tts": self.engines.tts,
                "fallbacks": list(self.engines.fallbacks),
                "turn_model": self._turn_model.name if self._turn_model else None,
            },
        )

    def validate_session_config(self, config: Mapping[str, Any]) -> None:
        if wants_logprobs(config.get("include")) and not self.reports_logprobs:
            raise DuplexRuntimeConfigError(
                f"{LOGPROBS_INCLUDE} is not available: the {self.engines.asr} recogniser "
                "of this deployment gives no per-word log probabilities",
                param="include",
            )
        modalities = config.get("modalities")
        if modalities is None:
            return
        unknown = sorted(set(modalities) - _MODALITIES)
        if unknown or not modalities:
            raise DuplexRuntimeConfigError(
                f"cascade supports modalities {sorted(_MODALITIES)}, got {list(modalities)}",
                param="modalities",
            )

    def create_session_state(self, config: Mapping[str, Any]) -> CascadeSessionState:
        return CascadeSessionState()

    def create_speech_classifier(self) -> SpeechClassifier | None:
        return SileroClassifier()

    def turn_completion_model(self) -> TurnCompletionModel | None:
        return self._turn_model

    def default_session(self) -> dict[str, Any]:
        # A stock Realtime client expects the server to find turns (OpenAI's default is
        # server_vad; the embedded assistant's deployment asks for semantic_vad).
        options = self.cascade_options
        detection: dict[str, Any] = {"type": "server_vad"}
        if options.session_turn_detection == "semantic_vad" and self._turn_model is not None:
            detection = {"type": "semantic_vad", "eagerness": options.session_eagerness}
        return {
            "turn_detection": detection,
            "backchannel_policy": options.session_backchannel_policy,
        }

    def plan_utterance_audio(
        self,
        state: DuplexModelSessionState,
        samples: np.ndarray,
        *,
        opening: bool,
        preview: ResponseRequest | None = None,
        logprobs: bool = False,
    ) -> dict[str, Any]:
        data: dict[str, Any] = {"audio": np.asarray(samples, dtype=np.float32)}
        if opening:
            data["live"] = True
            if logprobs:
                data["logprobs"] = True
            if preview is not None and self.drafts_replies:
                data["draft"] = _response_data(preview)
        return data

    def plan_utterance_end(self, state: DuplexModelSessionState) -> dict[str, Any]:
        return {"transcribe_only": True}

    def plan_response(
        self, state: DuplexModelSessionState, request: ResponseRequest
    ) -> dict[str, Any]:
        if not isinstance(state, CascadeSessionState):
            raise TypeError("cascade plan_response needs a CascadeSessionState")
        state.responses_planned += 1
        return _response_data(request)


def _response_data(request: ResponseRequest) -> dict[str, Any]:
    """What the stages need of a response: its input, conversation and settings."""
    options = request.options
    session = request.session
    modalities = (
        options.get("output_modalities")
        or options.get("modalities")
        or session.get("modalities")
        or ("audio",)
    )
    return {
        "audio": np.asarray(request.input_audio, dtype=np.float32),
        "text": request.input_text or "",
        "history": [dict(message) for message in request.history],
        "response_id": request.response_id,
        "opening": request.opening,
        "with_audio": "audio" in modalities,
        "instructions": options.get("instructions") or session.get("instructions"),
        "temperature": _first(options.get("temperature"), session.get("temperature")),
        "max_output_tokens": _first(
            options.get("max_output_tokens"),
            options.get("max_response_output_tokens"),
            session.get("max_output_tokens"),
        ),
        "voice": options.get("voice") or session.get("voice"),
        "tools": [dict(tool) for tool in request.tools],
        "tool_choice": request.tool_choice,
    }


def _logprobs(data: Mapping[str, Any]) -> tuple[dict[str, Any], ...] | None:
    raw = data.get("logprobs")
    return tuple(dict(entry) for entry in raw) if isinstance(raw, list) else None


def _load_turn_model(choice: str) -> TurnCompletionModel | None:
    """The ``turn_model`` option's model; ``auto`` without the weights gives ``None``."""
    if choice == "none" or (choice == "auto" and not smart_turn_available()):
        return None
    return SmartTurnModel()


def _load_words_model() -> TranscriptCompletionModel | None:
    """SmolLM2's end-of-turn score for semantic_vad, or ``None`` (said once, here)."""
    why = words_model_unavailable()
    if why is not None:
        log.warning("cascade: semantic_vad judges turns by Smart Turn and grammar only: %s", why)
        return None
    return SmolLMWordsModel()


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None and value != "inf":
            return value
    return None
