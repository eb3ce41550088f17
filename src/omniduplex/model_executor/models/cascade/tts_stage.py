"""Stage 2: a voice speaks the reply sentence by sentence, as the text streams in.

Reply text pieces accumulate until a sentence is complete (``sentences.py``) or the reply
ends; each sentence is synthesised in one ``step`` (espeak-ng runs about 500x real time,
the piper neural voice about 30x; ``CascadeOptions.tts`` picks one), resampled with soxr
to the output rate and cut into ``unit_ms`` units, each carrying its share of the
sentence's words. The last unit is held back until the next sentence or the end of the
reply arrives, so the final unit can say ``end_of_turn``. Text-only responses skip
synthesis and hand out the sentences as text.

A reply that has not spoken yet goes before the sentences of replies already speaking
(``step``), a confirmed one before a draft. A ``kind: draft`` marker makes a draft of what
follows (the responder's ``draft_replies``): the speech so far is forgotten, only the first
sentence is voiced, and every output is held until the transcript arrives (which confirms
the draft: the transcript goes out, then all that was held). Aborting a request (barge-in)
drops it; a synthesis in flight stops at its next 40 ms chunk (the espeak callback returns
1), or after piper's current piece.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr

from omniduplex.engine.stage import StageInput, StageModel, StageOutput
from omniduplex.engine.stage.tasks import SPEECH

from .engines import tts_engine
from .options import CascadeOptions
from .sentences import split_sentences
from .tts import EspeakVoice
from .voice import SpeechVoice, SpeechVoiceError

# Speaking rates a request's ``speed`` may reach (espeak-ng's usable range).
MIN_RATE_WPM, MAX_RATE_WPM = 80, 450


def spread_words(text: str, units: int) -> list[str]:
    """``units`` pieces that concatenate to ``text``; words lead the audio slightly."""
    words = text.split()
    if units <= 0:
        return []
    if not words:
        return [""] * units
    bounds = [-(-k * len(words) // units) for k in range(units + 1)]
    groups = [" ".join(words[bounds[k] : bounds[k + 1]]) for k in range(units)]
    last = max((k for k, group in enumerate(groups) if group), default=-1)
    return [group + " " if group and k < last else group for k, group in enumerate(groups)]


@dataclass(slots=True)
class _Speech:
    meta: dict[str, Any]
    buffer: str = ""
    sentences: deque[str] = field(default_factory=deque)
    passthrough: deque[dict[str, Any]] = field(default_factory=deque)
    # Tool call pieces that came after speech not yet spoken: they wait for it, so the
    # session sees "let me check" before the call, as it was said.
    after_speech: deque[dict[str, Any]] = field(default_factory=deque)
    final: bool = False
    held: dict[str, Any] | None = None
    spoken_sentences: int = 0
    cancelled: threading.Event = field(default_factory=threading.Event)
    started_at: float = 0.0
    first_audio_at: float | None = None
    synth_s: float = 0.0
    audio_s: float = 0.0
    drafting: bool = False
    withheld: list[dict[str, Any]] = field(default_factory=list)  # a draft's outputs

    def redraft(self) -> None:
        """Forget everything so far: a new draft (or the answer) follows."""
        self.buffer = ""
        self.sentences.clear()
        self.passthrough.clear()
        self.after_speech.clear()
        self.withheld.clear()
        self.final = False
        self.held = None
        self.spoken_sentences = 0
        self.first_audio_at = None
        self.synth_s = self.audio_s = 0.0
        self.drafting = True


class TtsStageModel(StageModel):
    """espeak-ng voices (serialised: the library is global) or one piper voice;
    ``CascadeOptions`` keywords.

    Also serves the ``speech`` stage task (``/v1/audio/speech``): a request's ``speed``
    scales ``speech_rate_wpm`` (within what the voices can do), and every audio unit
    says its ``sample_rate_hz``.
    """

    tasks = frozenset({SPEECH})

    def __init__(
        self,
        options: CascadeOptions | Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        **settings: Any,
    ) -> None:
        self.options = CascadeOptions.coerce(options, settings)
        self._clock = clock
        self.engine, _ = tts_engine(self.options)  # piper, or espeak when piper cannot run
        self.default_voice = self._build_voice(self.options.voice, self.options.speech_rate_wpm)
        self._voices: dict[tuple[str, int], SpeechVoice] = {
            (self.options.voice, self.options.speech_rate_wpm): self.default_voice
        }
        self._speech: dict[str, _Speech] = {}
        self.sentences_spoken = 0

    @property
    def open_requests(self) -> int:
        return len(self._speech)

    # ---- requests -----------------------------------------------------------------

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        speech = _Speech(meta={}, started_at=self._clock())
        self._speech[request_id] = speech
        self._ingest(speech, inputs)

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        speech = self._speech.get(request_id)
        if speech is None:
            raise KeyError(f"unknown tts request {request_id!r}")
        self._ingest(speech, inputs)

    def _ingest(self, speech: _Speech, inputs: StageInput) -> None:
        data = dict(inputs.data)
        kind = data.get("kind")
        for key in ("response_id", "with_audio", "voice", "speed"):
            if key in data:
                speech.meta[key] = data[key]
        if "trace" in data:
            speech.meta["trace"] = dict(data["trace"] or {})
        if kind == "draft":
            speech.redraft()
            return
        if kind == "transcript" and speech.drafting:
            speech.drafting = False  # confirmed: the transcript, then what was held
            response = {"response_id": speech.meta.get("response_id")}
            speech.passthrough.append(data)
            speech.passthrough.extend({**unit, **response} for unit in speech.withheld)
            speech.withheld.clear()
            if speech.held is not None:
                speech.held.update(response)
            speech.final = speech.final or inputs.final
            return
        if kind == "reply":
            speech.buffer += str(data.get("text") or "")
            final = bool(data.get("final")) or inputs.final
            first = speech.spoken_sentences == 0 and not speech.sentences
            sentences, speech.buffer = split_sentences(
                speech.buffer, final=final, first_phrase=first
            )
            speech.sentences.extend(sentences)
            speech.final = speech.final or final
        elif kind in ("listen", "error"):
            speech.passthrough.append(data)
            speech.final = True
        elif kind == "tool_call" and (speech.buffer or speech.sentences or speech.after_speech):
            # A call ends what was being said: its last words are a sentence now.
            sentences, speech.buffer = split_sentences(speech.buffer, final=True)
            speech.sentences.extend(sentences)
            speech.after_speech.append(data)
            speech.final = speech.final or inputs.final
        else:
            speech.passthrough.append(data)
            speech.final = speech.final or inputs.final

    def abort(self, request_id: str) -> None:
        speech = self._speech.pop(request_id, None)
        if speech is not None:
            speech.cancelled.set()

    def close(self) -> None:
        for request_id in list(self._speech):
            self.abort(request_id)

    # ---- readiness ----------------------------------------------------------------

    def _ready(self, speech: _Speech) -> bool:
        if speech.drafting:
            return bool(speech.sentences) and speech.spoken_sentences == 0
        return bool(speech.passthrough or speech.sentences or speech.after_speech or speech.final)

    def ready_request_ids(self) -> list[str]:
        return [rid for rid, speech in self._speech.items() if self._ready(speech)]

    # ---- stepping -----------------------------------------------------------------

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        """One sentence per request; but while some reply has yet to say its first words,
        only those replies speak this step: a reply already speaking is seconds ahead of
        its listener, a new one keeps its user waiting (and a step's outputs leave only
        when the whole step is done). Among those, answers go before drafts."""
        ready = [(rid, s) for rid in request_ids if (s := self._speech.get(rid)) and self._ready(s)]
        first_words = [(rid, s) for rid, s in ready if s.sentences and s.spoken_sentences == 0]
        answers = [(rid, s) for rid, s in first_words if not s.drafting]
        if answers or first_words:
            ready = (answers or first_words) + [(rid, s) for rid, s in ready if not s.sentences]
        outputs: list[StageOutput] = []
        for request_id, speech in ready:
            advanced = self._advance(request_id, speech)
            if speech.drafting:
                speech.withheld.extend(output.data for output in advanced)
            else:
                outputs.extend(advanced)
        return outputs

    def _advance(self, request_id: str, speech: _Speech) -> list[StageOutput]:
        outputs: list[StageOutput] = []
        while speech.passthrough:
            data = speech.passthrough.popleft()
            if data.get("kind") in ("listen", "error"):
                # Ends the response; whatever audio was held back is moot.
                del self._speech[request_id]
                outputs.append(self.output(request_id, data, finished=True))
                return outputs
            outputs.append(self.output(request_id, data))
        if outputs and speech.sentences:
            # What passes through (the user's transcript) leaves now, not after this
            # step's synthesis; the sentence is spoken in the next step.
            return outputs
        if speech.sentences:
            # One sentence per step, so several sessions' replies interleave.
            sentence = speech.sentences.popleft()
            for unit in self._speak(speech, sentence):
                if speech.held is not None:
                    outputs.append(self.output(request_id, speech.held))
                speech.held = unit
        if speech.after_speech and not speech.sentences:
            # What was said before the calls is out, but for its last unit, which stays
            # held to carry the reply's end: now the calls.
            while speech.after_speech:
                outputs.append(self.output(request_id, speech.after_speech.popleft()))
        if speech.final and not speech.sentences:
            del self._speech[request_id]
            if speech.held is None:
                data = {**self._base(speech), "kind": "listen", "reason": "empty_reply"}
                outputs.append(self.output(request_id, data, finished=True))
            else:
                last = {**speech.held, "end_of_turn": True}
                trace = dict(speech.meta.get("trace") or {})
                trace["tts_synth_s"] = speech.synth_s
                trace["tts_audio_s"] = speech.audio_s
                last["trace"] = trace
                outputs.append(self.output(request_id, last, finished=True))
        return outputs

    def _base(self, speech: _Speech) -> dict[str, Any]:
        return {"response_id": speech.meta.get("response_id")}

    def _build_voice(self, name: str, rate_wpm: int) -> SpeechVoice:
        options = self.options
        if self.engine == "piper":
            from .piper_voice import PiperSpeechVoice

            return PiperSpeechVoice(options.piper_model, rate_wpm=rate_wpm)
        return EspeakVoice(name, rate_wpm=rate_wpm, pitch=options.pitch)

    def _rate_wpm(self, speed: Any) -> int:
        if not isinstance(speed, int | float) or isinstance(speed, bool) or speed <= 0:
            return self.options.speech_rate_wpm
        wpm = round(self.options.speech_rate_wpm * speed)
        return min(MAX_RATE_WPM, max(MIN_RATE_WPM, wpm))

    def _voice(self, name: Any, speed: Any = None) -> SpeechVoice:
        rate = self._rate_wpm(speed)
        if not isinstance(name, str) or not name or self.engine == "piper":
            name = self.options.voice  # a piper model has one voice
        voice = self._voices.get((name, rate))
        if voice is None:
            try:
                voice = self._build_voice(name, rate)
            except SpeechVoiceError:
                if name == self.options.voice:
                    raise
                # OpenAI voice names ("alloy") and typos: the deployment's voice.
                voice = self._voice(self.options.voice, speed)
            self._voices[(name, rate)] = voice
        return voice

    def _speak(self, speech: _Speech, sentence: str) -> list[dict[str, Any]]:
        text = sentence if speech.spoken_sentences == 0 else " " + sentence
        speech.spoken_sentences += 1
        self.sentences_spoken += 1
        base = self._base(speech)
        if not speech.meta.get("with_audio", True):
            return [{**base, "kind": "text", "text": text}]
        started = self._clock()
        voice = self._voice(speech.meta.get("voice"), speech.meta.get("speed"))
        raw = voice.synthesize(sentence, should_stop=speech.cancelled.is_set)
        samples = raw
        if voice.sample_rate_hz != self.options.output_rate_hz and raw.size:
            samples = soxr.resample(raw, voice.sample_rate_hz, self.options.output_rate_hz, "HQ")
        samples = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
        done = self._clock()
        speech.synth_s += done - started
        speech.audio_s += samples.size / self.options.output_rate_hz
        if speech.first_audio_at is None:
            speech.first_audio_at = done
            trace = dict(speech.meta.get("trace") or {})
            trace["tts_first_audio_s"] = done - started
            trace["tts_first_audio_at"] = done
            speech.meta["trace"] = trace
        unit = self.options.unit_samples
        chunks = [samples[i : i + unit] for i in range(0, samples.size, unit)] or [
            np.zeros(0, dtype=np.float32)
        ]
        texts = spread_words(text, len(chunks))
        if text.startswith(" ") and texts and not texts[0].startswith(" "):
            texts[0] = " " + texts[0]
        return [
            {
                **base,
                "kind": "audio",
                "audio": chunk,
                "text": piece,
                "end_of_turn": False,
                "sample_rate_hz": self.options.output_rate_hz,
            }
            for chunk, piece in zip(chunks, texts, strict=True)
        ]
