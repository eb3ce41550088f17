"""LiveKit Agents' OpenAI Realtime plugin (``livekit-plugins-openai``) against omniduplex.

The plugin is driven the way ``AgentSession`` drives it, but without a room:
``openai.realtime.RealtimeModel(base_url=..., api_key=...)`` with its defaults (semantic
VAD, ``gpt-4o-mini-transcribe`` input transcription, voice ``marin``), then
``model.session()`` and the session's own API: ``update_instructions``,
``generate_reply`` (the agent speaks first), ``push_audio`` (a spoken question in 40 ms
frames at real-time pace), ``interrupt`` and ``truncate`` (at the played position), then
``aclose``. Replies are read from the session's ``generation_created`` events (their
message, text and audio streams); every ``error`` event the session emits and every
error the plugin logs is recorded.

Flows (``turn_detection``):

- ``"default"``: the plugin's default, ``semantic_vad`` on the server; the server ends the
  user's turn and answers it.
- ``"server_vad"``: the same with ``turn_detection=ServerVad(type="server_vad")`` passed to
  the model, as LiveKit documents for plain silence-based turns.
- ``"manual"``: ``model.session(turn_detection_disabled=True)``, as ``AgentSession`` opens
  it when the agent runs its own turn detector: the client commits the turn
  (``commit_audio``) and asks for the answer (``generate_reply``).

The greeting is ``generate_reply(instructions=GREETING)`` (LiveKit's quickstart);
``greeting_instructions=None`` sends a bare ``generate_reply()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from client_compat.report import (
    CompatReport,
    Target,
    paced,
    package_version,
    question_pcm16,
    silence_pcm16,
)

CLIENT = "livekit-plugins-openai"
RATE_HZ = 24_000  # the plugin's SAMPLE_RATE
CHUNK_MS = 40
TIMEOUT_S = 30.0  # a guard against hangs only
INSTRUCTIONS = "You are a helpful voice assistant. Answer in one or two short sentences."
GREETING = "Greet the user in one short sentence."
# How much reply audio to hear before interrupting it.
INTERRUPT_AFTER_MS = 300
# The most trailing silence sent after the question while waiting for the server to end
# the turn (server flow).
TRAILING_SILENCE_MS = 3000


class _LogTap(logging.Handler):
    """Records what the plugin logs at WARNING and above."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class _Reply:
    """One generation read through the plugin's streams, played out as a speaker would."""

    def __init__(self, gen: Any) -> None:
        self.gen = gen
        self.message_ids: list[str] = []
        self.text = ""
        self.audio_ms = 0.0
        self.first_audio = asyncio.Event()
        self._first_audio_at: float | None = None
        self.task = asyncio.create_task(self._read())

    def played_ms(self) -> int:
        """What a real-time player has played of the audio received so far."""
        if self._first_audio_at is None:
            return 0
        elapsed = 1000.0 * (time.perf_counter() - self._first_audio_at)
        return int(min(elapsed, self.audio_ms))

    async def _read(self) -> None:
        async def read_message(msg: Any) -> None:
            async def text() -> None:
                async for piece in msg.text_stream:
                    self.text += str(piece)

            async def audio() -> None:
                async for frame in msg.audio_stream:
                    if self._first_audio_at is None:
                        self._first_audio_at = time.perf_counter()
                        self.first_audio.set()
                    self.audio_ms += 1000.0 * frame.samples_per_channel / frame.sample_rate

            await asyncio.gather(text(), audio())

        readers = []
        async for msg in self.gen.message_stream:
            self.message_ids.append(msg.message_id)
            readers.append(asyncio.create_task(read_message(msg)))
        async for _call in self.gen.function_stream:
            pass
        await asyncio.gather(*readers)
        self.first_audio.set()

    async def done(self) -> None:
        await asyncio.wait_for(asyncio.shield(self.task), TIMEOUT_S)


