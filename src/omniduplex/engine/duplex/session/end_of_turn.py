"""``semantic_vad``'s end-of-turn decision: inputs in, verdict and wait out.

At a candidate end of speech (a short silence) three signals are at hand: the words the
recogniser heard so far, the prosody model's probability that the turn sounds complete
(Smart Turn, from the audio) and, where a language model is loaded, the probability that
the words so far are a finished turn (``semantic``, from the text). ``decide`` turns them
into one verdict and the silence the turn waits before it ends, with OpenAI's eagerness
semantics: a confident ``finished`` ends at the short silence, an ``ambiguous`` one waits
longer, an ``unfinished`` one waits up to the eagerness's maximum. Speech that resumes
during the wait continues the same turn whatever the verdict.

Without a language model (``semantic`` is ``None``) the rule is the one ``semantic_vad``
had before it: the prosody model decides, words that stop where no sentence ends keep
the turn open, and words the recogniser closed as a sentence that the audio calls
unfinished wait half the maximum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ..vad import TranscriptCompletionModel as TranscriptCompletionModel

AMBIGUOUS: Final = "ambiguous"
# Words no sentence ends on, whatever punctuation the recogniser put after them: articles,
# possessives, conjunctions, "to", fillers. Whisper closes a fragment the piper voice
# speaks as if it were whole ("Can you tell me the way to?", "I need to buy some.").
NEVER_LAST_WORDS: Final = frozenset(
    (
        *("a", "an", "the", "my", "your", "his", "her", "its", "our", "their", "some"),
        *("and", "or", "but", "nor", "because", "if", "when", "while", "until", "unless"),
        *("although", "though", "whether", "very", "to"),
        *("um", "uh", "er", "erm"),
    )
)
# Words a statement does not end on but a question may ("What is it for?", "Who are you
# with?"): prepositions that take an object and a few auxiliaries (not "in", "on",
# "that", "you", "do", "can"...: "turn it on", "I like that", "yes I can" end sentences).
UNFINISHED_LAST_WORDS: Final = NEVER_LAST_WORDS | frozenset(
    (
        *("for", "of", "at", "by", "with", "from", "into", "onto", "than", "as", "about"),
        *("is", "are", "was", "were", "am", "could", "would", "should"),
    )
)
UNFINISHED, FINISHED, UNKNOWN = "unfinished", "finished", "unknown"


def words_verdict(words: str) -> str:
    """What the transcript says of the turn: ``unfinished`` (it stops where a sentence
    cannot end), ``finished`` (the recogniser closed it with ".", "?" or "!"), else
    ``unknown`` (no words, or no closing punctuation)."""
    text = words.strip()
    if not text:
        return UNKNOWN
    tokens = text.lower().replace("...", " ").split()
    last = tokens[-1].strip(".,;:-?!\"'") if tokens else ""
    asked = text[-1] in "?!"
    if last in NEVER_LAST_WORDS or (not asked and last in UNFINISHED_LAST_WORDS):
        return UNFINISHED
    if text.endswith("...") or text[-1] not in ".?!":
        return UNKNOWN
    return FINISHED


# The longest an unfinished-sounding turn waits in silence, by eagerness (OpenAI's).
SEMANTIC_MAX_SILENCE_MS: Final[Mapping[str, int]] = {
    "low": 8000,
    "medium": 4000,
    "auto": 4000,
    "high": 2000,
}
# Silence after which the turn is judged (the VAD's candidate end of speech); the Smart
# Turn authors pair their model with a 200 ms VAD stop. A finished turn ends here.
SEMANTIC_CANDIDATE_SILENCE_MS: Final = 200
# How long an ambiguous turn waits, by eagerness: long enough to outlast most thinking
# pauses at medium (speakers' mid-sentence pauses run 0.5 to 2 s), short at high.
AMBIGUOUS_SILENCE_MS: Final[Mapping[str, int]] = {
    "low": 3000,
    "medium": 2000,
    "auto": 2000,
    "high": 800,
}
# A prosody probability at or above this sounds complete (Smart Turn's own threshold).
PROSODY_THRESHOLD: Final = 0.5
# Language-model probabilities: at or above ``FINISHED`` (with complete prosody) the turn
# is finished; below ``UNFINISHED`` the words want more. Tuned on the tuning split only.
SEMANTIC_FINISHED_THRESHOLD: Final = 0.25
SEMANTIC_UNFINISHED_THRESHOLD: Final = 0.01


@dataclass(frozen=True, slots=True)
class TurnInputs:
    """What the decision sees at a candidate end of speech."""

    eagerness: str
    prosody: float  # the prosody model's P(complete)
    words: str | None = None  # the hypothesis of the words so far (None: none is made)
    semantic: float | None = None  # the language model's P(finished | words)


@dataclass(frozen=True, slots=True)
class TurnVerdict:
    verdict: str  # "finished" | "ambiguous" | "unfinished"
    wait_ms: int  # silence after the speech's end at which the turn ends


def decide(inputs: TurnInputs) -> TurnVerdict:
    """The verdict and the silence to wait, for one candidate end of speech."""
    eagerness = inputs.eagerness if inputs.eagerness in SEMANTIC_MAX_SILENCE_MS else "auto"
    longest = SEMANTIC_MAX_SILENCE_MS[eagerness]
    short = SEMANTIC_CANDIDATE_SILENCE_MS
    said = words_verdict(inputs.words) if inputs.words is not None else None
    sounds_complete = inputs.prosody >= PROSODY_THRESHOLD
    if said == UNFINISHED:
        return TurnVerdict(UNFINISHED, longest)  # it may sound done; the words stop mid-way
    if inputs.semantic is None or not (inputs.words or "").strip():
        if sounds_complete:
            return TurnVerdict(FINISHED, short)
        if said == FINISHED:
            # The audio hears more to come, the recogniser heard a whole sentence: wait,
            # but not the longest wait (Smart Turn calls some questions unfinished).
            return TurnVerdict(AMBIGUOUS, longest // 2)
        return TurnVerdict(UNFINISHED, longest)
    if inputs.semantic >= SEMANTIC_FINISHED_THRESHOLD and sounds_complete:
        return TurnVerdict(FINISHED, short)
    if inputs.semantic < SEMANTIC_UNFINISHED_THRESHOLD and not sounds_complete:
        return TurnVerdict(UNFINISHED, longest)
    return TurnVerdict(AMBIGUOUS, AMBIGUOUS_SILENCE_MS[eagerness])
