"""Pipecat's ``OpenAIRealtimeLLMService`` (``pipecat-ai``) against omniduplex.

The service runs in a real pipeline, as Pipecat's realtime examples build it
(``examples/realtime/realtime-openai.py`` and ``realtime-openai-locally-driven-turns.py``),
with the transport replaced by two processors: a source that pushes the microphone's
``InputAudioRawFrame`` s (16 kHz, 20 ms, real-time pace, as a transport does) and a sink
that takes what a transport's output would play (``TTSAudioRawFrame``, ``TTSTextFrame``,
the response brackets)::

    source -> user aggregator -> OpenAIRealtimeLLMService -> sink -> assistant aggregator

run by a ``PipelineWorker`` under a ``WorkerRunner`` (the 1.x names of ``PipelineTask`` and
``PipelineRunner``). The conversation starts the way Pipecat bots start it, with an
``LLMRunFrame`` on an empty context: the service's bare ``response.create`` (the bot speaks
first). Then the user asks a question, the reply plays, the user talks over the reply (a
barge-in), that turn is answered too, and an ``EndFrame`` closes the pipeline.

Every ``ErrorFrame`` (the worker's ``on_pipeline_error``) and every error the library logs is
recorded: Pipecat treats every Realtime error but ``response_cancel_not_active`` and
``conversation_already_has_active_response`` as fatal and stops reading the socket.

Flows (``turn_detection``):

- ``"default"``: the service's default session properties (no turn detection sent; the
  server's default applies).
- ``"semantic_vad"``: the realtime example's ``SemanticTurnDetection()`` with input
  transcription and near-field noise reduction.
- ``"server_vad"``: the same with ``TurnDetection()`` (server VAD).
- ``"local"``: ``turn_detection=False`` and ``SileroVADAnalyzer`` in the user aggregator
  (the locally-driven-turns example): the pipeline's own user-turn frames commit each turn
  and create its response, and the start of every user turn is an interruption, so the
  first one is an interruption with nothing playing (``input_audio_buffer.clear`` +
  ``response.cancel`` with no response active).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from client_compat.report import (
    CompatReport,
    Target,
    paced,
    package_version,
    question_pcm16,
    silence_pcm16,
)

CLIENT = "pipecat-ai"
RATE_HZ = 16_000  # what Pipecat transports deliver by default (audio_in_sample_rate)
OUT_RATE_HZ = 24_000
CHUNK_MS = 20
TIMEOUT_S = 30.0  # a guard against hangs only
INSTRUCTIONS = "You are a helpful voice assistant. Answer in one or two short sentences."
# The most trailing silence sent after the question while waiting for its answer.
TRAILING_SILENCE_MS = 3000
# How much of the reply plays before the user talks over it.
BARGE_IN_AFTER_MS = 300
FLOWS = ("default", "semantic_vad", "server_vad", "local")


def _session_properties(turn_detection: str) -> Any:
    from pipecat.services.openai.realtime.events import (
        AudioConfiguration,
        AudioInput,
        InputAudioNoiseReduction,
        InputAudioTranscription,
        SemanticTurnDetection,
        SessionProperties,
        TurnDetection,
    )

    if turn_detection == "default":
        return None
    detection: Any = {
        "semantic_vad": SemanticTurnDetection(),
        "server_vad": TurnDetection(),
        "local": False,
    }[turn_detection]
    return SessionProperties(
        audio=AudioConfiguration(
            input=AudioInput(
                transcription=InputAudioTranscription(),
                turn_detection=detection,
                noise_reduction=InputAudioNoiseReduction(type="near_field"),
            )
        )
    )


class _Tally:
    """What the pipeline carried, in order, and a way to wait for it."""

    def __init__(self) -> None:
        self.frames: list[Any] = []
        self.audio_ms = 0.0
        self.text: list[str] = []
        self.user_transcripts: list[str] = []
        self._changed = asyncio.Condition()

    async def add(self, frame: Any) -> None:
        self.frames.append(frame)
        async with self._changed:
            self._changed.notify_all()

    def count(self, kind: type) -> int:
        return sum(1 for f in self.frames if isinstance(f, kind))

    async def until(self, accept: Any) -> bool:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                async with self._changed:
                    await self._changed.wait_for(accept)
        except TimeoutError:
            return False
        return True


def _processors(tally: _Tally) -> tuple[Any, Any, Any]:
    from pipecat.frames.frames import (
        InputAudioRawFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        TTSAudioRawFrame,
        TTSStartedFrame,
        TTSStoppedFrame,
        TTSTextFrame,
    )
    from pipecat.observers.base_observer import BaseObserver, FramePushed
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

    class Source(FrameProcessor):
        """Stands in for a transport's input: the microphone's frames enter here."""

        async def process_frame(self, frame: Any, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            await self.push_frame(frame, direction)

        async def speak(self, pcm: bytes, stop: asyncio.Event | None = None) -> None:
            async for piece in paced(pcm, RATE_HZ, CHUNK_MS):
                if stop is not None and stop.is_set():
                    return
                await self.push_frame(
                    InputAudioRawFrame(audio=piece, sample_rate=RATE_HZ, num_channels=1)
                )

    class Sink(FrameProcessor):
        """Stands in for a transport's output: takes what would be played."""

        async def process_frame(self, frame: Any, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if direction == FrameDirection.DOWNSTREAM:
                if isinstance(frame, TTSAudioRawFrame):
                    samples = len(frame.audio) // (2 * frame.num_channels)
                    tally.audio_ms += 1000.0 * samples / frame.sample_rate
                    await tally.add(frame)
                elif isinstance(frame, TTSTextFrame):
                    tally.text.append(frame.text)
                    await tally.add(frame)
                elif isinstance(
                    frame,
                    (
                        LLMFullResponseStartFrame,
                        LLMFullResponseEndFrame,
                        TTSStartedFrame,
                        TTSStoppedFrame,
                    ),
                ):
                    await tally.add(frame)
            await self.push_frame(frame, direction)

    class Watcher(BaseObserver):
        """Sees the frames that travel upstream or between other processors."""

        def __init__(self) -> None:
            super().__init__(observe_every_push=False)

        async def on_push_frame(self, data: FramePushed) -> None:
            from pipecat.frames.frames import (
                InterruptionFrame,
                ProposedUserStartedSpeakingFrame,
                ProposedUserStoppedSpeakingFrame,
                TranscriptionFrame,
                UserStartedSpeakingFrame,
                UserStoppedSpeakingFrame,
            )

            frame = data.frame
            if isinstance(frame, TranscriptionFrame):
                tally.user_transcripts.append(frame.text)
                await tally.add(frame)
            elif isinstance(
                frame,
                (
                    InterruptionFrame,
                    UserStartedSpeakingFrame,
                    UserStoppedSpeakingFrame,
                    ProposedUserStartedSpeakingFrame,
                    ProposedUserStoppedSpeakingFrame,
                ),
            ):
                await tally.add(frame)

    return Source(), Sink(), Watcher()


async def run_conversation(target: Target, *, turn_detection: str = "default") -> CompatReport:
    """One whole conversation through a Pipecat pipeline; ``turn_detection`` is one of
    ``FLOWS``."""
    if turn_detection not in FLOWS:
        raise ValueError(turn_detection)
    label = "" if turn_detection == "default" else f" ({turn_detection})"
    report = CompatReport(
        client=CLIENT + label, version=package_version(CLIENT), deployment=target.deployment
    )
    from loguru import logger

    logged: list[Any] = []
    sink_id = logger.add(
        logged.append,
        level="WARNING",
        filter=lambda record: record["name"].startswith("pipecat"),
        format="{message}",
    )
    try:
        await _converse(target, report, turn_detection)
    except Exception as exc:  # the library raised: that is a finding, not a crash
        report.error(f"raised {type(exc).__name__}: {exc}")
    finally:
        logger.remove(sink_id)
    for message in logged:
        record = message.record
        text = f"log {record['level'].name.lower()} ({record['name']}): {record['message']}"
        if record["level"].no >= 40:  # ERROR
            report.error(text)
        else:
            report.note(text)
    return report


async def _converse(target: Target, report: CompatReport, turn_detection: str) -> None:
    from pipecat.frames.frames import EndFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )
    from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
    from pipecat.workers.runner import WorkerRunner

    properties = _session_properties(turn_detection)
    settings = OpenAIRealtimeLLMService.Settings(
        model=target.model,
        system_instruction=INSTRUCTIONS,
        **({"session_properties": properties} if properties is not None else {}),
    )
    llm = OpenAIRealtimeLLMService(api_key="omniduplex", base_url=target.ws_url, settings=settings)
    user_params = None
    if turn_detection == "local":
        from pipecat.audio.vad.silero import SileroVADAnalyzer

        user_params = LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer())
    context = LLMContext()
    user_aggregator, assistant_aggregator = LLMContextAggregatorPair(
        context, user_params=user_params
    )
    tally = _Tally()
    source, sink, watcher = _processors(tally)
    pipeline = Pipeline([source, user_aggregator, llm, sink, assistant_aggregator])
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=RATE_HZ, audio_out_sample_rate=OUT_RATE_HZ),
        observers=[watcher],
        idle_timeout_secs=None,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _on_started(_worker: Any, _frame: Any) -> None:
        started.set()

    @worker.event_handler("on_pipeline_error")
    async def _on_error(_worker: Any, frame: Any) -> None:
        report.error(f"ErrorFrame{' (fatal)' if frame.fatal else ''}: {frame.error}")
        await tally.add(frame)

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(started.wait(), TIMEOUT_S)
        if started.is_set() and not report.errors:
            await _steps(worker, source, tally, report, local=turn_detection == "local")
    finally:
        if not run.done():
            await worker.queue_frame(EndFrame())
        try:
            await asyncio.wait_for(asyncio.shield(run), TIMEOUT_S)
            report.mark("close", worker.has_finished())
        except TimeoutError:
            report.error("the pipeline did not finish after EndFrame")
            await runner.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(run, TIMEOUT_S)