class _Conversation:
    """The session's events, as the plugin surfaces them."""

    def __init__(self, session: Any, report: CompatReport) -> None:
        self.session = session
        self.report = report
        self.server_events: list[dict[str, Any]] = []
        self.client_events: list[dict[str, Any]] = []
        self.generations: asyncio.Queue[Any] = asyncio.Queue()
        self.user_transcripts: list[str] = []
        self.speech_started = 0
        self.speech_stopped = 0
        self._changed = asyncio.Event()
        session.on("error", self._on_error)
        session.on("generation_created", self.generations.put_nowait)
        session.on("input_speech_started", self._on_speech_started)
        session.on("input_speech_stopped", self._on_speech_stopped)
        session.on("input_audio_transcription_completed", self._on_user_transcript)
        session.on("openai_server_event_received", self._on_server_event)
        session.on("openai_client_event_queued", self.client_events.append)

    def _on_error(self, event: Any) -> None:
        error = event.error
        body = getattr(error, "body", None)
        detail = f" {body}" if body is not None else ""
        self.report.error(
            f"error event ({'recoverable' if event.recoverable else 'fatal'}): "
            f"{type(error).__name__}: {error}{detail}"
        )

    def _on_speech_started(self, _event: Any) -> None:
        self.speech_started += 1

    def _on_speech_stopped(self, _event: Any) -> None:
        self.speech_stopped += 1

    def _on_user_transcript(self, event: Any) -> None:
        if event.is_final:
            self.user_transcripts.append(event.transcript)

    def _on_server_event(self, event: dict[str, Any]) -> None:
        self.server_events.append(event)
        self._changed.set()

    def count(self, event_type: str) -> int:
        return sum(1 for e in self.server_events if e.get("type") == event_type)

    def sent(self, event_type: str) -> int:
        return sum(1 for e in self.client_events if e.get("type") == event_type)

    async def until(self, accept: Callable[[], bool]) -> bool:
        """Wait until ``accept()`` holds (False if it still does not after TIMEOUT_S)."""
        try:
            async with asyncio.timeout(TIMEOUT_S):
                while not accept():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            return False
        return True

    def last(self, event_type: str) -> dict[str, Any] | None:
        for event in reversed(self.server_events):
            if event.get("type") == event_type:
                return event
        return None

    async def next_generation(self) -> Any | None:
        try:
            return await asyncio.wait_for(self.generations.get(), TIMEOUT_S)
        except TimeoutError:
            return None


def _frame(pcm: bytes) -> Any:
    from livekit import rtc

    return rtc.AudioFrame(
        data=pcm, sample_rate=RATE_HZ, num_channels=1, samples_per_channel=len(pcm) // 2
    )


async def _push(session: Any, pcm: bytes, stop: asyncio.Event | None = None) -> None:
    async for piece in paced(pcm, RATE_HZ, CHUNK_MS):
        if stop is not None and stop.is_set():
            return
        session.push_audio(_frame(piece))


FLOWS = ("default", "server_vad", "manual")


async def run_conversation(
    target: Target,
    *,
    turn_detection: str = "default",
    greeting_instructions: str | None = GREETING,
) -> CompatReport:
    """One whole conversation through the plugin; ``turn_detection`` is one of ``FLOWS``."""
    if turn_detection not in FLOWS:
        raise ValueError(turn_detection)
    label = {"default": "", "server_vad": " (server_vad)", "manual": " (manual turns)"}
    report = CompatReport(
        client=CLIENT + label[turn_detection],
        version=package_version(CLIENT),
        deployment=target.deployment,
    )
    tap = _LogTap()
    loggers = [logging.getLogger("livekit.agents"), logging.getLogger("livekit.plugins.openai")]
    for lg in loggers:
        lg.addHandler(tap)
    try:
        await _converse(target, report, turn_detection, greeting_instructions)
    except Exception as exc:  # the library raised: that is a finding, not a crash
        report.error(f"raised {type(exc).__name__}: {exc}")
    finally:
        for lg in loggers:
            lg.removeHandler(tap)
    for record in tap.records:
        text = f"log {record.levelname.lower()} ({record.name}): {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" [{type(record.exc_info[1]).__name__}: {record.exc_info[1]}]"
        if record.levelno >= logging.ERROR:
            report.error(text)
        else:
            report.note(text)
    return report


async def _converse(
    target: Target, report: CompatReport, turn_detection: str, greeting: str | None
) -> None:
    from livekit.plugins import openai as lk_openai
    from openai.types.realtime.realtime_audio_input_turn_detection import ServerVad

    options: dict[str, Any] = {}
    if turn_detection == "server_vad":
        options["turn_detection"] = ServerVad(type="server_vad")
    model = lk_openai.realtime.RealtimeModel(
        base_url=target.http_v1, api_key="omniduplex", model=target.model, **options
    )
    manual = turn_detection == "manual"
    session = model.session(turn_detection_disabled=manual)
    conv = _Conversation(session, report)
    try:
        await _steps(session, conv, report, manual=manual, greeting=greeting)
    finally:
        try:
            # aclose ends the socket and waits for the session's task, raising what it raised
            await asyncio.wait_for(session.aclose(), TIMEOUT_S)
            report.mark("close")
        except Exception as exc:
            report.error(f"aclose raised {type(exc).__name__}: {exc}")
        await model.aclose()


