"""Settings shared by the MiniCPM-o 4.5 stage model and its duplex plugin.

Both read the same mapping (stage 0's ``model.kwargs`` in the deploy YAML), so the
plugin's capabilities and the stage's sessions agree without a second source of truth.
The numbers are upstream's ``as_duplex`` defaults (``MiniCPMODuplex._default_duplex_params``
in the checkpoint's remote code), except ``top_k``: 20 as OpenBMB's demo runs it.
Nothing here imports torch: the plugin runs in the engine process, which may not have it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

INPUT_RATE_HZ = 16_000  # upstream's ``sample_rate``: 16 kHz mono float32 in
OUTPUT_RATE_HZ = 24_000  # token2wav: 24 kHz speech out
UNIT_MS = 1_000  # ``chunk_ms``: one prefill + generate per second of input
FIRST_UNIT_MS = 1_035  # ``first_chunk_ms``: the first unit carries 35 ms more (CNN lookback)
UNIT_SAMPLES = INPUT_RATE_HZ * UNIT_MS // 1000  # 16000
FIRST_UNIT_SAMPLES = INPUT_RATE_HZ * FIRST_UNIT_MS // 1000  # 16560
REF_AUDIO_QUANTUM = 1_600  # 100 ms: one audio embedding; ref audio is trimmed to a multiple

DEFAULT_INSTRUCTIONS = "Streaming Omni Conversation."
DEFAULT_UPSTREAM_FACTORY = (
    "omniduplex.model_executor.models.minicpmo_4_5.upstream:TransformersDuplexFactory"
)


@dataclass(frozen=True, slots=True)
class SamplingDefaults:
    """``streaming_generate``'s sampling; a session overrides them."""

    temperature: float = 0.7
    # Upstream's code default is 100 (as_duplex and streaming_generate); OpenBMB's demo
    # runs its duplex sessions with 20.
    top_k: int = 20
    top_p: float = 0.8
    listen_prob_scale: float = 1.0
    # Upstream takes this one at construction (``as_duplex(force_listen_count=...)``): the
    # first N units of a conversation are forced to listen. The official demo uses 3.
    force_listen_count: int = 0


@dataclass(frozen=True, slots=True)
class MiniCPMO45Options:
    """One deployment of MiniCPM-o 4.5.

    ``model_dir``: the local checkpoint folder (``openbmb/MiniCPM-o-4_5`` downloaded with
    its remote code). ``slots``: conversations the stage holds at once; upstream keeps
    part of a conversation's streaming state on the loaded model (the streaming audio
    processor, the token2wav caches), so each slot loads its own copy of the weights
    (about 19 GB in bf16) and serves one conversation at a time. ``upstream_factory``
    builds them (``package.module:Callable`` taking these options); tests point it at a
    test double of the upstream surface.
    """

    model_dir: str | None = None
    upstream_factory: str = DEFAULT_UPSTREAM_FACTORY
    upstream_factory_kwargs: dict[str, Any] = field(default_factory=dict)
    device: str = "cuda"
    dtype: str = "bfloat16"
    attn_implementation: str = "sdpa"
    slots: int = 4
    # Voices: ``voice`` names a .wav in ``voice_dir`` (its 16 kHz audio goes into the
    # context as ``ref_audio`` and the file seeds token2wav as ``prompt_wav_path``).
    voice_dir: str | None = None
    default_voice: str | None = None
    default_instructions: str = DEFAULT_INSTRUCTIONS
    # Upstream constructor settings (``as_duplex(**...)``), its defaults.
    generate_audio: bool = True
    max_new_speak_tokens_per_chunk: int = 20
    text_repetition_penalty: float = 1.05
    text_repetition_window_size: int = 512
    tts_temperature: float = 0.8
    tts_repetition_penalty: float = 1.05
    sliding_window_mode: str = "off"
    basic_window_high_tokens: int = 8000
    basic_window_low_tokens: int = 6000
    context_previous_max_tokens: int = 500
    context_max_units: int = 24
    enable_float16: bool = False
    n_timesteps: int = 10
    sampling: SamplingDefaults = field(default_factory=SamplingDefaults)
    # Input units a session may queue ahead of the model (30 s); older ones are dropped.
    max_queued_units: int = 30

    def __post_init__(self) -> None:
        for name in (
            "slots",
            "max_new_speak_tokens_per_chunk",
            "text_repetition_window_size",
            "basic_window_high_tokens",
            "basic_window_low_tokens",
            "context_previous_max_tokens",
            "context_max_units",
            "n_timesteps",
            "max_queued_units",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"minicpmo option {name} must be a positive integer")
        if self.sliding_window_mode not in ("off", "basic", "context"):
            raise ValueError("minicpmo option sliding_window_mode must be off, basic or context")
        if self.basic_window_low_tokens >= self.basic_window_high_tokens:
            raise ValueError("minicpmo option basic_window_low_tokens must be below the high mark")
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError("minicpmo option dtype must be bfloat16, float16 or float32")
        if not isinstance(self.upstream_factory_kwargs, dict):
            raise ValueError("minicpmo option upstream_factory_kwargs must be a mapping")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> MiniCPMO45Options:
        """Build from a YAML/options mapping; unknown keys are refused (typos surface)."""
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown minicpmo option(s): {', '.join(unknown)}")
        sampling = raw.pop("sampling", None)
        if isinstance(sampling, Mapping):
            names = {f.name for f in fields(SamplingDefaults)}
            extra = sorted(set(sampling) - names)
            if extra:
                raise ValueError(f"unknown minicpmo sampling option(s): {', '.join(extra)}")
            raw["sampling"] = SamplingDefaults(**sampling)
        elif sampling is not None:
            raise ValueError("minicpmo option sampling must be a mapping")
        return cls(**raw)

    def upstream_kwargs(self) -> dict[str, Any]:
        """The constructor settings every conversation's ``MiniCPMODuplex`` gets."""
        return {
            "generate_audio": self.generate_audio,
            "ls_mode": "explicit",
            "chunk_ms": UNIT_MS,
            "first_chunk_ms": FIRST_UNIT_MS,
            "sample_rate": INPUT_RATE_HZ,
            "max_new_speak_tokens_per_chunk": self.max_new_speak_tokens_per_chunk,
            "text_repetition_penalty": self.text_repetition_penalty,
            "text_repetition_window_size": self.text_repetition_window_size,
            "tts_temperature": self.tts_temperature,
            "tts_repetition_penalty": self.tts_repetition_penalty,
            "sliding_window_mode": self.sliding_window_mode,
            "basic_window_high_tokens": self.basic_window_high_tokens,
            "basic_window_low_tokens": self.basic_window_low_tokens,
            "context_previous_max_tokens": self.context_previous_max_tokens,
            "context_max_units": self.context_max_units,
            "enable_float16": self.enable_float16,
            "n_timesteps": self.n_timesteps,
        }
