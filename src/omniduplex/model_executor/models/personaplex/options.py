"""Settings shared by the PersonaPlex stage model and its duplex plugin.

Both read the same mapping (stage 0's ``model.kwargs`` in the deploy YAML), so the
plugin's capabilities and the stage's slot table agree without a second source of truth.
Nothing here imports torch: the plugin runs in the engine process, which may not have it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

SAMPLE_RATE_HZ = 24_000
FRAME_MS = 80
FRAME_SAMPLES = SAMPLE_RATE_HZ * FRAME_MS // 1000  # 1920: one Mimi frame

# PersonaPlex prompt-phase constants (NVIDIA/personaplex ``lm.py``): the user stream hears
# a constant "sine" while prompts are forced, the agent stream says "silence".
SINE_TOKENS = (430, 1268, 381, 1611, 1095, 1495, 56, 472)
SILENCE_TOKENS = (948, 243, 1178, 546, 1736, 1030, 1978, 2008)

MODEL_KINDS = ("tiny", "pretrained")
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True, slots=True)
class PersonaPlexOptions:
    """One deployment of the PersonaPlex (Moshi) architecture.

    ``model``: ``tiny`` builds a randomly initialised LM + Mimi in process from the
    ``moshi`` constructors (CPU tests and benchmarks; ``seed`` fixes the weights);
    ``pretrained`` loads ``model_dir`` (a local folder) or ``hf_repo`` (the HF cache).
    ``slots``: the fixed batch table; every live session owns one slot and every 80 ms
    tick steps the whole table in one forward pass. ``realtime: false`` ticks as soon as
    every live session has a frame queued, never drops input (tests, benchmarks).

    ``realtime: true`` keeps real time (``pacing.py``): the table steps as soon as every
    live session's frame is there; when one is missing it waits at most
    ``tick_grace_ms`` past the 80 ms period, then steps with silence for that session;
    the frame, when it comes, is dropped (its step has been taken), so every session's
    steps keep real time and its output never runs ahead of it.
    Catch-up: a session holding more than ``max_backlog_frames`` queued frames (after an
    overrun step or a burst) makes the table step again at once, advancing only the
    sessions holding two or more, until none holds more than one. A session never
    queues more than ``max_input_lag_ms`` of audio (5 frames at 400 ms): a real-time
    client's k-th newest frame is k x 80 ms old, so the oldest beyond the bound are
    dropped as new ones arrive, and a stall or a burst costs a session at most that
    much latency. Audio that arrives while a session's prompt (voice + persona) is
    being fed is dropped: its first live frame is the first to arrive after the prompt,
    stepped at the next tick. Every drop is counted (``PersonaPlexStats``).
    """

    model: str = "tiny"
    hf_repo: str = "nvidia/personaplex-7b-v1"
    model_dir: str | None = None
    moshi_weights: str = "model.safetensors"
    mimi_weights: str = "tokenizer-e351c8d8-checkpoint125.safetensors"
    tokenizer: str = "tokenizer_spm_32k_3.model"
    device: str = "cpu"
    dtype: str = "float32"
    slots: int = 8
    realtime: bool = True
    seed: int = 0
    torch_threads: int | None = None
    # Tiny model shape (``model: tiny`` only).
    tiny_text_card: int = 8
    tiny_card: int = 64
    # Prompts.
    voice_prompt_dir: str | None = None
    default_voice: str | None = None
    default_persona: str = ""
    prompt_silence_frames: int = 6
    max_persona_tokens: int = 256
    # Sampling defaults (a session overrides them: ``temperature``, ``extra_body``).
    temperature: float = 0.8
    temperature_text: float = 0.7
    top_k: int = 250
    top_k_text: int = 25
    # Turn state: a response ends after this many frames whose text is padding.
    listen_hangover_frames: int = 6
    # Input frames a session may queue ahead of the tick (10 s); older ones are dropped.
    max_queued_frames: int = 125
    # Real-time pacing (``realtime: true``): see the class docstring.
    tick_grace_ms: int = 20
    max_backlog_frames: int = 2
    max_input_lag_ms: int = 400

    def __post_init__(self) -> None:
        if self.model not in MODEL_KINDS:
            raise ValueError(f"personaplex option model must be one of {MODEL_KINDS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"personaplex option dtype must be one of {DTYPES}")
        for name in (
            "slots",
            "prompt_silence_frames",
            "max_persona_tokens",
            "listen_hangover_frames",
            "max_queued_frames",
            "tick_grace_ms",
            "max_backlog_frames",
            "max_input_lag_ms",
            "tiny_text_card",
            "tiny_card",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"personaplex option {name} must be a non-negative integer")
        if self.slots < 1 or self.max_queued_frames < 1 or self.listen_hangover_frames < 1:
            raise ValueError("personaplex options slots, max_queued_frames and hangover must be >0")
        lag_frames = self.max_input_lag_ms // FRAME_MS
        if self.max_backlog_frames < 1 or lag_frames <= self.max_backlog_frames:
            raise ValueError(
                "personaplex options need max_backlog_frames >= 1 and max_input_lag_ms of"
                f" more than max_backlog_frames x {FRAME_MS} ms"
            )
        if self.tiny_text_card < 5:
            raise ValueError("personaplex option tiny_text_card must exceed the padding id 3")
        for name in ("temperature", "temperature_text"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"personaplex option {name} must be a non-negative number")
        for name in ("top_k", "top_k_text"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"personaplex option {name} must be a positive integer")
        if not isinstance(self.realtime, bool):
            raise ValueError("personaplex option realtime must be a boolean")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> PersonaPlexOptions:
        """Build from a YAML/options mapping; unknown keys are refused (typos surface)."""
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown personaplex option(s): {', '.join(unknown)}")
        return cls(**raw)