async def _steps(
    session: Any, conv: _Conversation, report: CompatReport, *, manual: bool, greeting: str | None
) -> None:
    # connect: the plugin opens the socket by itself and sends its session.update
    report.mark("connect", await conv.until(lambda: conv.count("session.created") >= 1))
    if not report.steps["connect"]:
        return

    # configure: its defaults (sent at once) and the agent's instructions
    await session.update_instructions(INSTRUCTIONS)
    answered = await conv.until(
        lambda: (
            conv.count("session.updated") >= conv.sent("session.update") or conv.count("error") > 0
        )
    )
    updated = conv.last("session.updated")
    report.mark("configure", answered and conv.count("error") == 0 and updated is not None)
    if updated is not None:
        audio_in = (updated.get("session") or {}).get("audio", {}).get("input", {})
        report.note(f"session.updated turn_detection: {audio_in.get('turn_detection')}")

    # the agent speaks first: generate_reply with no user input
    greeting_text = ""
    try:
        options = {"instructions": greeting} if greeting else {}
        ask = session.generate_reply(**options)
        opening = _Reply(await asyncio.wait_for(ask, TIMEOUT_S))
        await opening.done()
        greeting_text = opening.text
        report.note(f"greeting: {opening.audio_ms:.0f} ms of audio, text {opening.text!r}")
    except Exception as exc:
        report.error(f"generate_reply (greeting) raised {type(exc).__name__}: {exc}")

    # the user asks a question
    question = question_pcm16(RATE_HZ)
    reply: _Reply | None = None
    if manual:
        await _push(session, question + silence_pcm16(200, RATE_HZ))
        session.commit_audio()
        committed = await conv.until(lambda: conv.count("input_audio_buffer.committed") >= 1)
        # OpenAI sends no speech events with turn detection off; AgentSession would take
        # input_speech_started for the server's barge-in and interrupt the agent
        spurious = conv.speech_started + conv.speech_stopped
        if spurious:
            report.note(
                f"input_speech_started x{conv.speech_started}, input_speech_stopped "
                f"x{conv.speech_stopped} with turn detection off"
            )
        report.mark("audio_in", committed and not spurious)
        try:
            created = await asyncio.wait_for(session.generate_reply(), TIMEOUT_S)
            reply = _Reply(created)
        except Exception as exc:
            report.error(f"generate_reply raised {type(exc).__name__}: {exc}")
    else:
        answered_evt = asyncio.Event()

        async def wait_answer() -> Any | None:
            # the server's answer, not the greeting generate_reply asked for
            while (gen := await conv.next_generation()) is not None and gen.user_initiated:
                pass
            answered_evt.set()
            return gen

        waiter = asyncio.create_task(wait_answer())
        await _push(session, question)
        await _push(session, silence_pcm16(TRAILING_SILENCE_MS, RATE_HZ), stop=answered_evt)
        gen = await waiter
        report.mark("audio_in", conv.speech_started >= 1 and conv.speech_stopped >= 1)
        if gen is not None:
            reply = _Reply(gen)
    if reply is None:
        return

    # reply audio and transcripts; the user talks over it once it has played a moment:
    # the agent stops playing, cancels what is left and truncates at the played position
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reply.first_audio.wait(), TIMEOUT_S)
    await asyncio.sleep(INTERRUPT_AFTER_MS / 1000)
    errors_before = conv.count("error")
    active = session.has_active_generation
    session.interrupt()
    played_ms = reply.played_ms()
    message_id = reply.message_ids[0] if reply.message_ids else None
    if message_id is not None:
        session.truncate(message_id=message_id, modalities=["audio"], audio_end_ms=played_ms)
    try:
        await reply.done()
    except TimeoutError:
        report.error("the reply's streams never closed")
    report.mark("reply_audio", reply.audio_ms > 0)
    report.mark("transcripts", bool(reply.text.strip() or greeting_text.strip()))
    report.note(
        f"reply: {reply.audio_ms:.0f} ms of audio, text {reply.text!r}; "
        f"user transcripts {conv.user_transcripts}"
    )
    if message_id is None:
        return
    await conv.until(
        lambda: (
            conv.count("conversation.item.truncated") >= 1 or conv.count("error") > errors_before
        )
    )
    truncated = conv.count("conversation.item.truncated") >= 1
    done = conv.last("response.done")
    status = (done or {}).get("response", {}).get("status")
    report.note(
        f"interrupted at {played_ms} ms played; response "
        f"{'active' if active else 'already done'} then, response.done status {status}"
    )
    report.mark("interruption", truncated and status in ("cancelled", "completed"))
