"""The ``openai`` Python SDK's Realtime client, GA (``client.realtime.connect``) and beta
(``client.beta.realtime.connect``), holding one spoken conversation.

The SDK has no session defaults of its own: the driver configures what OpenAI's Realtime
guide does (instructions, a voice, input transcription, and ``server_vad`` or, with
``turns="manual"``, no turn detection: commit, then ``response.create``). It speaks a
question in real time, plays the reply in real time (it only counts what was played),
interrupts the second reply (talking over it with ``server_vad``; ``response.cancel``
when manual) and truncates what was not heard, lets the conversation go on, and closes.
Every ``error`` event the SDK delivers is recorded.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any, Literal

from openai import AsyncOpenAI

from .report import (
    STEP_TIMEOUT_S,
    CompatReport,
    EventLog,
    Microphone,
    Target,
    paced,
    package_version,
    question_pcm16,
    silence_pcm16,
    transcribes_input,
)

RATE = 24_000  # pcm16's rate on OpenAI's wire
CHUNK_MS = 40
INSTRUCTIONS = "You are a helpful voice assistant. Answer in one short sentence."

Dialect = Literal["ga", "beta"]
Turns = Literal["server_vad", "manual"]

# Every flow this driver runs (label -> run_conversation's keyword arguments).
FLOWS: dict[str, dict[str, Any]] = {
    f"{dialect}-{turns}": {"dialect": dialect, "turns": turns}
    for dialect in ("ga", "beta")
    for turns in ("server_vad", "manual")
}


def client_name(dialect: Dialect, turns: Turns) -> str:
    return f"openai ({dialect.upper() if dialect == 'ga' else dialect}, {turns})"


class _Names:
    """Event and session spellings of one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        ga = dialect == "ga"
        self.audio_delta = "response.output_audio.delta" if ga else "response.audio.delta"
        self.transcript_done = (
            "response.output_audio_transcript.done" if ga else "response.audio_transcript.done"
        )
        self.transcript_delta = (
            "response.output_audio_transcript.delta" if ga else "response.audio_transcript.delta"
        )
        self.ga = ga

    def session(self, turns: Turns) -> dict[str, Any]:
        turn_detection = {"type": "server_vad"} if turns == "server_vad" else None
        transcription = {"model": "whisper-1"}
        if self.ga:
            return {
                "type": "realtime",
                "instructions": INSTRUCTIONS,
                "output_modalities": ["audio"],
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": RATE},
                        "transcription": transcription,
                        "turn_detection": turn_detection,
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": RATE}, "voice": "alloy"},
                },
            }
        return {
            "instructions": INSTRUCTIONS,
            "modalities": ["audio", "text"],
            "voice": "alloy",
            "input_audio_format": "pcm16",
            "output_audio_format": "pcm16",
            "input_audio_transcription": transcription,
            "turn_detection": turn_detection,
        }

    def transcribes(self, session: Any) -> bool:
        """Whether the session in force transcribes the user's audio."""
        if session is None:
            return False
        if self.ga:
            audio = getattr(session, "audio", None)
            audio_input = getattr(audio, "input", None)
            return getattr(audio_input, "transcription", None) is not None
        return getattr(session, "input_audio_transcription", None) is not None


