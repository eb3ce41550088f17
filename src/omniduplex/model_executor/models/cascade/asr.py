"""Stage 0: ASR (pocketsphinx, or Whisper: ``whisper_asr.py``) over a bounded pool of
decoders shared by every session.

One request is one user turn. Its audio (float32, 16 kHz) may arrive in one piece or
several; each ``step`` decodes at most ``asr_chunk_ms`` of it per request, so the turns of
several sessions interleave. When the input is final the utterance ends and one output
carries the transcript plus everything the later stages need (the request's metadata is
passed through untouched).

A *live* request (first input ``live: True``) is an utterance fed while the user speaks:
it is decoded in pieces of ``asr_partial_ms`` (one per step, however much waited), and
every changed hypothesis goes back to the request's owner (``to_owner``) as a
``partial_transcript``. Its final input either carries a response's data (the transcript
then goes on to the responder, as for any turn) or ``transcribe_only: True`` (the
transcript goes back to the owner and the request ends). A live request whose first
input carries a ``draft`` (a response's data, ``draft_replies``) sends it on to the
responder with the text each time the decoder is ``settled`` at a pause on a new text
(``kind: draft``), before its final input. The decoder wait of a live
request starts at its final input: a speaker who finds every decoder busy is only
decoded later, not failed.

A decoder (about 90 MB) is taken from the pool when a request starts decoding and given
back when it finishes or is aborted. A request that finds none waits up to
``asr_wait_s``, then fails alone with ``asr_pool_exhausted``.
"""

from __future__ import annotations

import math
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr

from omniduplex.engine.stage import StageInput, StageModel, StageOutput
from omniduplex.engine.stage.tasks import TRANSCRIPTION

from .engines import asr_engine
from .options import CascadeOptions
from .vad import SILERO_FRAME_SAMPLES, SileroClassifier
from .whisper_asr import WhisperUtterance, load_whisper_model

GRAMMAR_SEARCH = "cascade_grammar"
# A posterior that underflowed to 0: the log of the smallest float (JSON has no -inf).
_LN_SMALLEST = math.log(sys.float_info.min)
_WORD = re.compile(r"[a-z']+")
# Keys of a request's data the stage consumes; everything else is passed through.
_CONSUMED = ("audio", "sample_rate_hz", "live", "transcribe_only", "draft", "logprobs")