async def _steps(worker: Any, source: Any, tally: _Tally, report: CompatReport, *, local: bool):
    from pipecat.frames.frames import (
        ErrorFrame,
        InterruptionFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMRunFrame,
        ProposedUserStartedSpeakingFrame,
        ProposedUserStoppedSpeakingFrame,
        TTSAudioRawFrame,
        UserStartedSpeakingFrame,
        UserStoppedSpeakingFrame,
    )

    def failed() -> bool:
        return tally.count(ErrorFrame) > 0

    def ended(n: int) -> bool:
        return tally.count(LLMFullResponseEndFrame) >= n or failed()

    # the bot speaks first: LLMRunFrame on an empty context is a bare response.create,
    # sent once the service's session.update has been answered with session.updated
    await worker.queue_frames([LLMRunFrame()])
    await tally.until(lambda: tally.count(LLMFullResponseStartFrame) >= 1 or failed())
    connect_errors = [e for e in report.errors if "Error connecting" in e]
    report.mark("connect", not connect_errors)
    report.mark("configure", tally.count(LLMFullResponseStartFrame) >= 1 and not failed())
    await tally.until(lambda: ended(1))
    greeting_ms, greeting_text = tally.audio_ms, "".join(tally.text)
    report.note(f"greeting: {greeting_ms:.0f} ms of audio, text {greeting_text!r}")
    if tally.count(ErrorFrame):
        return

    # the user asks a question; the turn ends by the server's VAD or the pipeline's own
    question = question_pcm16(RATE_HZ)
    answered = asyncio.Event()

    async def watch_answer(n: int) -> None:
        await tally.until(lambda: tally.count(TTSAudioRawFrame) > n or failed())
        answered.set()

    audio_before = tally.count(TTSAudioRawFrame)
    watching = asyncio.create_task(watch_answer(audio_before))
    await source.speak(question)
    await source.speak(silence_pcm16(TRAILING_SILENCE_MS, RATE_HZ), stop=answered)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(watching, TIMEOUT_S)
    # with turn detection off the server must not report speech (OpenAI does not); the
    # service would turn it into proposed user turns beside the pipeline's own
    spurious = local and (
        tally.count(ProposedUserStartedSpeakingFrame)
        + tally.count(ProposedUserStoppedSpeakingFrame)
    )
    if spurious:
        report.note("the server sent speech_started/stopped with turn detection off")
    report.mark(
        "audio_in",
        tally.count(UserStartedSpeakingFrame) >= 1
        and tally.count(UserStoppedSpeakingFrame) >= 1
        and not spurious,
    )
    if local:
        # the user's turn started with nothing playing: Pipecat interrupts anyway
        # (input_audio_buffer.clear, response.cancel with no response active)
        report.note(
            f"first user turn: {tally.count(InterruptionFrame)} interruption(s) "
            "with nothing playing"
        )
    got_reply = tally.count(TTSAudioRawFrame) > audio_before
    report.mark("reply_audio", got_reply)
    if not got_reply:
        return
    # the user talks over the reply once it has played a moment (a barge-in); the turn
    # they take is answered in its turn
    await asyncio.sleep(BARGE_IN_AFTER_MS / 1000)
    interruptions = tally.count(InterruptionFrame)
    user_turns = tally.count(UserStoppedSpeakingFrame)
    turn_ended = asyncio.Event()

    async def watch_turn() -> None:
        await tally.until(lambda: tally.count(UserStoppedSpeakingFrame) > user_turns or failed())
        turn_ended.set()

    watching = asyncio.create_task(watch_turn())
    await source.speak(question)
    await source.speak(silence_pcm16(TRAILING_SILENCE_MS, RATE_HZ), stop=turn_ended)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(watching, TIMEOUT_S)
    replies, audio_before = tally.count(LLMFullResponseEndFrame), tally.count(TTSAudioRawFrame)
    await tally.until(lambda: ended(replies + 1) and tally.count(TTSAudioRawFrame) > audio_before)
    text = "".join(tally.text)
    report.mark("transcripts", bool(text.strip()))
    report.note(
        f"replies: {tally.audio_ms - greeting_ms:.0f} ms of audio, text "
        f"{text[len(greeting_text) :]!r}; user transcripts {tally.user_transcripts}"
    )
    barged = (
        tally.count(InterruptionFrame) > interruptions
        and tally.count(UserStoppedSpeakingFrame) > user_turns
        and tally.count(TTSAudioRawFrame) > audio_before
    )
    report.mark("interruption", barged and tally.count(ErrorFrame) == 0)