class _Player:
    """Plays one response's audio in real time from its first delta: ``played_ms`` is what
    a listener has heard so far."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.received_ms = 0.0

    def feed(self, delta_b64: str) -> None:
        if self.started is None:
            self.started = time.perf_counter()
        self.received_ms += len(base64.b64decode(delta_b64)) / 2 / RATE * 1000

    @property
    def played_ms(self) -> int:
        if self.started is None:
            return 0
        return int(min(self.received_ms, (time.perf_counter() - self.started) * 1000))


async def run_conversation(
    target: Target, *, dialect: Dialect = "ga", turns: Turns = "server_vad"
) -> CompatReport:
    report = CompatReport(client_name(dialect, turns), package_version("openai"), target.deployment)
    names = _Names(dialect)
    client = AsyncOpenAI(api_key="unused", base_url=target.http_v1, websocket_base_url=target.ws_v1)
    manager = (
        client.realtime.connect(model=target.model)
        if dialect == "ga"
        else client.beta.realtime.connect(model=target.model)
    )
    try:
        async with manager as conn:
            await _converse(conn, target, names, turns, report)
        report.mark("close")
    except Exception as exc:  # the SDK raised: that is what a user would see
        report.error(f"{type(exc).__name__}: {exc}")
    return report


class _User:
    """The person talking: with ``server_vad`` a live microphone (silence between
    utterances), with manual turns push-to-talk (the utterance, then a commit and a
    ``response.create``)."""

    def __init__(self, conn: Any, turns: Turns, log: EventLog[Any]) -> None:
        self.conn = conn
        self.turns = turns
        self.log = log
        self.mic = Microphone(self._append, RATE, CHUNK_MS)
        if turns == "server_vad":
            self.mic.start()

    async def _append(self, chunk: bytes) -> None:
        await self.conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())

    async def ask(self) -> Any:
        """Say the question; the ``input_audio_buffer.committed`` that ended the turn (None
        when none came)."""
        mark = len(self.log)
        if self.turns == "server_vad":
            await self.mic.say(question_pcm16(RATE))
            return await self.log.wait(lambda e: e.type == "input_audio_buffer.committed", mark)
        async for chunk in paced(question_pcm16(RATE) + silence_pcm16(200, RATE), RATE, CHUNK_MS):
            await self._append(chunk)
        await self.conn.input_audio_buffer.commit()
        committed = await self.log.wait(lambda e: e.type == "input_audio_buffer.committed", mark)
        if committed is not None:
            await self.conn.response.create()
        return committed


async def _converse(
    conn: Any, target: Target, names: _Names, turns: Turns, report: CompatReport
) -> None:
    log: EventLog[Any] = EventLog()
    players: dict[str, _Player] = {}

    async def read() -> None:
        try:
            async for event in conn:
                if event.type == "error":
                    err = event.error
                    report.error(f"error event: {err.code}: {err.message}")
                elif event.type == names.audio_delta:
                    players.setdefault(event.response_id, _Player()).feed(event.delta)
                log.add(event)
        except Exception as exc:
            report.error(f"reading events raised {type(exc).__name__}: {exc}")

    def of(kind: str) -> Any:
        return lambda e: e.type == kind

    reader = asyncio.create_task(read())
    user: _User | None = None
    try:
        created = await log.wait(of("session.created"))
        report.mark("connect", created is not None)
        if created is None:
            return

        mark = len(log)
        await conn.session.update(session=names.session(turns))
        updated = await log.wait(of("session.updated"), mark)
        in_force = getattr(updated.session, "instructions", None) if updated is not None else None
        report.mark("configure", in_force == INSTRUCTIONS and not report.errors)
        transcribes = transcribes_input(target)
        if updated is not None and names.transcribes(updated.session) != transcribes:
            report.note(
                "session.updated says the user's audio is "
                f"{'' if names.transcribes(updated.session) else 'not '}transcribed"
            )

        # Turn 1: the question, answered to the end.
        user = _User(conn, turns, log)
        mark = len(log)
        report.mark("audio_in", await user.ask() is not None)
        done = await log.wait(of("response.done"), mark)
        heard = players.get(done.response.id) if done is not None else None
        report.mark(
            "reply_audio",
            done is not None
            and done.response.status == "completed"
            and heard is not None
            and heard.received_ms > 0,
        )
        said = log.find(of(names.transcript_done), mark)
        asked = log.find(of("conversation.item.input_audio_transcription.completed"), mark)
        if asked is not None:
            report.note(f"user transcript: {asked.transcript!r}")
        if said is not None:
            report.note(f"assistant transcript: {said.transcript!r}")
        report.mark(
            "transcripts",
            said is not None
            and bool(said.transcript)
            and (not transcribes or (asked is not None and bool(asked.transcript))),
        )

        # Turn 2: the question again; its reply is interrupted while it plays, and the
        # conversation goes on (with server_vad the talk-over is itself a turn).
        mark = len(log)
        await user.ask()
        first = await log.wait(of(names.audio_delta), mark)
        interrupted = await _interrupt(user, log, players, first)
        after = None
        if interrupted:
            mark = len(log)
            if turns == "manual":
                await user.ask()
            after = await log.wait(
                lambda e: e.type == "response.done" and e.response.status == "completed", mark
            )
            if after is None:
                report.note("no reply completed after the interruption")
        report.mark("interruption", interrupted and after is not None)
    finally:
        if user is not None:
            await user.mic.stop()
        await asyncio.sleep(0)  # let events already received reach the log
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def _interrupt(
    user: _User, log: EventLog[Any], players: dict[str, _Player], first: Any
) -> bool:
    """Interrupt the reply that ``first`` (its first audio delta) began while it plays, as
    the user of this flow does (talking over it, or a stop button), and truncate its item
    at what was heard. A reply the server is still producing must end ``cancelled`` (the
    server cancels it on talk-over; the stop button sends ``response.cancel``), which
    cuts it whatever the client holds (a server that pauses a reply the moment speech
    starts over it has sent nothing more by then: the client may have played all it
    got); one it has already finished sending is only cut short locally, as with OpenAI,
    so the client must have played less than it got. True when that held and the
    truncation was confirmed."""
    if first is None:
        return False
    response_id = first.response_id
    mark = log.index(lambda e: e is first) or 0

    def ended(e: Any) -> bool:
        return e.type == "response.done" and e.response.id == response_id

    await asyncio.sleep(0.3)  # the user hears the start of it
    talk_over: asyncio.Task[Any] | None = None
    active = log.find(ended, mark) is None
    if user.turns == "server_vad":
        talk_over = asyncio.create_task(user.mic.say(question_pcm16(RATE)))
        started = await log.wait(lambda e: e.type == "input_audio_buffer.speech_started", mark)
        if started is None:
            talk_over.cancel()
            return False
    elif active:
        await user.conn.response.cancel()
    player = players[response_id]
    heard_ms = player.played_ms
    cancelled = True
    if active:
        done = await log.wait(ended, mark)
        cancelled = done is not None and done.response.status == "cancelled"
    await user.conn.conversation.item.truncate(
        item_id=first.item_id, content_index=first.content_index, audio_end_ms=heard_ms
    )
    truncated = await log.wait(
        lambda e: e.type == "conversation.item.truncated" and e.item_id == first.item_id, mark
    )
    if talk_over is not None:
        await asyncio.wait_for(talk_over, STEP_TIMEOUT_S)
    cut = active or heard_ms < player.received_ms
    return cancelled and truncated is not None and cut
