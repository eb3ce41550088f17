"""``PersonaPlexStageModel``: every live session of a worker in one 80 ms lockstep tick.

The model holds a fixed table of ``slots`` conversations (Mimi encoder + LM + Mimi
decoder streaming state, one row per slot). A session's stage-0 request owns one slot;
its updates queue 80 ms input frames. Each tick steps the whole table in one batch:

1. every live slot takes its next queued frame, or silence when its client is behind
   (the tick never waits for a client), or its next prompt frame;
2. Mimi encodes the table's frames ([slots, 1, 1920] -> user codes);
3. ``SlotLMGen`` samples text + agent codes (per-slot RNG, temperature, top-k, forcing);
4. Mimi decodes the agent codes of the frame generated one step ago (acoustic delay);
5. each live slot's frame goes through its turn state (text padding -> listen/speak).

Slots join and leave between ticks: a joining slot is reset with a per-slot mask
(``reset_streaming(mask)``, ``support_out_of_sync``), an empty slot is frozen with the
exec mask. Because the table's shape never changes, a slot's arithmetic does not depend
on its neighbours: a session's output is the same with or without others (same seed).

Pacing. ``realtime: true`` steps when the inputs are there and keeps real time for a
client that is behind (``pacing.py``: ready, catch-up and deadline steps; stale and
prompt-time input dropped and counted; ``wake_after_s`` tells the scheduler when the
deadline is). ``realtime: false`` ticks as soon as every live slot has a frame queued (or
a prompt frame left) and drops nothing: deterministic, as fast as the inputs come.

A new epoch's request for a session that already owns a slot (after a response cancel)
takes the slot over: the conversation goes on, the rest of the current stretch of speech
is muted, and the superseded request is finished.
"""

from __future__ import annotations

import copy
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from omniduplex.engine.duplex.contracts import parse_stage_request_id
from omniduplex.engine.stage import StageInput, StageModel, StageOutput

from .options import FRAME_MS, FRAME_SAMPLES, SILENCE_TOKENS, SINE_TOKENS, PersonaPlexOptions
from .pacing import TickPacer
from .prompts import load_voice_audio, resolve_voice, wrap_persona
from .table import Frame, PersonaPlexStats, Slot

__all__ = ["PersonaPlexStageModel", "PersonaPlexStats"]


