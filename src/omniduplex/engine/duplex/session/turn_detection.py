"""Server-side turn detection (``server_vad`` and ``semantic_vad``), in audio time.

Silence is measured by counting samples, never by the wall clock: a client that sends
audio faster or slower than real time gets the same turns. The frame classifier is a
seam: the default is an energy detector; a model can provide a neural one (Silero).

``server_vad``: the turn ends after ``silence_duration_ms`` of silence.

``semantic_vad`` with a turn-completion model (a second seam, ``TurnCompletionModel``):
after a short silence (``SEMANTIC_CANDIDATE_SILENCE_MS``, a candidate end of speech) the
model scores the turn's audio. A turn that sounds complete ends there; one that sounds
unfinished keeps waiting: speech that resumes continues the same turn (and is scored
again at its next pause), and a silence that reaches the eagerness's maximum
(``SEMANTIC_MAX_SILENCE_MS``: low 8 s, medium and auto 4 s, high 2 s, OpenAI's values)
ends the turn anyway. Where the model transcribes while the user speaks, the words decide
too (``words_verdict``): words that stop where a sentence cannot end keep the turn open
however finished the audio sounds, and words the recogniser closed as a sentence (".",
"?", "!") that the audio calls unfinished wait only half the maximum.

``semantic_vad`` without a model (the plugin declares none) is served as ``server_vad``
with ``silence_duration_ms`` = the eagerness's maximum / 8 (``SEMANTIC_FALLBACK_SILENCE_MS``:
low 1000, medium and auto 500 ms, OpenAI's server_vad default, high 250 ms), and the
session object says so (``served_turn_detection``).

The detector's clock is the session's input clock (samples appended since the session
opened): whoever resets or replaces it says where that clock stands, so offsets stay true
after commits, clears and a ``session.update`` mid-stream.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from ..vad import (
    EnergyClassifier,
    SpeechClassifier,
    TranscriptCompletionModel,
    TurnCompletionModel,
)
from .end_of_turn import (
    FINISHED,
    PROSODY_THRESHOLD,
    SEMANTIC_CANDIDATE_SILENCE_MS,
    SEMANTIC_MAX_SILENCE_MS,
    UNFINISHED,
    TurnInputs,
    decide,
    words_verdict,
)
from .end_of_turn import (
    NEVER_LAST_WORDS as NEVER_LAST_WORDS,
)
from .end_of_turn import (
    UNFINISHED_LAST_WORDS as UNFINISHED_LAST_WORDS,
)
from .end_of_turn import (
    UNKNOWN as UNKNOWN,
)

SEMANTIC_VAD: Final = "semantic_vad"
# Without a turn model: a fixed silence, the same fraction of each maximum.
SEMANTIC_FALLBACK_SILENCE_MS: Final[Mapping[str, int]] = {
    eagerness: wait // 8 for eagerness, wait in SEMANTIC_MAX_SILENCE_MS.items()
}
# semantic_vad's speech held over the assistant's reply ends after this much silence (as
# under OpenAI's server_vad default), the turn model unasked: a 200 ms pause inside an
# interruption ("Wait, sorry, ...") must not end it as a backchannel.
HELD_SPEECH_SILENCE_MS: Final = 500
# A turn-completion probability at or above this ends the turn.
COMPLETION_THRESHOLD: Final = PROSODY_THRESHOLD
# Where the model transcribes while the user speaks: how long past the candidate silence
# the verdict waits for a hypothesis of the words before the pause.
SEMANTIC_WORDS_WAIT_MS: Final = 300


def sounds_unfinished(words: str) -> bool:
    """The transcript stops where a sentence cannot end."""
    return words_verdict(words) == UNFINISHED


def _eagerness(config: Mapping[str, Any]) -> str:
    value = config.get("eagerness")
    return value if value in SEMANTIC_MAX_SILENCE_MS else "auto"


def is_semantic(config: Mapping[str, Any] | None) -> bool:
    return config is not None and config.get("type") == SEMANTIC_VAD


def served_turn_detection(
    config: Mapping[str, Any] | None, *, semantic_supported: bool
) -> dict[str, Any] | None:
    """The turn detection a session object reports: the client's, plus how it is served.

    ``semantic_vad`` on a plugin without a turn-completion model gains
    ``served_as: {type: server_vad, silence_duration_ms, ...}`` (an extra key OpenAI's SDK
    models keep), so a client can see that turns end by silence alone.
    """
    if config is None:
        return None
    out = dict(config)
    if is_semantic(config) and not semantic_supported:
        out["served_as"] = {
            "type": "server_vad",
            "silence_duration_ms": SEMANTIC_FALLBACK_SILENCE_MS[_eagerness(config)],
            "reason": "this model has no turn-completion model; silence ends the turn",
        }
    return out


@dataclass(frozen=True, slots=True)
class TurnEvent:
    kind: str  # "started" | "stopped"
    audio_ms: int  # started: the turn's start (prefix padding included); stopped: speech end
    onset_ms: int | None = None  # started: where the speech itself began (no padding)


@dataclass(frozen=True, slots=True)
class TurnDecision:
    """One verdict of the turn model at a candidate end of speech (for stats and tests)."""

    audio_ms: int  # where the speech paused (the session's input clock)
    probability: float  # the prosody model's P(complete)
    complete: bool  # the verdict is "finished": the turn ends at the short silence
    words: str | None = None  # the transcript the verdict saw (None: none is made)
    semantic: float | None = None  # the language model's P(finished) (None: not asked)
    verdict: str = ""  # "finished" | "ambiguous" | "unfinished" (``end_of_turn.decide``)
    wait_ms: int = 0  # the silence after which the turn ends unless speech resumes
    # Once the pause is over: "ended" (the turn ended) or "resumed" (speech came back),
    # after ``silence_ms`` of silence.
    outcome: str = ""
    silence_ms: int = 0


@dataclass(frozen=True, slots=True)
class SemanticPolicy:
    """How ``semantic_vad`` ends a turn: after ``candidate_silence_ms`` ask ``model`` (the
    audio) and ``words_model`` (the words, where one is loaded), and let
    ``end_of_turn.decide`` say how long the turn waits (at most ``max_silence_ms``)."""

    model: TurnCompletionModel
    max_silence_ms: int
    eagerness: str = "auto"
    words_model: TranscriptCompletionModel | None = None
    candidate_silence_ms: int = SEMANTIC_CANDIDATE_SILENCE_MS
    words_wait_ms: int = SEMANTIC_WORDS_WAIT_MS

    @classmethod
    def for_eagerness(
        cls,
        model: TurnCompletionModel,
        eagerness: str,
        words_model: TranscriptCompletionModel | None = None,
    ) -> SemanticPolicy:
        return cls(
            model=model,
            max_silence_ms=SEMANTIC_MAX_SILENCE_MS[eagerness],
            eagerness=eagerness,
            words_model=words_model,
        )


class TurnDetector:
    """Finds speech start and end in a stream of samples at one rate."""

    def __init__(
        self,
        *,
        rate_hz: int,
        threshold: float = 0.5,
        prefix_padding_ms: int = 300,
        silence_duration_ms: int = 500,
        min_speech_duration_ms: int = 60,
        classifier: SpeechClassifier | None = None,
        position_samples: int = 0,
        semantic: SemanticPolicy | None = None,
    ) -> None:
        self.rate_hz = rate_hz
        self.threshold = threshold
        self.prefix_padding_ms = prefix_padding_ms
        self.silence_duration_ms = silence_duration_ms
        self.min_speech_duration_ms = min_speech_duration_ms
        self.classifier = classifier or EnergyClassifier()
        self.semantic = semantic
        # Set by the session while the speech is held over the assistant's reply: the
        # turn ends by silence alone (``HELD_SPEECH_SILENCE_MS`` at least under
        # semantic_vad), the turn model unasked.
        self.by_silence_only = False
        self.decisions: list[TurnDecision] = []
        # Decisions whose pause is over, for whoever reports them (``resolved_decisions``).
        self._resolved: deque[TurnDecision] = deque()
        self._open_decision: TurnDecision | None = None
        self._frame = rate_hz * self.classifier.frame_ms // 1000
        self._pending = np.zeros(0, dtype=np.float32)
        self._position = position_samples  # samples consumed: the session's input clock
        self._speaking = False
        self._speech_run = 0
        self._silence_run = 0
        self._onset = 0  # where the current turn's speech began (samples)
        # semantic_vad: the turn's recent audio (what the model hears) and whether the
        # current pause was already scored.
        self._turn_frames: deque[np.ndarray] = deque()
        self._turn_samples = 0
        self._judged = False
        self._pause_limit_ms: int | None = None  # the judged pause's longest silence
        # The words heard so far (hypotheses count, last one), set by whoever feeds the
        # detector where the model transcribes while the user speaks; the count when
        # the last speech frame went by (a newer hypothesis has heard the pause).
        self.words: tuple[int, str] | None = None
        self._words_at_speech = 0

    @classmethod
    def from_settings(
        cls,
        settings: Any,
        rate_hz: int,
        classifier_factory: Callable[[], SpeechClassifier | None] | None = None,
        *,
        position_samples: int = 0,
        completion_model: TurnCompletionModel | None = None,
    ) -> TurnDetector | None:
        """The detector a session's ``turn_detection`` asks for (``None`` when off).

        ``semantic_vad`` uses ``completion_model`` when the plugin has one, else it is
        served as server VAD with the eagerness's fallback silence.
        """
        config = getattr(settings, "turn_detection", None)
        if not config:
            return None
        silence_ms = int(config.get("silence_duration_ms", 500))
        semantic = None
        if is_semantic(config):
            eagerness = _eagerness(config)
            silence_ms = SEMANTIC_FALLBACK_SILENCE_MS[eagerness]
            if completion_model is not None:
                words_model = completion_model.words_model
                if words_model is not None:
                    words_model.warm()
                semantic = SemanticPolicy.for_eagerness(completion_model, eagerness, words_model)
        return cls(
            rate_hz=rate_hz,
            threshold=float(config.get("threshold", 0.5)),
            prefix_padding_ms=int(config.get("prefix_padding_ms", 300)),
            silence_duration_ms=silence_ms,
            min_speech_duration_ms=int(config.get("min_speech_duration_ms", 60)),
            classifier=classifier_factory() if classifier_factory else None,
            position_samples=position_samples,
            semantic=semantic,
        )

    @property
    def speaking(self) -> bool:
        return self._speaking

    @property
    def speech_extent_ms(self) -> int:
        """While speaking: from the turn's speech onset to its last speech frame so far
        (pauses inside the turn included, the silence after its last frame not)."""
        if not self._speaking:
            return 0
        return self._ms(max(0, self._position - self._silence_run - self._onset))

    def _ms(self, samples: int) -> int:
        return int(samples * 1000 // self.rate_hz)

    @property
    def runs_a_model(self) -> bool:
        """Whether processing audio may call a model (a neural classifier, or a
        turn-completion model at a candidate end of speech)."""
        return self.semantic is not None or self.classifier.runs_a_model

    def process(self, samples: np.ndarray) -> list[TurnEvent]:
        events: list[TurnEvent] = []
        buffer = np.concatenate((self._pending, samples)) if self._pending.size else samples
        frames = buffer.size // self._frame
        for index in range(frames):
            frame = buffer[index * self._frame : (index + 1) * self._frame]
            self._position += self._frame
            if self.semantic is not None:
                self._remember(frame)
            is_speech = self.classifier.probability(frame) >= self.threshold
            if is_speech:
                self._resolve("resumed")
                self._speech_run += self._frame
                self._silence_run = 0
                self._judged = False
                self._pause_limit_ms = None
                self._words_at_speech = self.words[0] if self.words is not None else 0
                if not self._speaking and self._ms(self._speech_run) >= self.min_speech_duration_ms:
                    self._speaking = True
                    onset = self._position - self._speech_run
                    self._onset = onset
                    start_ms = max(0, self._ms(onset) - self.prefix_padding_ms)
                    self._trim_to_turn(self._speech_run)
                    events.append(TurnEvent("started", start_ms, self._ms(onset)))
            else:
                self._silence_run += self._frame
                if not self._speaking:
                    self._speech_run = 0
                elif self._turn_ends():
                    self._resolve("ended")
                    self._speaking = False
                    self._speech_run = 0
                    end = self._position - self._silence_run
                    self._forget_turn()
                    events.append(TurnEvent("stopped", self._ms(end)))
        self._pending = buffer[frames * self._frame :].copy()
        return events

    def _turn_ends(self) -> bool:
        """In a pause of a turn: does the turn end at this frame?"""
        silence_ms = self._ms(self._silence_run)
        policy = self.semantic
        if policy is None:
            return silence_ms >= self.silence_duration_ms
        if self.by_silence_only:
            return silence_ms >= max(self.silence_duration_ms, HELD_SPEECH_SILENCE_MS)
        if silence_ms >= (self._pause_limit_ms or policy.max_silence_ms):
            return True
        if self._judged or silence_ms < policy.candidate_silence_ms:
            return False
        words = self.words
        if (
            words is not None
            and words[0] <= self._words_at_speech
            and silence_ms < policy.candidate_silence_ms + policy.words_wait_ms
        ):
            return False  # no hypothesis has heard the pause yet: wait for one
        self._judged = True
        audio = np.concatenate(tuple(self._turn_frames))
        probability = float(policy.model.completion_probability(audio, self.rate_hz))
        heard = words[1] if words is not None else None
        semantic = None
        if policy.words_model is not None and heard and words_verdict(heard) != UNFINISHED:
            semantic = policy.words_model.finished_probability(heard)
        verdict = decide(TurnInputs(policy.eagerness, probability, heard, semantic))
        wait_ms = min(verdict.wait_ms, policy.max_silence_ms)
        self._pause_limit_ms = wait_ms
        pause_ms = self._ms(self._position - self._silence_run)
        complete = verdict.verdict == FINISHED
        decision = TurnDecision(
            pause_ms, probability, complete, heard, semantic, verdict.verdict, wait_ms
        )
        self.decisions.append(decision)
        self._open_decision = decision
        return silence_ms >= wait_ms

    def _resolve(self, outcome: str) -> None:
        decision, self._open_decision = self._open_decision, None
        if decision is not None:
            silence_ms = self._ms(self._silence_run)
            self._resolved.append(replace(decision, outcome=outcome, silence_ms=silence_ms))

    def resolved_decisions(self) -> Iterator[TurnDecision]:
        """The decisions whose pause ended since the last call, oldest first (safe while
        another thread feeds the detector)."""
        while self._resolved:
            yield self._resolved.popleft()

    # ---- the turn's audio (semantic_vad only) ----------------------------------

    def _remember(self, frame: np.ndarray) -> None:
        assert self.semantic is not None
        self._turn_frames.append(frame.copy())
        self._turn_samples += frame.size
        limit = self.rate_hz * self.semantic.model.max_audio_ms // 1000
        while self._turn_samples - self._turn_frames[0].size >= limit:
            self._turn_samples -= self._turn_frames.popleft().size

    def _trim_to_turn(self, speech_samples: int) -> None:
        # At speech start: keep the speech so far and the padding before it, as the turn.
        keep = speech_samples + self.rate_hz * self.prefix_padding_ms // 1000
        while self._turn_frames and self._turn_samples - self._turn_frames[0].size >= keep:
            self._turn_samples -= self._turn_frames.popleft().size

    def _forget_turn(self) -> None:
        self._open_decision = None
        self._turn_frames.clear()
        self._turn_samples = 0
        self._judged = False
        self._pause_limit_ms = None

    def reset(self, position_samples: int | None = None) -> None:
        """Forget the turn; the clock moves to ``position_samples`` (default: past the
        samples held back for an incomplete frame, which are dropped but did elapse)."""
        if position_samples is None:
            position_samples = self._position + self._pending.size
        self._position = position_samples
        self._pending = np.zeros(0, dtype=np.float32)
        self._speaking = False
        self._speech_run = 0
        self._silence_run = 0
        self._words_at_speech = 0
        self._forget_turn()
        self.classifier.reset()