def normalise_sentence(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def jsgf_for_sentences(sentences: Sequence[str]) -> str:
    """A JSGF grammar whose one public rule is any of ``sentences`` (normalised)."""
    alternatives = sorted({normalise_sentence(s) for s in sentences} - {""})
    if not alternatives:
        raise ValueError("asr_sentences holds no words")
    body = " | ".join(alternatives)
    # Never name the rule <s>: that is pocketsphinx's sentence-start word.
    return f"#JSGF V1.0;\ngrammar cascade;\npublic <utterance> = {body};\n"


def speech_onset(
    audio: np.ndarray, classifier: SileroClassifier, *, threshold: float = 0.5
) -> int | None:
    """Sample offset of the first 32 ms frame Silero calls speech, or ``None``.

    Scans only up to that frame, so its cost is the length of the silence before speech.
    """
    classifier.reset()
    try:
        for k in range(audio.size // SILERO_FRAME_SAMPLES):
            frame = audio[k * SILERO_FRAME_SAMPLES : (k + 1) * SILERO_FRAME_SAMPLES]
            if classifier.probability(frame) >= threshold:
                return k * SILERO_FRAME_SAMPLES
        return None
    finally:
        classifier.reset()


class DecoderPool:
    """At most ``size`` decoders, built lazily, shared by all requests: pocketsphinx's,
    or ``build`` (another engine's utterance decoders, such as Whisper's)."""

    def __init__(
        self,
        size: int,
        *,
        grammar: str | None = None,
        build: Callable[[], Any] | None = None,
    ) -> None:
        self.size = size
        self.grammar = grammar
        self._build_other = build
        self._free: list[Any] = []
        self._created = 0
        self._lock = threading.Lock()

    @property
    def created(self) -> int:
        return self._created

    @property
    def in_use(self) -> int:
        with self._lock:
            return self._created - len(self._free)

    def _build(self) -> Any:
        if self._build_other is not None:
            return self._build_other()
        try:
            from pocketsphinx import Decoder
        except ImportError as exc:  # pragma: no cover - a dependency of omniduplex
            raise RuntimeError(f"pocketsphinx does not load: {exc}") from exc
        decoder = Decoder(loglevel="FATAL")
        if self.grammar is not None:
            decoder.add_jsgf_string(GRAMMAR_SEARCH, self.grammar)
            decoder.activate_search(GRAMMAR_SEARCH)
        return decoder

    def try_acquire(self) -> Any | None:
        with self._lock:
            if self._free:
                return self._free.pop()
            if self._created >= self.size:
                return None
            self._created += 1
        try:
            return self._build()
        except Exception:
            with self._lock:
                self._created -= 1
            raise

    def release(self, decoder: Any) -> None:
        with self._lock:
            self._free.append(decoder)

    def close(self) -> None:
        with self._lock:
            self._free.clear()
            self._created = 0


def _pcm16(samples: np.ndarray, dither: float, rng: np.random.Generator) -> bytes:
    if dither > 0 and samples.size:
        # A microphone never delivers digital silence; pocketsphinx's features (log
        # energies) go astray on exact zeros, which synthetic audio is full of.
        samples = samples + dither * rng.standard_normal(samples.size).astype(np.float32)
    return (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


@dataclass(slots=True)
class _Turn:
    meta: dict[str, Any]
    pending: list[np.ndarray] = field(default_factory=list)
    pending_samples: int = 0
    final: bool = False
    decoder: Any | None = None
    started: bool = False
    samples_decoded: int = 0
    samples_received: int = 0
    waiting_since: float = 0.0
    decode_s: float = 0.0
    first_input_at: float = 0.0
    final_at: float = 0.0
    live: bool = False
    transcribe_only: bool = False
    logprobs: bool = False  # its transcripts carry each word's log probability
    last_partial: str = ""
    draft: dict[str, Any] | None = None
    drafted: str = ""  # the text of the last draft sent on


class AsrStageModel(StageModel):
    """One utterance per request, on the ``asr`` engine; options as in ``CascadeOptions``.

    Also serves the ``transcription`` stage task (``/v1/audio/transcriptions``): audio at
    any ``sample_rate_hz`` is resampled to ``input_rate_hz``, and the request shares the
    decoder pool with the sessions.
    """

    tasks = frozenset({TRANSCRIPTION})

    def __init__(
        self,
        options: CascadeOptions | Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        **settings: Any,
    ) -> None:
        self.options = CascadeOptions.coerce(options, settings)
        grammar = self.options.asr_grammar
        if grammar is None and self.options.asr_sentences:
            grammar = jsgf_for_sentences(self.options.asr_sentences)
        self.engine, _ = asr_engine(self.options)  # whisper, or pocketsphinx when it cannot run
        whisper = self._whisper_decoders()
        self.pool = DecoderPool(self.options.asr_pool_size, grammar=grammar, build=whisper)
        # Building a decoder takes about 0.3 s: do one now, not on the first user's turn.
        self.pool.release(self.pool.try_acquire())
        self._clock = clock
        self._turns: dict[str, _Turn] = {}
        self._rng = np.random.default_rng(0)
        self._chunk = self.options.input_rate_hz * self.options.asr_chunk_ms // 1000
        self._partial_chunk = self.options.input_rate_hz * self.options.asr_partial_ms // 1000
        self._pad = self.options.input_rate_hz * self.options.asr_trim_pad_ms // 1000
        self._vad = SileroClassifier() if self.options.asr_trim_silence else None

    def _whisper_decoders(self) -> Callable[[], Any] | None:
        """Whisper's decoder factory, over one model, when Whisper runs (``engines.py``):
        each decoder finds pauses with its own Silero (its state follows one stream)."""
        if self.engine != "whisper":
            return None
        model = load_whisper_model(self.options.whisper_model)
        partial_ms, pause_ms = self.options.whisper_partial_ms, self.options.whisper_pause_ms

        def build() -> WhisperUtterance:
            vad = SileroClassifier()
            return WhisperUtterance(
                model,
                partial_ms=partial_ms,
                speech_probability=vad.probability,
                reset_speech=vad.reset,
                pause_ms=pause_ms,
            )

        return build

    # ---- requests -----------------------------------------------------------------

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        meta = {k: v for k, v in inputs.data.items() if k not in _CONSUMED}
        turn = _Turn(meta=meta, waiting_since=self._clock(), first_input_at=self._clock())
        self._turns[request_id] = turn
        self._ingest(turn, inputs)

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        turn = self._turns.get(request_id)
        if turn is None:
            raise KeyError(f"unknown asr request {request_id!r}")
        if turn.final:
            raise ValueError(f"asr request {request_id!r} already ended its input")
        turn.meta.update({k: v for k, v in inputs.data.items() if k not in _CONSUMED})
        self._ingest(turn, inputs)

    def _ingest(self, turn: _Turn, inputs: StageInput) -> None:
        turn.live = turn.live or bool(inputs.data.get("live"))
        turn.transcribe_only = turn.transcribe_only or bool(inputs.data.get("transcribe_only"))
        turn.logprobs = turn.logprobs or bool(inputs.data.get("logprobs"))
        if isinstance(inputs.data.get("draft"), Mapping):
            turn.draft = {k: v for k, v in inputs.data["draft"].items() if k != "audio"}
        audio = inputs.data.get("audio")
        if audio is not None:
            samples = np.asarray(audio, dtype=np.float32).reshape(-1)
            rate = int(inputs.data.get("sample_rate_hz") or self.options.input_rate_hz)
            if rate != self.options.input_rate_hz and samples.size:
                samples = soxr.resample(samples, rate, self.options.input_rate_hz, "HQ")
            if samples.size and not np.isfinite(samples).all():
                raise ValueError("asr audio contains NaN or infinite samples")
            if samples.size:
                turn.pending.append(samples)
                turn.pending_samples += samples.size
                turn.samples_received += samples.size
        if inputs.final:
            turn.final = True
            turn.final_at = self._clock()
            if turn.live:
                turn.waiting_since = turn.final_at

    def abort(self, request_id: str) -> None:
        turn = self._turns.pop(request_id, None)
        if turn is not None:
            self._give_back(turn)

    def close(self) -> None:
        for request_id in list(self._turns):
            self.abort(request_id)
        self.pool.close()

    def _give_back(self, turn: _Turn) -> None:
        decoder, turn.decoder = turn.decoder, None
        if decoder is None:
            return
        if turn.started:
            try:
                decoder.end_utt()
            except Exception:
                return  # a decoder in an unknown state is dropped, not reused
        self.pool.release(decoder)

    # ---- readiness ----------------------------------------------------------------

    def _needs_decoder(self, turn: _Turn) -> bool:
        return turn.decoder is None and turn.pending_samples > 0

    def _trim(self, turn: _Turn) -> None:
        """Drop what comes before the speech (a commit holds everything since the last
        one: silence, noise, the assistant's echo), keeping ``asr_trim_pad_ms``."""
        if self._vad is None or turn.started or not turn.final or not turn.pending_samples:
            return
        if turn.live:
            return  # the engine fed it from the speech onset already
        audio = np.concatenate(turn.pending)
        onset = speech_onset(audio, self._vad)
        kept = audio[max(0, onset - self._pad) :] if onset is not None else audio[:0]
        turn.pending = [kept] if kept.size else []
        turn.pending_samples = kept.size

    def _ready(self, turn: _Turn) -> bool:
        if turn.pending_samples == 0 and not turn.final:
            return False
        if not turn.final and turn.live and turn.pending_samples < self._partial_chunk:
            return False  # decode a live utterance in pieces, not append by append
        if self._needs_decoder(turn):
            # Ready if a decoder can be had, or its wait is over (it fails in step).
            can = self.pool.in_use < self.pool.size
            if not self._waits_for_decoder(turn):
                return can
            waited = self._clock() - turn.waiting_since >= self.options.asr_wait_s
            return can or waited
        return True

    def _waits_for_decoder(self, turn: _Turn) -> bool:
        """Needs a decoder and is on the clock for one (a live turn only once it ended)."""
        return self._needs_decoder(turn) and (turn.final or not turn.live)

    def ready_request_ids(self) -> list[str]:
        return [rid for rid, turn in self._turns.items() if self._ready(turn)]

    def wake_after_s(self) -> float | None:
        waits = [
            turn.waiting_since + self.options.asr_wait_s - self._clock()
            for turn in self._turns.values()
            if self._waits_for_decoder(turn)
        ]
        return max(0.0, min(waits)) if waits else None

    # ---- stepping -----------------------------------------------------------------

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        outputs: list[StageOutput] = []
        for request_id in request_ids:
            turn = self._turns.get(request_id)
            if turn is None or not self._ready(turn):
                continue
            outputs.extend(self._advance(request_id, turn))
        return outputs

    def _advance(self, request_id: str, turn: _Turn) -> list[StageOutput]:
        started = self._clock()
        self._trim(turn)
        if self._needs_decoder(turn):
            turn.decoder = self.pool.try_acquire()
            if turn.decoder is None:
                del self._turns[request_id]
                message = (
                    f"all {self.pool.size} speech recognisers are busy "
                    f"(waited {self.options.asr_wait_s:g}s); try again"
                )
                data = {**turn.meta, "kind": "error", "code": "asr_pool_exhausted"}
                data["message"] = message
                owner = turn.transcribe_only
                return [self.output(request_id, data, finished=True, to_owner=owner)]
        decoder = turn.decoder
        if turn.pending_samples:
            if not turn.started:
                decoder.start_utt()
                turn.started = True
            audio = np.concatenate(turn.pending)
            # A live utterance is decoded in hypothesis-sized pieces, however its audio
            # arrived, so the hypotheses (and the deltas two of them let out) depend on
            # what was said, not on how far behind a loaded machine let the stage fall.
            size = self._partial_chunk if turn.live and not turn.final else self._chunk
            chunk, rest = audio[:size], audio[size:]
            turn.pending = [rest] if rest.size else []
            turn.pending_samples = rest.size
            decoder.process_raw(_pcm16(chunk, self.options.asr_dither, self._rng), False, False)
            turn.samples_decoded += chunk.size
        if not turn.final or turn.pending_samples:
            outputs = []
            partial = self._partial(turn) if turn.live else None
            if partial is not None:
                data = {"kind": "partial_transcript", "transcript": partial}
                if turn.logprobs:
                    data["logprobs"] = self._word_logprobs(decoder, partial)
                outputs.append(self.output(request_id, data, to_owner=True))
            draft = self._draft(turn)
            if draft is not None:
                outputs.append(self.output(request_id, draft))
            turn.decode_s += self._clock() - started
            return outputs
        text = ""
        if turn.started:
            decoder.end_utt()
            turn.started = False
            hyp = decoder.hyp()
            text = self._transcript(hyp.hypstr) if hyp is not None else ""
        logprobs = self._word_logprobs(decoder, text) if turn.logprobs and text else None
        self._give_back(turn)
        del self._turns[request_id]
        done = self._clock()
        turn.decode_s += done - started
        audio_s = turn.samples_decoded / self.options.input_rate_hz
        trace = dict(turn.meta.get("trace") or {})
        trace.update(
            {
                "asr_audio_s": audio_s,
                "asr_compute_s": turn.decode_s,
                "asr_finalise_s": done - (turn.final_at or done),
                "asr_done_at": done,
            }
        )
        data = {
            **turn.meta,
            "kind": "transcript",
            "transcript": text,
            "heard_audio": turn.samples_decoded > 0,
            **({"logprobs": logprobs} if logprobs is not None else {}),
            "input_audio_s": turn.samples_received / self.options.input_rate_hz,
            "trace": trace,
        }
        return [self.output(request_id, data, finished=True, to_owner=turn.transcribe_only)]

    def _draft(self, turn: _Turn) -> dict[str, Any] | None:
        """A draft for the responder: the pause's text, if it is new."""
        settled = getattr(turn.decoder, "settled", False)
        if turn.draft is None or turn.final or not turn.started or not settled:
            return None  # (after the final input the transcript itself is near)
        hyp = turn.decoder.hyp()
        text = self._transcript(hyp.hypstr) if hyp is not None else ""
        if not text or text == turn.drafted:
            return None
        turn.drafted = text
        return {**turn.draft, "kind": "draft", "transcript": text, "heard_audio": True}

    def _word_logprobs(self, decoder: Any, text: str) -> list[dict[str, Any]]:
        """Each word of ``text`` with the natural log of its posterior (pocketsphinx's
        segments of the best path; fillers and silences are not words), spelled as in
        the transcript: a space before every word but the first."""
        posteriors = [
            (word, seg.prob)
            for seg in decoder.seg()
            if (word := normalise_sentence(re.sub(r"\(\d+\)$", "", seg.word)))
            and not seg.word.startswith(("<", "[", "+"))
        ]
        out = []
        for index, word in enumerate(text.split()):
            # pocketsphinx's log arithmetic can round a sure word's posterior past 1.
            prob = min(1.0, posteriors[index][1]) if index < len(posteriors) else 0.0
            token = word if index == 0 else " " + word
            out.append(
                {
                    "token": token,
                    "logprob": math.log(prob) if prob > 0 else _LN_SMALLEST,
                    "bytes": list(token.encode("utf-8")),
                }
            )
        return out

    def _transcript(self, hypothesis: str) -> str:
        """pocketsphinx's words as the grammar spells them; Whisper's text as it wrote it
        (cased and punctuated, as OpenAI's transcripts are)."""
        if self.engine == "whisper":
            return " ".join(hypothesis.split())
        return normalise_sentence(hypothesis)

    def _partial(self, turn: _Turn) -> str | None:
        """The utterance's hypothesis so far, if it changed since the last one reported."""
        hyp = turn.decoder.hyp() if turn.started else None
        text = self._transcript(hyp.hypstr) if hyp is not None else ""
        if not text or text == turn.last_partial:
            return None
        turn.last_partial = text
        return text
