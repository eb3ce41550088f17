"""A test double of Whisper's short-window decoder, for the fallback on looping text.

Whether real Whisper loops on a given window depends on the audio, the CTranslate2
version and the CPU, so the rule "a short-window text that repeats itself is decoded
again in full windows" is tested given a scripted decode: ``ScriptedWhisperDouble``
keeps the real model's features, tokenizer and full-window ``transcribe``, and its
short-window ``generate`` returns the scripted text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class _GenerationDouble:
    """What CTranslate2's ``Whisper.generate`` returns per prompt (the fields used)."""

    sequences_ids: list[list[int]]
    scores: list[float]
    no_speech_prob: float


class _ScriptedDecoderDouble:
    """CTranslate2's Whisper decoder, answering every ``generate`` with ``tokens``."""

    def __init__(self, real: Any, tokens: list[int]) -> None:
        self.is_multilingual = real.is_multilingual
        self._tokens = tokens
        self.generate_calls = 0

    def generate(self, features: Any, prompts: list[list[int]], **options: Any) -> list[Any]:
        self.generate_calls += 1
        confident = _GenerationDouble(
            sequences_ids=[self._tokens], scores=[-0.1], no_speech_prob=0.0
        )
        return [confident for _ in prompts]


class ScriptedWhisperDouble:
    """Test double of a faster-whisper model whose short-window decode says ``text``;
    full-window decodes (``transcribe``) are the real model's."""

    def __init__(self, real: Any, text: str) -> None:
        self._real = real
        self.feature_extractor = real.feature_extractor
        self.hf_tokenizer = real.hf_tokenizer
        tokens = real.hf_tokenizer.encode(" " + text, add_special_tokens=False).ids
        self.model = _ScriptedDecoderDouble(real.model, tokens)

    def transcribe(self, *args: Any, **kwargs: Any) -> Any:
        return self._real.transcribe(*args, **kwargs)
