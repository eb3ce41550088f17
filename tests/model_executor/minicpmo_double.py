"""A test double of upstream's ``MiniCPMODuplex`` (MiniCPM-o 4.5 remote code).

The real class needs the 19 GB checkpoint and CUDA; this double stands in for it on CPU
and ENFORCES the contract the plugin relies on, raising ``UpstreamContractViolation`` on
any breach. The contract is upstream's ``as_duplex`` path as the checkpoint's remote
code has it (``MiniCPMO.as_duplex`` -> ``MiniCPMODuplex.from_existing_model``, read in
chmod777john/MiniCPM-o-Demo ``MiniCPMO45/modeling_minicpmo.py`` @ d5e99a79b69e, a copy
of the trusted code): where upstream silently ignores a mistake, the double raises.

* method names and signatures exactly as upstream's (a wrong keyword is a TypeError);
* ``as_duplex`` keywords limited to the ones ``from_existing_model`` reads (its
  ``_default_duplex_params``; it takes ``**kwargs`` and drops any other name unread);
* ``prepare`` gets the instructions as plain text: upstream wraps them itself
  (``<|im_start|>system\n`` + text [+ ``\n<|audio_start|>`` ref audio
  ``<|audio_end|>``] + ``<|im_end|>``), so a prefix already in chat-template tokens would
  be wrapped twice, and a ``suffix_system_prompt`` is swallowed unread by its ``**kwargs``;
* one conversation per instance: ``prepare`` once, before any prefill, never after stop;
* ``streaming_prefill``: ``frame_list`` absent or a non-empty list of RGB PIL images
  (upstream's processor and slicer read PIL images), no ``text_list``; audio a 16 kHz
  mono float32 ndarray, finite, 1035 ms (16560 samples)
  for the first unit and 1000 ms (16000) for every later one (upstream left-pads a short
  first unit, consumes 1030 ms of it, the hop-aligned 1035 ms, and needs 1000 ms buffered
  for each later one, else it refuses the unit); never while the break event is set
  (upstream refuses such a unit: ``success`` False); never twice without a generate;
* ``streaming_generate`` only after a successful ``streaming_prefill``; with the break
  event set it answers listen + end of turn and changes nothing else, as upstream does
  (no forced-listen unit used up, the model's own turn still open);
* nothing after ``set_session_stop``; no call from a thread running an asyncio loop (the
  model steps on the stage worker, never on the session loop).

It answers from a script of units: ``"L"`` listen, ``"S:text"`` speak, ``"E:text"``
speak and end the turn; past the script it listens. As upstream, it never listens while
its turn is open (upstream turns a sampled ``<|listen|>`` into ``<|tts_bos|>`` there): an
``"L"`` inside a turn is a speak unit without text. Speech is a real 24 kHz float32 tone
(one second per unit); with ``generate_audio=False`` a speak unit has no audio (None), as
upstream's. Every violation is also recorded on the factory, so a test can assert that
none happened even where the stage caught the exception.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from omniduplex.model_executor.models.minicpmo_4_5.options import MiniCPMO45Options
from omniduplex.model_executor.models.minicpmo_4_5.upstream import UpstreamDuplexFactory

RATE_IN = 16_000
RATE_OUT = 24_000
FIRST_UNIT = 16_560  # 1035 ms
UNIT = 16_000  # 1000 ms

# What ``MiniCPMO.as_duplex(device=None, **kwargs)`` reads: ``device`` and the keys of
# ``MiniCPMODuplex._default_duplex_params`` (upstream's defaults alongside). The
# standalone constructor's extra keywords (``attn_implementation``, ``vision_batch_size``,
# ``audio_pool_step``, ``audio_chunk_length``, ``max_slice_nums``) are not read there.
UPSTREAM_DUPLEX_DEFAULTS: dict[str, Any] = {
    "generate_audio": True,
    "ls_mode": "explicit",
    "max_new_speak_tokens_per_chunk": 20,
    "text_repetition_penalty": 1.05,
    "temperature": 0.7,
    "top_k": 100,
    "top_p": 0.8,
    "text_repetition_window_size": 512,
    "listen_prob_scale": 1.0,
    "force_listen_count": 0,
    "tts_temperature": 0.8,
    "tts_repetition_penalty": 1.05,
    "enable_float16": False,
    "n_timesteps": 10,
    "chunk_ms": 1000,
    "first_chunk_ms": 1035,
    "cnn_redundancy_ms": 20,
    "sample_rate": 16000,
    "sliding_window_mode": "off",
    "basic_window_high_tokens": 8000,
    "basic_window_low_tokens": 6000,
    "context_previous_max_tokens": 500,
    "context_max_units": 24,
}
UPSTREAM_CONSTRUCTOR_KEYWORDS = frozenset({"device", *UPSTREAM_DUPLEX_DEFAULTS})
# Chat-template tokens upstream's ``prepare`` puts around the instructions itself.
TEMPLATE_TOKENS = ("<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>")


class UpstreamContractViolation(AssertionError):
    """The plugin called the upstream surface in a way upstream does not support."""


def speech_tone(seconds: float = 1.0, freq: float = 220.0) -> np.ndarray:
    t = np.arange(int(RATE_OUT * seconds)) / RATE_OUT
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@dataclass(slots=True)
class CallRecord:
    method: str
    thread: int
    unit: int  # prefills so far when the call was made
    detail: dict[str, Any] = field(default_factory=dict)


class MiniCPMODuplexDouble:
    """Stands in for one upstream ``MiniCPMODuplex`` (one conversation)."""

    def __init__(self, script: Sequence[str], violations: list[str], **kwargs: Any) -> None:
        self._violations = violations
        unknown = sorted(set(kwargs) - UPSTREAM_CONSTRUCTOR_KEYWORDS)
        if unknown:
            self._violate(
                f"unknown MiniCPMODuplex keyword(s) {unknown}: as_duplex would ignore them"
            )
        self.settings = dict(kwargs)
        self.generate_audio = bool(kwargs.get("generate_audio", True))
        self.force_listen_count = int(kwargs.get("force_listen_count", 0))
        self.script = list(script)
        self.calls: list[CallRecord] = []
        self.break_event = threading.Event()
        self.session_stop_event = threading.Event()
        self.prepared: dict[str, Any] | None = None
        self.prefills = 0
        self.generates = 0
        self.prefill_audio: list[np.ndarray] = []
        self.prefill_frames: list[list[Image.Image]] = []  # per prefill, [] without frames
        self.generate_kwargs: list[dict[str, Any]] = []
        self.break_set_at: list[int] = []  # prefills done when each break was set
        self._awaiting_generate = False
        self._script_index = 0
        self._forced_listens = 0  # upstream's _streaming_generate_count
        self.turn_open = False  # upstream: not current_turn_ended

    # ---- contract ------------------------------------------------------------------

    def _violate(self, message: str) -> None:
        self._violations.append(message)
        raise UpstreamContractViolation(message)

    def _record(self, method: str, **detail: Any) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            self._violate(f"{method} called on a thread running an asyncio loop")
        self.calls.append(CallRecord(method, threading.get_ident(), self.prefills, detail))

    def _require_live(self, method: str) -> None:
        if self.session_stop_event.is_set():
            self._violate(f"{method} after set_session_stop: the conversation is over")

    # ---- upstream surface (signatures as upstream's) --------------------------------

    def set_break_event(self) -> None:
        self._record("set_break_event")
        self.break_set_at.append(self.prefills)
        self.break_event.set()

    def clear_break_event(self) -> None:
        self._record("clear_break_event")
        self.break_event.clear()

    def set_session_stop(self) -> None:
        self._record("set_session_stop")
        self.session_stop_event.set()
        self.break_event.set()

    def clear_session_stop(self) -> None:
        self._record("clear_session_stop")
        self.session_stop_event.clear()

    def is_break_set(self) -> bool:
        return self.break_event.is_set()

    def is_session_stop_set(self) -> bool:
        return self.session_stop_event.is_set()

    def prepare(
        self,
        prefix_system_prompt: str | None = None,
        ref_audio: np.ndarray | None = None,
        prompt_wav_path: str | None = None,
        context_previous_marker: str = "\n\nprevious: ",
        **kwargs: Any,
    ) -> str:
        self._record("prepare")
        self._require_live("prepare")
        if self.prepared is not None:
            self._violate("prepare called twice: one MiniCPMODuplex holds one conversation")
        if kwargs:
            self._violate(
                f"prepare keyword(s) {sorted(kwargs)}: upstream's **kwargs swallows them unread"
            )
        if prefix_system_prompt and any(t in prefix_system_prompt for t in TEMPLATE_TOKENS):
            self._violate(
                "prepare prefix_system_prompt holds chat-template tokens: upstream wraps the "
                "plain instructions itself, so they would be wrapped twice"
            )
        if ref_audio is not None:
            if not isinstance(ref_audio, np.ndarray) or ref_audio.dtype != np.float32:
                self._violate("prepare ref_audio must be a float32 ndarray at 16 kHz")
            if ref_audio.ndim != 1 or ref_audio.size == 0:
                self._violate("prepare ref_audio must be mono and not empty")
        if (
            self.settings.get("generate_audio", True)
            and ref_audio is not None
            and not prompt_wav_path
        ):
            self._violate("prepare with ref_audio but no prompt_wav_path: token2wav has no voice")
        # What upstream feeds: its own wrapping around the plain instructions.
        prefix = "<|im_start|>system\n" + (prefix_system_prompt or "Streaming Omni Conversation.")
        suffix = "<|im_end|>"
        if isinstance(ref_audio, np.ndarray):
            prefix += "\n<|audio_start|>"
            suffix = "<|audio_end|>" + suffix
        self.prepared = {
            "prefix": prefix_system_prompt,
            "ref_audio_samples": None if ref_audio is None else int(ref_audio.size),
            "prompt_wav_path": prompt_wav_path,
            "context": prefix + ("[audio embedding]" if ref_audio is not None else "") + suffix,
        }
        self.break_event.clear()
        self.session_stop_event.clear()
        return self.prepared["context"]

    def streaming_prefill(
        self,
        audio_waveform: np.ndarray | None = None,
        frame_list: list | None = None,
        text_list: list | None = None,
        max_slice_nums: int | list[int] = 1,
        batch_vision_feed: bool = False,
    ) -> dict[str, Any]:
        self._record("streaming_prefill")
        self._require_live("streaming_prefill")
        if self.prepared is None:
            self._violate("streaming_prefill before prepare")
        if self.break_event.is_set():
            self._violate(
                "streaming_prefill while the break event is set: upstream refuses the unit"
            )
        if self._awaiting_generate:
            self._violate("streaming_prefill twice without streaming_generate: a unit is lost")
        if text_list is not None:
            self._violate("this plugin declares no text input, yet passed some")
        if frame_list is not None:
            # Upstream's processor takes PIL images and reads ``frame.size`` to slice them;
            # an empty list would make the unit a plain audio unit without saying so.
            if not isinstance(frame_list, list) or not frame_list:
                self._violate("streaming_prefill frame_list must be a non-empty list")
            for frame in frame_list:
                if not isinstance(frame, Image.Image) or frame.mode != "RGB":
                    self._violate("streaming_prefill frames must be RGB PIL images")
            if max_slice_nums != 1:
                self._violate("max_slice_nums other than 1 is not what the plugin declares")
        audio = audio_waveform
        if not isinstance(audio, np.ndarray) or audio.dtype != np.float32 or audio.ndim != 1:
            self._violate("streaming_prefill audio must be a 1-D float32 ndarray (16 kHz mono)")
        expected = FIRST_UNIT if self.prefills == 0 else UNIT
        if audio.size != expected:
            self._violate(
                f"unit {self.prefills} has {audio.size} samples; upstream needs {expected} "
                "(1035 ms first, then 1000 ms)"
            )
        if not np.isfinite(audio).all():
            self._violate("streaming_prefill audio holds NaN or infinite samples")
        self.prefill_audio.append(audio.copy())
        self.prefill_frames.append(list(frame_list or ()))
        self.prefills += 1
        self._awaiting_generate = True
        return {"success": True, "reason": "", "cost_all": 0.0}

    def streaming_generate(
        self,
        prompt_wav_path: str | None = None,
        max_new_speak_tokens_per_chunk: int = 20,
        decode_mode: str = "sampling",
        temperature: float = 0.7,
        top_k: int = 100,
        top_p: float = 0.8,
        listen_prob_scale: float = 1.0,
        listen_top_k: int | None = None,
        text_repetition_penalty: float = 1.05,
        text_repetition_window_size: int = 512,
    ) -> dict[str, Any]:
        self._record("streaming_generate")
        self._require_live("streaming_generate")
        if not self._awaiting_generate:
            self._violate("streaming_generate without a streaming_prefill before it")
        if decode_mode not in ("sampling", "greedy"):
            self._violate(f"unknown decode_mode {decode_mode!r}")
        if not (temperature > 0 and top_k >= 1 and 0 < top_p <= 1 and listen_prob_scale >= 0):
            self._violate("streaming_generate sampling out of range")
        self._awaiting_generate = False
        self.generate_kwargs.append(
            {
                "temperature": temperature,
                "top_k": top_k,
                "top_p": top_p,
                "listen_prob_scale": listen_prob_scale,
                "max_new_speak_tokens_per_chunk": max_new_speak_tokens_per_chunk,
            }
        )
        unit = self.generates
        self.generates += 1
        if self.break_event.is_set():
            # Upstream: a broken unit answers silence "at the end of a turn" and touches
            # nothing else (no forced listen used up, the model's own turn left open).
            return self._result(True, "", end_of_turn=True, unit=unit)
        forced = self._forced_listens < self.force_listen_count
        self._forced_listens += 1
        if forced:
            return self._result(True, "", end_of_turn=False, unit=unit)
        step = self.script[self._script_index] if self._script_index < len(self.script) else "L"
        self._script_index += 1
        if step == "L":
            if self.turn_open:  # upstream turns <|listen|> into <|tts_bos|> mid-turn
                return self._result(False, "", end_of_turn=False, unit=unit)
            return self._result(True, "", end_of_turn=False, unit=unit)
        kind, _, text = step.partition(":")
        self.turn_open = kind != "E"
        return self._result(False, text, end_of_turn=kind == "E", unit=unit)

    def _result(
        self, is_listen: bool, text: str, *, end_of_turn: bool, unit: int
    ) -> dict[str, Any]:
        audio: np.ndarray | None
        if is_listen:
            audio = np.zeros(RATE_OUT, dtype=np.float32)  # upstream: 1 s of silence
        else:
            audio = speech_tone() if self.generate_audio else None
        return {
            "is_listen": is_listen,
            "text": text,
            "audio_waveform": audio,
            "end_of_turn": end_of_turn,
            "current_time": unit,
            "cost_llm": 0.0,
            "cost_tts_prep": 0.0,
            "cost_tts": 0.0,
            "cost_token2wav": 0.0,
            "cost_all": 0.0,
            "n_tokens": len(text),
            "n_tts_tokens": 0 if is_listen else 25,
        }

    # ---- inspection (upstream has these too) -----------------------------------------

    def get_current_time(self) -> int:
        return self.prefills


class DoubleDuplexFactory(UpstreamDuplexFactory):
    """``upstream_factory`` for tests: a fresh double per conversation, all kept."""

    def __init__(self, options: MiniCPMO45Options, script: Sequence[str] = ()) -> None:
        self.options = options
        self.script = list(script)
        self.violations: list[str] = []
        self.opened: list[tuple[int, MiniCPMODuplexDouble]] = []
        self.released: list[MiniCPMODuplexDouble] = []
        self.closed = False

    def open(self, slot: int, settings: Mapping[str, Any]) -> MiniCPMODuplexDouble:
        for live_slot, duplex in self.opened:
            if live_slot == slot and duplex not in self.released:
                self.violations.append(f"slot {slot} opened twice while its conversation lives")
                raise UpstreamContractViolation(self.violations[-1])
        duplex = MiniCPMODuplexDouble(self.script, self.violations, **settings)
        self.opened.append((slot, duplex))
        return duplex

    def release(self, slot: int, duplex: Any) -> None:
        if not duplex.is_session_stop_set():
            self.violations.append("a conversation released without set_session_stop")
        self.released.append(duplex)

    def close(self) -> None:
        self.closed = True
