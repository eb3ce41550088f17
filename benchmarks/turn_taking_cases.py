"""The turn-taking scenarios' words and voices, drawn from templates in two fixed splits.

Every case is generated from templates and slot values by a seeded draw, so the set is
broad and reproducible: ``tuning`` (seed ``TUNING_SEED``) is what thresholds may be tuned
on; ``heldout`` (seed ``HELDOUT_SEED``) is only ever measured, and a held-out case whose
words a tuning case also has is dropped from it. Sentences written while tuning go into
``TUNING_ONLY``, which only the tuning split draws from.

Pause categories (a sentence broken by a pause, 0.6 to 2.0 s, then finished):

- ``complete_point``: the words before the pause are themselves a whole sentence ("Could
  you remind me to call my sister ... after lunch"): only what follows says the turn
  was not over.
- ``random_point``: a random word boundary of a whole sentence (at least two words on
  each side).
- ``incomplete_point``: a boundary no sentence ends at (after an article, a preposition,
  "to", a conjunction), as in Full-Duplex-Bench's pause set.

``smooth``: a whole request or question, then silence. Voices (``VOICES``): the
assistant's own piper voice, piper with its sampling noise on and slower, and three
espeak-ng voices (US, British RP, Caribbean English), each case on one, round robin.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import soxr

TUNING_SEED = 2901
HELDOUT_SEED = 29_000_029
SPLITS = {"tuning": TUNING_SEED, "heldout": HELDOUT_SEED}
PAUSE_RANGE_S = (0.6, 2.0)

SLOTS: dict[str, tuple[str, ...]] = {
    "person": ("my sister", "my brother", "my mother", "my father", "my friend Anna", "Tom"),
    "city": ("London", "Paris", "Berlin", "Madrid", "Rome", "Dublin", "Boston", "Tokyo"),
    "when": ("tomorrow evening", "this weekend", "next Friday", "tonight", "on Monday"),
    "meal": ("lunch", "dinner", "breakfast", "the meeting", "work"),
    "number": ("two", "three", "four", "five", "six"),
    "place": ("station", "airport", "museum", "library", "hospital", "post office"),
    "item": ("some milk", "a new phone", "fresh bread", "a birthday card", "coffee beans"),
    "room": ("kitchen", "bedroom", "living room", "hallway", "office"),
    "topic": ("the election", "football", "the economy", "space travel", "the weather"),
    "animal": ("dragon", "fox", "little bear", "clever owl", "lonely whale"),
    "hour": ("seven", "half past six", "eight", "nine thirty", "noon"),
    "day": ("Monday", "Tuesday", "Wednesday", "Thursday", "Saturday"),
    "skill": ("the piano", "Spanish", "to cook", "to swim", "chess"),
    "food": ("chicken", "rice", "tomatoes", "mushrooms", "lentils", "cheese"),
    "transport": ("bus", "train", "bike", "car"),
    "thing": ("a rainbow", "the internet", "a vaccine", "an engine", "a solar panel"),
}

# (whole sentence, continuation): the first part ends a sentence on its own.
COMPLETE_POINT: tuple[tuple[str, str], ...] = (
    ("I would like to book a table", "for {number} people {when}."),
    ("Could you remind me to call {person}", "after {meal}?"),
    ("Tell me what the weather will be", "like in {city} {when}."),
    ("Can you play some music", "while I cook {food} for dinner?"),
    ("I need to buy {item}", "before the shop closes {when}."),
    ("Please send a message to {person}", "saying that I will be late."),
    ("What is the best way to get to the {place}", "from here by {transport}?"),
    ("I want to learn {skill}", "in my free time this year."),
    ("Set a timer", "for {number} minutes please."),
    ("Turn on the lights", "in the {room}."),
    ("Can you find me a recipe", "with {food} and {food}?"),
    ("How long does it take to drive to {city}", "on a {day} morning?"),
    ("I am going to {city}", "next {day} with {person}."),
    ("Add {item} to my shopping list", "and remind me tomorrow."),
    ("Do you know a good restaurant", "near the {place}?"),
    ("What time does the {place} open", "on {day}?"),
    ("Read me the news", "about {topic}."),
    ("Tell me a story", "about a {animal} who lived in {city}."),
    ("Can you help me write an email", "to {person} about {when}?"),
    ("Explain how {thing} works", "in simple words."),
    ("Wake me up", "at {hour} tomorrow."),
    ("Book a taxi", "to the {place} at {hour}."),
    ("I think I will stay home", "because it is raining in {city}."),
    ("Is it going to rain", "in {city} {when}?"),
    ("Find me a flight to {city}", "that leaves {when}."),
    ("Can you check my calendar", "for {day} afternoon?"),
    ("I left my umbrella", "at the {place} yesterday."),
    ("What should I cook", "with {food} and {food}?"),
)
TUNING_ONLY_COMPLETE: tuple[tuple[str, str], ...] = ()

# Whole requests and questions: smooth turns, and the sentences random points cut.
WHOLE: tuple[str, ...] = (
    "What is the capital of {city}?",
    "Can you tell me a joke?",
    "What time is it in {city}?",
    "How do I get to the {place}?",
    "Set an alarm for {hour} tomorrow.",
    "Play some music in the {room}.",
    "What is the weather like {when}?",
    "Remind me to call {person} after {meal}.",
    "How long should I boil {food}?",
    "Who invented {thing}?",
    "Tell me something interesting about {topic}.",
    "I would like to order a pizza for {number} people.",
    "Where can I buy {item} near here?",
    "How do you say good morning in Spanish?",
    "Turn off the lights in the {room} please.",
    "What is a good name for a {animal}?",
    "Is the {place} open on {day}?",
    "Can you recommend a book about {topic}?",
    "Send a message to {person} saying I am on my way.",
    "How far is {city} from here by {transport}?",
)

# Fragments that stop where no sentence ends, and their rest.
INCOMPLETE_POINT: tuple[tuple[str, str], ...] = (
    ("I would like to book a table for", "{number} people {when}."),
    ("Can you tell me the way to", "the nearest {place}?"),
    ("Please remind me to", "call {person} after {meal}."),
    ("What is the best way to", "learn {skill}?"),
    ("I need to buy some", "{food} and {item}."),
    ("The meeting has been moved to", "{day} afternoon."),
    ("Could you play some music by", "a jazz band in the {room}?"),
    ("I left my keys in the", "{room} again."),
    ("How long does it take to", "get to {city} by {transport}?"),
    ("Tell me a fact about", "{topic}."),
    ("Do you know whether the", "{place} is open {when}?"),
    ("Can you set an alarm for", "{hour} tomorrow?"),
    ("My friend is visiting from", "{city} {when}."),
    ("I forgot to send an email to", "{person} yesterday."),
    ("Could you explain why the", "sky is blue?"),
    ("I am looking for a recipe with", "{food} and {food}."),
)


@dataclass(frozen=True, slots=True)
class Case:
    category: str
    parts: tuple[str, ...]  # one part (smooth) or two (before and after the pause)
    pause_s: float  # 0 for smooth turns
    voice: str


def _fill(template: str, rng: random.Random) -> str:
    out = template
    while "{" in out:
        start = out.index("{")
        end = out.index("}", start)
        out = out[:start] + rng.choice(SLOTS[out[start + 1 : end]]) + out[end + 1 :]
    return out


def _random_cut(sentence: str, rng: random.Random) -> tuple[str, str]:
    words = sentence.split()
    cut = rng.randrange(2, len(words) - 1)
    return " ".join(words[:cut]), " ".join(words[cut:])


def draw(split: str, *, pauses: int = 48, random_points: int = 24, smooth: int = 32) -> list[Case]:
    """The split's cases: ``pauses`` complete-point pauses, ``random_points`` random-point
    and as many incomplete-point pauses, ``smooth`` whole turns; in ``heldout``, none whose
    words a tuning case has."""
    rng = random.Random(SPLITS[split])
    complete = COMPLETE_POINT + (TUNING_ONLY_COMPLETE if split == "tuning" else ())
    makers: dict[str, tuple[int, Callable[[int], tuple[str, ...]]]] = {
        "complete_point": (pauses, lambda k: _pair(complete[k % len(complete)], rng)),
        "random_point": (random_points, lambda k: _random_cut(_fill(rng.choice(WHOLE), rng), rng)),
        "incomplete_point": (
            random_points,
            lambda k: _pair(INCOMPLETE_POINT[k % len(INCOMPLETE_POINT)], rng),
        ),
        "smooth": (smooth, lambda k: (_fill(WHOLE[k % len(WHOLE)], rng),)),
    }
    taken = {case.parts for case in draw("tuning")} if split == "heldout" else set()
    cases: list[tuple[str, tuple[str, ...]]] = []
    for category, (count, make) in makers.items():
        made = 0
        for attempt in range(count * 20):
            parts = make(attempt)
            if parts in taken:
                continue
            taken.add(parts)
            cases.append((category, parts))
            made += 1
            if made == count:
                break
    voices = list(VOICES)
    out = []
    for index, (category, parts) in enumerate(cases):
        pause = round(rng.uniform(*PAUSE_RANGE_S), 2) if len(parts) == 2 else 0.0
        out.append(Case(category, parts, pause, voices[index % len(voices)]))
    return out


def _pair(template: tuple[str, str], rng: random.Random) -> tuple[str, str]:
    return _fill(template[0], rng), _fill(template[1], rng)


# ---- voices --------------------------------------------------------------------------


def _piper(rate_hz: int, *, sampled: bool, rate_wpm: int) -> Callable[[str], np.ndarray]:
    from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice

    voice = PiperSpeechVoice(sampled=sampled, rate_wpm=rate_wpm)

    def speak(text: str) -> np.ndarray:
        raw = np.asarray(voice.synthesize(text), dtype=np.float32)
        return np.asarray(soxr.resample(raw, voice.sample_rate_hz, rate_hz), np.float32)

    return speak


def _espeak(rate_hz: int, name: str, *, rate_wpm: int, pitch: int) -> Callable[[str], np.ndarray]:
    from omniduplex.model_executor.models.cascade.tts import EspeakVoice

    voice = EspeakVoice(name, rate_wpm=rate_wpm, pitch=pitch)

    def speak(text: str) -> np.ndarray:
        raw = np.asarray(voice.synthesize(text), dtype=np.float32)
        return np.asarray(soxr.resample(raw, voice.sample_rate_hz, rate_hz), np.float32)

    return speak


VOICES: dict[str, Callable[[int], Callable[[str], np.ndarray]]] = {
    "piper": lambda rate: _piper(rate, sampled=False, rate_wpm=175),
    "piper-noisy-slow": lambda rate: _piper(rate, sampled=True, rate_wpm=150),
    "espeak-us": lambda rate: _espeak(rate, "en-us", rate_wpm=165, pitch=50),
    "espeak-rp": lambda rate: _espeak(rate, "en-gb-x-rp", rate_wpm=180, pitch=65),
    "espeak-caribbean": lambda rate: _espeak(rate, "en-029", rate_wpm=155, pitch=40),
}


def trimmed(audio: np.ndarray) -> np.ndarray:
    """Without the voice's own leading and trailing silence: a scenario's marks are speech."""
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return audio[loud[0] : loud[-1] + 1] if loud.size else audio