class PersonaPlexStageModel(StageModel):
    """Options as in ``PersonaPlexOptions`` (keywords). ``clock`` is injectable."""

    def __init__(
        self,
        options: PersonaPlexOptions | Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        **settings: Any,
    ) -> None:
        if isinstance(options, PersonaPlexOptions):
            self.options = options
        else:
            self.options = PersonaPlexOptions.from_mapping({**(options or {}), **settings})
        if self.options.device == "cpu":
            # moshi wraps functions in lazy torch.compile at import; on CPU the first call
            # would compile for seconds. Must be set before moshi is first imported.
            os.environ.setdefault("NO_TORCH_COMPILE", "1")
        from . import runtime  # torch + moshi: only where the stage runs

        self._rt = runtime
        self._torch = runtime.torch
        self._clock = clock
        self.stats = PersonaPlexStats()
        models = runtime.build_models(self.options)
        self.models = models
        torch = self._torch
        lm = models.lm
        self._card = lm.card
        self._max_delay = max(lm.delays)
        self._delays = list(lm.delays)
        self._pad = lm.existing_text_padding_id
        self._ungenerated = lm.ungenerated_token_id
        self._sine = torch.tensor([t % lm.card for t in SINE_TOKENS], dtype=torch.long)
        self._silence = np.array([t % lm.card for t in SILENCE_TOKENS], dtype=np.int64)
        self._noise_k = max(1, min(max(lm.card, lm.text_card), 2048))
        # Voice prompts are encoded by a copy of Mimi outside the table's streaming state.
        self._mimi_offline = copy.deepcopy(models.mimi)
        self._voice_codes: dict[str, np.ndarray] = {}
        n = self.options.slots
        self.lm_gen = runtime.SlotLMGen(lm)
        self.lm_gen.streaming_forever(n)
        models.mimi.streaming_forever(n)
        self._slots: list[Slot | None] = [None] * n
        self._by_request: dict[str, Slot] = {}
        self._by_session: dict[str, Slot] = {}
        self._generators = [torch.Generator(device="cpu") for _ in range(n)]
        self._superseded: list[str] = []
        self._lag_frames = self.options.max_input_lag_ms // FRAME_MS
        self._pacer = TickPacer(
            period_s=FRAME_MS / 1000.0,
            grace_s=self.options.tick_grace_ms / 1000.0,
            max_backlog_frames=self.options.max_backlog_frames,
            clock=clock,
        )
        self._apply_exec_mask()

    # ---- request lifecycle ----------------------------------------------------------

    @property
    def live_request_ids(self) -> tuple[str, ...]:
        return tuple(s.request_id for s in self._slots if s is not None)

    def input_backlog(self, request_id: str) -> int:
        """Input frames the request's session has queued, waiting for a tick."""
        slot = self._by_request.get(request_id)
        return 0 if slot is None else slot.backlog

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        parsed = parse_stage_request_id(request_id)
        session_id = parsed.session_id if parsed is not None else request_id
        epoch = parsed.epoch if parsed is not None else 0
        config = dict(inputs.data.get("config") or {})
        held = self._by_session.get(session_id)
        if held is not None:
            # A new epoch of a live session (a response was cancelled): same conversation.
            self._by_request.pop(held.request_id, None)
            self._superseded.append(held.request_id)
            held.request_id = request_id
            held.epoch = epoch
            held.muted = held.speaking
            held.speaking = False
            held.quiet = 0
            self._apply_sampling(held, config)
            self._by_request[request_id] = held
        else:
            free = next((i for i, s in enumerate(self._slots) if s is None), None)
            if free is None:
                raise RuntimeError(f"personaplex: all {self.options.slots} slots are busy")
            held = self._new_slot(free, session_id, request_id, epoch, config)
            self._slots[free] = held
            self._by_request[request_id] = held
            self._by_session[session_id] = held
        self._ingest(held, inputs.data)
        self._pacer.start()

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        slot = self._by_request.get(request_id)
        if slot is None:
            raise KeyError(f"unknown personaplex request {request_id!r}")
        if inputs.data.get("config"):
            self._apply_sampling(slot, dict(inputs.data["config"]))
        self._ingest(slot, inputs.data)

    def abort(self, request_id: str) -> None:
        slot = self._by_request.pop(request_id, None)
        if slot is None:
            return  # unknown, or superseded by a newer epoch of its session
        self._slots[slot.index] = None
        self._by_session.pop(slot.session_id, None)
        self._apply_exec_mask()
        if not self._by_request:
            self._pacer.stop()

    def close(self) -> None:
        for rid in list(self._by_request):
            self.abort(rid)

    def counters(self) -> dict[str, float]:
        """What ``/metrics`` exports (``omniduplex_stage_<name>_total``)."""
        stats = self.stats
        return {
            "ticks": stats.forward_calls,
            "step_seconds": stats.step_s_sum,
            "catchup_ticks": stats.catchup_ticks,
            "deadline_ticks": stats.deadline_ticks,
            "input_frames": stats.input_frames,
            "input_wait_seconds": stats.input_wait_s_sum,
            "input_starved_frames": stats.starved_frames,
            "input_stale_frames": stats.stale_frames,
            "input_overflow_dropped_frames": stats.dropped_frames,
            "prompt_input_dropped_frames": stats.prompt_frames_dropped,
            "input_late_dropped_frames": stats.late_frames_dropped,
            "frames_emitted": stats.frames_emitted,
        }

    def _ingest(self, slot: Slot, data: Mapping[str, Any]) -> None:
        audio = data.get("audio")
        if audio is None:
            return
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if samples.size != FRAME_SAMPLES:
            raise ValueError(f"personaplex input must be {FRAME_SAMPLES} samples per frame")
        if not np.isfinite(samples).all():
            raise ValueError("personaplex input contains NaN or infinite samples")
        if self.options.realtime and slot.prompting:
            # The prompt is being fed: what the client says meanwhile is not heard, so it
            # cannot pile up behind the prompt; its first live frame is the next to come.
            self.stats.prompt_frames_dropped += 1
            return
        if self.options.realtime and slot.silence_owed:
            # Its step already went ahead with silence: stepping it too would put this
            # session's output a frame ahead of real time for good.
            slot.silence_owed = False
            self.stats.late_frames_dropped += 1
            self._pacer.late_frame(self._clock())
            return
        slot.queue.append(Frame(samples, self._clock()))
        if self.options.realtime:
            # A real-time client's k-th newest frame is k periods old: beyond the lag
            # bound the oldest are dropped, so a stall or a burst costs at most that.
            while len(slot.queue) > self._lag_frames:
                slot.queue.popleft()
                self.stats.stale_frames += 1
        while len(slot.queue) > self.options.max_queued_frames:
            slot.queue.popleft()
            self.stats.dropped_frames += 1

    def _new_slot(
        self, index: int, session_id: str, request_id: str, epoch: int, config: dict[str, Any]
    ) -> Slot:
        opts = self.options
        seed = config.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            seed = secrets.randbits(62)
        voice = self._voice(config.get("voice"))
        persona_text = wrap_persona(str(config.get("persona") or opts.default_persona or ""))
        persona = self.models.text.encode(persona_text)[: opts.max_persona_tokens]
        silence = opts.prompt_silence_frames
        n_voice = voice.shape[1]
        text = [self._pad] * (n_voice + silence) + persona + [self._pad] * silence
        total = len(text)
        agent = np.tile(self._silence[:, None], (1, total))
        agent[:, :n_voice] = voice
        # Codebook k of frame t is written at step t + delay_k.
        forced = np.tile(self._silence[:, None], (1, total))
        for k in range(agent.shape[0]):
            d = self._delays[1 + k]
            if d < total:
                forced[k, d:] = agent[k, : total - d]
        slot = Slot(
            index=index,
            session_id=session_id,
            request_id=request_id,
            epoch=epoch,
            seed=int(seed),
            temp=opts.temperature,
            temp_text=opts.temperature_text,
            top_k=opts.top_k,
            top_k_text=opts.top_k_text,
            prompt_text=text,
            prompt_audio=forced,
        )
        self._apply_sampling(slot, config)
        self._generators[index].manual_seed(slot.seed)
        return slot

    def _apply_sampling(self, slot: Slot, config: Mapping[str, Any]) -> None:
        for key, attr in (
            ("temperature", "temp"),
            ("temperature_text", "temp_text"),
            ("top_k", "top_k"),
            ("top_k_text", "top_k_text"),
        ):
            value = config.get(key)
            if value is not None:
                setattr(slot, attr, type(getattr(slot, attr))(value))

    def _voice(self, name: Any) -> np.ndarray:
        """Agent codes [8, T] of a voice prompt (cached per voice)."""
        path = resolve_voice(self.options, str(name) if name else None)
        if path is None:
            return np.zeros((len(self._silence), 0), dtype=np.int64)
        key = str(path)
        codes = self._voice_codes.get(key)
        if codes is None:
            torch = self._torch
            samples = load_voice_audio(path)
            usable = samples.size // FRAME_SAMPLES * FRAME_SAMPLES
            if usable == 0:
                codes = np.zeros((len(self._silence), 0), dtype=np.int64)
            else:
                x = torch.from_numpy(samples[:usable]).to(self.models.device)[None, None]
                with torch.no_grad():
                    codes = self._mimi_offline.encode(x)[0].cpu().numpy().astype(np.int64)
            self._voice_codes[key] = codes
        return codes

    # ---- readiness ------------------------------------------------------------------

    def ready_request_ids(self) -> list[str]:
        live = [s for s in self._slots if s is not None]
        if not live:
            return []
        if self.options.realtime:
            return [s.request_id for s in self._pacer.due_batch(live)]
        if not all(s.ready for s in live):
            return []
        return [s.request_id for s in live]

    def wake_after_s(self) -> float | None:
        if not self.options.realtime or not self._by_request:
            return None
        return self._pacer.wake_after_s()

    # ---- stepping -------------------------------------------------------------------

    def _apply_exec_mask(self, batch: set[int] | None = None) -> None:
        torch = self._torch
        mask = torch.tensor(
            [s is not None and (batch is None or s.index in batch) for s in self._slots],
            dtype=torch.bool,
        )
        self.lm_gen.set_exec_mask(mask)
        self.models.mimi.set_exec_mask(mask)

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        started = self._clock()
        batch = [self._by_request[rid] for rid in request_ids if rid in self._by_request]
        outputs: list[StageOutput] = [
            self.output(rid, {"kind": "superseded"}, finished=True) for rid in self._superseded
        ]
        self._superseded.clear()
        if not batch:
            return outputs
        full = len(batch) == sum(s is not None for s in self._slots)
        starved_before = self.stats.starved_frames
        outputs.extend(self._tick(batch, started))
        starved = self.stats.starved_frames > starved_before
        stats = self.stats
        stats.forward_calls += 1
        stats.last_batch_size = len(batch)
        stats.max_batch_size = max(stats.max_batch_size, len(batch))
        stats.batch_sizes[len(batch)] += 1
        stats.last_step_s = self._clock() - started
        stats.step_s_sum += stats.last_step_s
        if self.options.realtime:
            stats.catchup_ticks += not full
            stats.deadline_ticks += starved
            self._pacer.stepped(started=started, full=full, starved=starved)
        return outputs

    def _take_input(self, slot: Slot, now: float) -> np.ndarray | None:
        """The slot's next input frame, recording how long it waited for its step."""
        if not slot.queue:
            return None
        frame = slot.queue.popleft()
        wait = max(0.0, now - frame.arrived_at)
        stats = self.stats
        stats.input_frames += 1
        stats.input_wait_s_sum += wait
        stats.input_wait_s_max = max(stats.input_wait_s_max, wait)
        stats.last_input_wait_s = wait
        return frame.samples

    def _tick(self, batch: list[Slot], now: float) -> list[StageOutput]:
        torch = self._torch
        n = self.options.slots
        fresh = [s.index for s in batch if s.fresh]
        if fresh:
            reset = torch.zeros(n, dtype=torch.bool)
            reset[fresh] = True
            self.lm_gen.reset_streaming(reset)
            self.models.mimi.reset_streaming(reset)
            # Forget the previous occupant's tokens too (never read, but keep it clean).
            self.lm_gen._streaming_state.cache[reset] = self._ungenerated
            for slot in batch:
                slot.fresh = False
        self._apply_exec_mask({s.index for s in batch})

        pcm = np.zeros((n, 1, FRAME_SAMPLES), dtype=np.float32)
        forced_text = torch.full((n,), -1, dtype=torch.long)
        forced_audio = torch.full((n, len(self._silence)), -1, dtype=torch.long)
        prompting = torch.zeros(n, dtype=torch.bool)
        starved: set[int] = set()
        for slot in batch:
            i = slot.index
            if slot.prompting:
                prompting[i] = True
                forced_text[i] = slot.prompt_text[slot.steps]
                forced_audio[i] = torch.from_numpy(slot.prompt_audio[:, slot.steps])
            elif (samples := self._take_input(slot, now)) is not None:
                pcm[i, 0] = samples
            else:
                starved.add(i)  # the client is behind: silence, the tick goes on
                slot.silence_owed = self.options.realtime
        self.stats.starved_frames += len(starved)

        sampling = self._sampling_tensors()
        # Each slot draws exactly its own top-k worth of uniforms from its own generator,
        # so its random stream never depends on who else is in the table.
        widths = {s.index: self._noise_width(s) for s in batch}
        noise = torch.full((n, 1 + len(self._silence), max(widths.values())), 0.5)
        for slot in batch:
            width = widths[slot.index]
            noise[slot.index, :, :width] = torch.rand(
                (1 + len(self._silence), width), generator=self._generators[slot.index]
            ).clamp_(1e-12, 1.0 - 1e-7)

        device = self.models.device
        with torch.no_grad():
            user = self.models.mimi.encode(torch.from_numpy(pcm).to(device))[:, :, 0].cpu()
            user = torch.where(prompting[:, None], self._sine[None, :], user)
            out = self.lm_gen.step_slots(
                user.to(device),
                sampling,
                noise.to(device),
                forced_text.to(device),
                forced_audio.to(device),
            ).cpu()
            codes = out[:, 1:].clone()
            codes[codes < 0] = 0
            audio = (
                self.models.mimi.decode(codes[:, :, None].to(device))[:, 0].float().cpu().numpy()
            )

        outputs: list[StageOutput] = []
        for slot in batch:
            i = slot.index
            produced = slot.steps - self._max_delay  # the frame ``out`` describes
            slot.steps += 1
            if produced < slot.prompt_frames or int(out[i, 0]) == self._ungenerated:
                continue
            data = self._frame(slot, int(out[i, 0]), audio[i], produced - slot.prompt_frames)
            if data is not None:
                data["input_starved"] = i in starved
                outputs.append(self.output(slot.request_id, data))
        self.stats.frames_emitted += len(outputs)
        return outputs

    def _noise_width(self, slot: Slot) -> int:
        return max(1, min(max(slot.top_k, slot.top_k_text), self._noise_k))

    def _sampling_tensors(self) -> Any:
        torch = self._torch
        rt = self._rt
        rows = [s for s in self._slots]
        temp = [s.temp if s else 1.0 for s in rows]
        temp_text = [s.temp_text if s else 1.0 for s in rows]
        top_k = [min(s.top_k, self._noise_k) if s else 1 for s in rows]
        top_k_text = [min(s.top_k_text, self._noise_k) if s else 1 for s in rows]
        device = self.models.device
        return rt.SlotSampling(
            temp=torch.tensor(temp, dtype=torch.float32, device=device),
            temp_text=torch.tensor(temp_text, dtype=torch.float32, device=device),
            top_k=torch.tensor(top_k, dtype=torch.long, device=device),
            top_k_text=torch.tensor(top_k_text, dtype=torch.long, device=device),
        )

    def _frame(
        self, slot: Slot, token: int, audio: np.ndarray, frame: int
    ) -> dict[str, Any] | None:
        """Turn state of one live output frame; None when nothing goes to the session."""
        text = self.models.text.piece(token)
        active = bool(text)
        hangover = self.options.listen_hangover_frames
        if slot.muted:
            # The rest of a stretch whose response was cancelled: wait for it to end.
            slot.quiet = 0 if active else slot.quiet + 1
            if slot.quiet >= hangover:
                slot.muted = False
                slot.quiet = 0
            return None
        if not slot.speaking:
            if not active:
                return None
            slot.speaking = True
            slot.quiet = 0
            phase = "speak"
        elif active:
            slot.quiet = 0
            phase = "speaking"
        else:
            slot.quiet += 1
            if slot.quiet >= hangover:
                slot.speaking = False
                slot.quiet = 0
                phase = "listen"
            else:
                phase = "speaking"
        return {
            "kind": "frame",
            "phase": phase,
            "audio": np.ascontiguousarray(audio, dtype=np.float32),
            "text": text,
            "frame": frame,
        }
