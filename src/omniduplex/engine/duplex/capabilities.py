"""What a model plugin declares it can do; the engine and the wire gate features on it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class DuplexCapabilities:
    """A plugin's declared behaviour.

    Clients should branch only on ``implementation_level``, ``supports_barge_in``,
    ``supports_session_resume``, ``supports_audio_truncate``, ``supports_input_append``,
    ``supports_text_only_turn``, the modality lists and ``chunk_period_ms``; the rest
    describes how the engine drives the model.
    """

    supports_model_native_turn_policy: bool = False
    supports_external_turn_signal: bool = True
    supports_client_commit: bool = True
    supports_barge_in: bool = True
    supports_playback_ack: bool = True
    supports_input_append: bool = True
    supports_core_resumable_request: bool = False
    supports_multi_session: bool = True
    supports_session_lease: bool = True
    supports_session_resume: bool = True
    supports_audio_truncate: bool = True
    supports_image_input: bool = False
    supports_text_only_turn: bool = False
    supports_text_input: bool = False
    supports_chat_completions: bool = False
    # The model reports what the user said (``conversation.item.input_audio_transcription``).
    supports_input_transcription: bool = False
    supports_response_instructions: bool = False
    supports_response_temperature: bool = False
    supports_response_max_output_tokens: bool = False
    supports_response_voice: bool = False
    # ``semantic_vad`` is served by a turn-completion model (else mapped onto server VAD).
    supports_semantic_vad: bool = False
    # The model calls the session's ``tools`` (function calling); without it they are
    # accepted and echoed, and ``capabilities.supports_tools: false`` says none is called.
    supports_tools: bool = False
    required_input_modalities: frozenset[str] = frozenset({"audio"})
    optional_input_modalities: frozenset[str] = frozenset()
    session_admission_mode: str = "engine_managed"
    signal_sources: tuple[str, ...] = ("client_event", "server_policy", "model_native")
    chunk_period_ms: int = 100
    target_barge_in_latency_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def implementation_level(self) -> str:
        if self.supports_model_native_turn_policy:
            return "model_native_duplex"
        return "turn_based_duplex"

    def accepts_input_modality(self, modality: str) -> bool:
        return (
            modality in self.required_input_modalities or modality in self.optional_input_modalities
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"implementation_level": self.implementation_level}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                out.update(value)
            elif isinstance(value, frozenset):
                out[f.name] = sorted(value)
            elif isinstance(value, tuple):
                out[f.name] = list(value)
            else:
                out[f.name] = value
        out["input_modes"] = ["append_audio_chunk"]
        return out
