"""``MiniCPMO45StageModel``: upstream's ``MiniCPMODuplex`` driven one unit at a time.

Each session's stage-0 request owns one conversation on a slot: one ``MiniCPMODuplex``
from the upstream factory, ``prepare``d with the session's instructions (plain text:
upstream wraps them in its chat template itself) and voice at its first step. Every input
unit (1 s of 16 kHz float32) costs two steps of the worker:

1. ``streaming_prefill(audio_waveform=unit, frame_list=images)``: the first unit of a
   conversation is the first 1000 ms of input behind 35 ms of leading silence (1035 ms:
   upstream pads a short first unit exactly so; here it is explicit), every later one is
   1000 ms; ``frame_list`` holds the images that rode the unit, as RGB PIL images (upstream
   feeds them before the unit's audio), and is left out when there are none;
2. ``streaming_generate(...)`` with the session's sampling: listen, or speak (text and
   24 kHz speech), and whether the turn ended.

Splitting them lets a cancel that arrives between the two land where upstream looks for
it: a new epoch's request for a session the stage holds (a barge-in or
``response.cancel``) sets the conversation's break event at once, so a unit already
prefilled generates nothing (upstream answers listen and end of turn, but that answer is
synthetic: the model's own turn stays open, so it is ignored here); the break event is
cleared before the next unit's prefill (upstream refuses any unit prefilled while it is
set). The conversation goes on across epochs (the model has heard everything); speech
still coming from the interrupted turn is muted until the model ends that turn.

Aborting a session's current request (session close) sets its session stop and hands
the conversation back to the factory, which frees it. Everything runs on the stage
worker thread, never on the session loop.
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from omniduplex.engine.duplex.contracts import parse_stage_request_id
from omniduplex.engine.duplex.plugin import InputImage
from omniduplex.engine.stage import StageInput, StageModel, StageOutput

from .images import decode_image
from .options import FIRST_UNIT_SAMPLES, UNIT_SAMPLES, MiniCPMO45Options
from .upstream import UpstreamDuplexFactory, load_upstream_factory
from .voice import (
    decode_ref_audio_url,
    ref_audio_to_wav,
    resolve_voice,
    wav_to_ref_audio,
)

# Leading silence that makes the first 1000 ms unit the 1035 ms upstream's first needs.
FIRST_UNIT_PAD_SAMPLES = FIRST_UNIT_SAMPLES - UNIT_SAMPLES
_SAMPLING_KEYS = ("temperature", "top_k", "top_p", "listen_prob_scale")


@dataclass(slots=True)
class MiniCPMO45Stats:
    """What tests and benchmarks read."""

    prefills: int = 0
    generates: int = 0
    speak_units: int = 0
    dropped_units: int = 0  # queued units dropped past ``max_queued_units``
    breaks: int = 0  # break events set (cancels that reached a live conversation)


@dataclass(slots=True)
class _Unit:
    """One unit of input audio and the images that ride it."""

    samples: np.ndarray
    images: list[InputImage] = field(default_factory=list)


@dataclass(slots=True)
class _Conversation:
    session_id: str
    request_id: str
    epoch: int
    slot: int
    config: dict[str, Any]
    sampling: dict[str, Any]
    queue: deque[_Unit] = field(default_factory=deque)
    duplex: Any = None  # upstream's MiniCPMODuplex, once prepared
    prompt_wav_path: str | None = None
    owned_wav: Path | None = None  # a temporary WAV of the session's ref_audio
    units_prefilled: int = 0
    awaiting_generate: bool = False
    break_set: bool = False
    speaking: bool = False
    muted: bool = False


class MiniCPMO45StageModel(StageModel):
    """Options as in ``MiniCPMO45Options`` (keywords)."""

    def __init__(
        self, options: MiniCPMO45Options | Mapping[str, Any] | None = None, **settings: Any
    ) -> None:
        if isinstance(options, MiniCPMO45Options):
            self.options = options
        else:
            self.options = MiniCPMO45Options.from_mapping({**(options or {}), **settings})
        self.factory: UpstreamDuplexFactory = load_upstream_factory(self.options)
        self.stats = MiniCPMO45Stats()
        self._slots: list[_Conversation | None] = [None] * self.options.slots
        self._by_request: dict[str, _Conversation] = {}
        self._by_session: dict[str, _Conversation] = {}
        self._superseded: list[str] = []

    # ---- request lifecycle ----------------------------------------------------------

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        parsed = parse_stage_request_id(request_id)
        session_id = parsed.session_id if parsed is not None else request_id
        epoch = parsed.epoch if parsed is not None else 0
        config = dict(inputs.data.get("config") or {})
        held = self._by_session.get(session_id)
        if held is not None:
            # A new epoch of a live session: its response was cancelled (barge-in or
            # response.cancel). Same conversation; break what the model is doing now.
            self._by_request.pop(held.request_id, None)
            self._superseded.append(held.request_id)
            held.request_id = request_id
            held.epoch = epoch
            if held.duplex is not None:
                held.duplex.set_break_event()
                held.break_set = True
                self.stats.breaks += 1
            held.muted = held.speaking
            held.speaking = False
            self._apply_sampling(held, config)
            self._by_request[request_id] = held
        else:
            if "config" not in inputs.data:
                # Every epoch's first unit carries the session's config: a request without
                # it is the same epoch coming back after its conversation failed here.
                raise ValueError(
                    "minicpmo: this session's conversation failed earlier in this epoch and "
                    "cannot go on; cancel the response or open a new session"
                )
            free = next((i for i, c in enumerate(self._slots) if c is None), None)
            if free is None:
                raise RuntimeError(
                    f"minicpmo: all {self.options.slots} conversation slots are busy"
                )
            held = _Conversation(
                session_id=session_id,
                request_id=request_id,
                epoch=epoch,
                slot=free,
                config=config,
                sampling=self._sampling(config),
            )
            self._slots[free] = held
            self._by_request[request_id] = held
            self._by_session[session_id] = held
        self._ingest(held, inputs.data)

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        conversation = self._by_request.get(request_id)
        if conversation is None:
            raise KeyError(f"unknown minicpmo request {request_id!r}")
        if inputs.data.get("config"):
            self._apply_sampling(conversation, dict(inputs.data["config"]))
        self._ingest(conversation, inputs.data)

    def abort(self, request_id: str) -> None:
        conversation = self._by_request.pop(request_id, None)
        if conversation is None:
            return  # unknown, or superseded by a newer epoch of its session
        self._end(conversation)

    def close(self) -> None:
        for request_id in list(self._by_request):
            self.abort(request_id)
        self.factory.close()

    @property
    def live_request_ids(self) -> tuple[str, ...]:
        return tuple(c.request_id for c in self._slots if c is not None)

    def _end(self, conversation: _Conversation) -> None:
        """The session closed (or failed): stop its model session and free its state."""
        self._slots[conversation.slot] = None
        self._by_session.pop(conversation.session_id, None)
        duplex, conversation.duplex = conversation.duplex, None
        try:
            if duplex is not None:
                duplex.set_session_stop()
                self.factory.release(conversation.slot, duplex)
        finally:
            if conversation.owned_wav is not None:
                conversation.owned_wav.unlink(missing_ok=True)
                conversation.owned_wav = None

    def _ingest(self, conversation: _Conversation, data: Mapping[str, Any]) -> None:
        audio = data.get("audio")
        if audio is None:
            return
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if samples.size != UNIT_SAMPLES:
            raise ValueError(f"minicpmo input must be {UNIT_SAMPLES} samples per unit")
        if not np.isfinite(samples).all():
            raise ValueError("minicpmo input contains NaN or infinite samples")
        conversation.queue.append(_Unit(samples, list(data.get("images") or ())))
        while len(conversation.queue) > self.options.max_queued_units:
            dropped = conversation.queue.popleft()
            # The audio is lost to the backlog; its images are not: the next unit takes them.
            conversation.queue[0].images[:0] = dropped.images
            self.stats.dropped_units += 1

    def _sampling(self, config: Mapping[str, Any]) -> dict[str, Any]:
        defaults = self.options.sampling
        sampling = {
            "temperature": defaults.temperature,
            "top_k": defaults.top_k,
            "top_p": defaults.top_p,
            "listen_prob_scale": defaults.listen_prob_scale,
            "force_listen_count": defaults.force_listen_count,
        }
        for key in (*_SAMPLING_KEYS, "force_listen_count"):
            if config.get(key) is not None:
                sampling[key] = config[key]
        return sampling

    def _apply_sampling(self, conversation: _Conversation, config: Mapping[str, Any]) -> None:
        # force_listen_count is a constructor setting upstream: fixed once prepared.
        for key in _SAMPLING_KEYS:
            if config.get(key) is not None:
                conversation.sampling[key] = config[key]

    # ---- stepping -------------------------------------------------------------------

    def ready_request_ids(self) -> list[str]:
        return [
            c.request_id for c in self._slots if c is not None and (c.awaiting_generate or c.queue)
        ]

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        outputs = [
            self.output(rid, {"kind": "superseded"}, finished=True) for rid in self._superseded
        ]
        self._superseded.clear()
        for request_id in request_ids:
            conversation = self._by_request.get(request_id)
            if conversation is None:
                continue
            try:
                data = self._advance(conversation)
            except Exception as exc:
                # One conversation's failure is its own: stop it, the others go on.
                self._by_request.pop(request_id, None)
                self._end(conversation)
                outputs.append(
                    self.output(request_id, {}, error=f"minicpmo: {type(exc).__name__}: {exc}")
                )
                continue
            if data is not None:
                outputs.append(self.output(request_id, data))
        return outputs

    def _advance(self, conversation: _Conversation) -> dict[str, Any] | None:
        if conversation.duplex is None:
            self._prepare(conversation)
        if conversation.awaiting_generate:
            return self._generate(conversation)
        queued = conversation.queue.popleft()
        unit = queued.samples
        frames = [decode_image(image) for image in queued.images]
        duplex = conversation.duplex
        if conversation.break_set:
            duplex.clear_break_event()
            conversation.break_set = False
        if conversation.units_prefilled == 0:
            unit = np.concatenate((np.zeros(FIRST_UNIT_PAD_SAMPLES, dtype=np.float32), unit))
        if frames:
            result = duplex.streaming_prefill(audio_waveform=unit, frame_list=frames)
        else:
            result = duplex.streaming_prefill(audio_waveform=unit)
        conversation.units_prefilled += 1
        self.stats.prefills += 1
        if not result.get("success", False):
            raise RuntimeError(
                f"streaming_prefill refused the unit: {result.get('reason') or 'no reason given'}"
            )
        conversation.awaiting_generate = True
        return None

    def _prepare(self, conversation: _Conversation) -> None:
        options = self.options
        config = conversation.config
        ref_audio: np.ndarray | None = None
        if config.get("ref_audio"):
            wav = decode_ref_audio_url(str(config["ref_audio"]))
            ref_audio = wav_to_ref_audio(wav)
            handle, name = tempfile.mkstemp(prefix="minicpmo-voice-", suffix=".wav")
            with os.fdopen(handle, "wb") as file:
                file.write(ref_audio_to_wav(ref_audio))
            conversation.owned_wav = Path(name)
            conversation.prompt_wav_path = name
        else:
            path = resolve_voice(options, config.get("voice"))
            if path is not None:
                ref_audio = wav_to_ref_audio(path.read_bytes())
                conversation.prompt_wav_path = str(path)
        settings = {
            **options.upstream_kwargs(),
            **{key: conversation.sampling[key] for key in _SAMPLING_KEYS},
            "force_listen_count": conversation.sampling["force_listen_count"],
        }
        duplex = self.factory.open(conversation.slot, settings)
        conversation.duplex = duplex
        # Plain instructions: upstream's prepare builds "<|im_start|>system\n" + them
        # [+ "\n<|audio_start|>" + ref audio + "<|audio_end|>"] + "<|im_end|>" itself.
        duplex.prepare(
            prefix_system_prompt=str(config.get("instructions") or options.default_instructions),
            ref_audio=ref_audio,
            prompt_wav_path=conversation.prompt_wav_path,
        )

    def _generate(self, conversation: _Conversation) -> dict[str, Any] | None:
        sampling = conversation.sampling
        options = self.options
        broken = conversation.break_set  # a unit prefilled before the cancel
        result = conversation.duplex.streaming_generate(
            prompt_wav_path=conversation.prompt_wav_path,
            max_new_speak_tokens_per_chunk=options.max_new_speak_tokens_per_chunk,
            decode_mode="sampling",
            temperature=float(sampling["temperature"]),
            top_k=int(sampling["top_k"]),
            top_p=float(sampling["top_p"]),
            listen_prob_scale=float(sampling["listen_prob_scale"]),
            text_repetition_penalty=options.text_repetition_penalty,
            text_repetition_window_size=options.text_repetition_window_size,
        )
        conversation.awaiting_generate = False
        self.stats.generates += 1
        if broken:
            # Upstream's answer to a broken unit (listen, end of turn) is not the model's:
            # it generated nothing and its turn, if one was open, is still open.
            return None
        is_listen = bool(result.get("is_listen", True))
        end_of_turn = bool(result.get("end_of_turn", False))
        if conversation.muted:
            # The rest of a turn whose response was cancelled: wait for the turn to end.
            if is_listen or end_of_turn:
                conversation.muted = False
            return None
        if is_listen:
            if not conversation.speaking:
                return None  # listening on: nothing to say on the wire
            conversation.speaking = False
            return {"kind": "unit", "opens": False, "closes": True, "audio": None, "text": ""}
        self.stats.speak_units += 1
        opens = not conversation.speaking
        conversation.speaking = not end_of_turn
        audio = result.get("audio_waveform")
        samples = (
            None if audio is None else np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
        )
        return {
            "kind": "unit",
            "opens": opens,
            "closes": end_of_turn,
            "audio": samples if samples is not None and samples.size else None,
            "text": str(result.get("text") or ""),
        }
