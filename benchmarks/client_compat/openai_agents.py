"""The OpenAI Agents SDK's voice agent (``openai-agents``: ``RealtimeAgent`` run by a
``RealtimeRunner``) holding one spoken conversation.

Everything is the SDK's default but where the server is: the runner's default session
settings (voice ``ash``, ``semantic_vad`` turn detection with ``interrupt_response``,
``gpt-4o-mini-transcribe`` input transcription, pcm16), the agent's instructions, and
``model_config={"url": ..., "api_key": ...}`` pointing its WebSocket model at us (the
documented ``RealtimeModelConfig.url``; the SDK appends nothing to it, so it carries
``?model=``). The user speaks through ``session.send_audio`` in real time, the agent's
reply is "played" by the SDK's default playback tracker (real time from its first chunk),
and the user talks over the second reply: the SDK's own barge-in path (it sees
``input_audio_buffer.speech_started``, emits ``audio_interrupted`` and truncates what was
not heard; the server cancels the response). Errors are what the SDK surfaces: every
``RealtimeError`` session event (server ``error`` events, and server events its
validator rejects) and any exception the session raises.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents.realtime import (
    AssistantMessageItem,
    RealtimeAgent,
    RealtimeRunner,
    UserMessageItem,
)

from .report import (
    STEP_TIMEOUT_S,
    CompatReport,
    EventLog,
    Microphone,
    Target,
    package_version,
    question_pcm16,
    transcribes_input,
)

RATE = 24_000  # the SDK's default pcm16
CHUNK_MS = 40
CLIENT = "openai-agents (RealtimeAgent + RealtimeRunner)"
INSTRUCTIONS = "You are a helpful voice assistant. Answer in one short sentence."
# Every flow this driver runs (label -> run_conversation's keyword arguments): the default.
FLOWS: dict[str, dict[str, Any]] = {"default": {}}


def _raw(event: Any) -> dict[str, Any] | None:
    """The server event a ``raw_model_event`` forwards, if it forwards one."""
    if event.type != "raw_model_event" or event.data.type != "raw_server_event":
        return None
    data = event.data.data
    return data if isinstance(data, dict) else None


def _is_raw(kind: str, **fields: Any) -> Any:
    def accept(event: Any) -> bool:
        raw = _raw(event)
        return (
            raw is not None
            and raw.get("type") == kind
            and all(raw.get(k) == v for k, v in fields.items())
        )

    return accept


def _describe_error(error: Any) -> str:
    code = getattr(error, "code", None)
    message = getattr(error, "message", None)
    if code is not None or message is not None:
        return f"RealtimeError: {code}: {message}"
    text = " ".join(str(error).split())
    return f"RealtimeError: {type(error).__name__}: {text[:400]}"


def _transcripts(history: list[Any]) -> tuple[str, str]:
    """The user's and the assistant's last audio transcripts in the SDK's history."""
    user = assistant = ""
    for item in history:
        if isinstance(item, UserMessageItem):
            for part in item.content:
                if getattr(part, "type", None) == "input_audio" and part.transcript:
                    user = part.transcript
        elif isinstance(item, AssistantMessageItem):
            for part in item.content:
                if getattr(part, "type", None) == "audio" and part.transcript:
                    assistant = part.transcript
    return user, assistant


async def run_conversation(target: Target, *, model_name: str | None = None) -> CompatReport:
    """The default flow; ``model_name`` (the SDK's ``model_settings.model_name``, unset by
    default) names the model in the session the runner configures."""
    report = CompatReport(CLIENT, package_version("openai-agents"), target.deployment)
    agent: RealtimeAgent[Any] = RealtimeAgent(name="Assistant", instructions=INSTRUCTIONS)
    if model_name is None:
        runner = RealtimeRunner(agent)
    else:
        runner = RealtimeRunner(agent, config={"model_settings": {"model_name": model_name}})
        report.note(f"model_settings.model_name = {model_name!r}")
    model_config = {"url": f"{target.ws_url}?model={target.model}", "api_key": "unused"}
    try:
        session = await runner.run(model_config=model_config)  # type: ignore[arg-type]
        async with session:
            report.mark("connect")
            await _converse(session, target, report)
        report.mark("close")
    except Exception as exc:  # the SDK raised: that is what a user would see
        report.error(f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}")
    return report


async def _converse(session: Any, target: Target, report: CompatReport) -> None:
    log: EventLog[Any] = EventLog()
    history: list[Any] = []

    async def read() -> None:
        try:
            async for event in session:
                if event.type == "error":
                    report.error(_describe_error(event.error))
                elif event.type == "history_updated":
                    history[:] = list(event.history)
                log.add(event)
        except Exception as exc:  # the session stored an exception and raised it here
            report.error(f"session raised {type(exc).__name__}: {' '.join(str(exc).split())}")

    reader = asyncio.create_task(read())
    mic = Microphone(session.send_audio, RATE, CHUNK_MS)
    try:
        # The runner sent its session.update on connect: the session must now be the
        # agent's (its instructions in force), with nothing refused.
        updated = await log.wait(_is_raw("session.updated"))
        in_force = (_raw(updated) or {}).get("session", {}) if updated is not None else {}
        report.mark(
            "configure",
            updated is not None
            and in_force.get("instructions") == INSTRUCTIONS
            and not report.errors,
        )
        detection = ((in_force.get("audio") or {}).get("input") or {}).get("turn_detection")
        report.note(f"turn detection in force: {detection}")

        # Turn 1: the question; the server decides the turn ended and answers it.
        mic.start()
        mark = len(log)
        await mic.say(question_pcm16(RATE))
        committed = await log.wait(_is_raw("input_audio_buffer.committed"), mark)
        report.mark("audio_in", committed is not None)
        done = await log.wait(_is_raw("response.done"), mark)
        response = (_raw(done) or {}).get("response", {}) if done is not None else {}
        audio = [e for e in log.items[mark:] if e.type == "audio" and e.audio.data]
        report.mark(
            "reply_audio",
            response.get("status") == "completed"
            and any(e.audio.response_id == response.get("id") for e in audio),
        )
        await log.wait(lambda e: e.type == "agent_end", mark)
        user_said, assistant_said = _transcripts(history)
        if transcribes_input(target) and not user_said:
            # the transcript may land in the history just after the reply
            await log.wait(lambda e: e.type == "history_updated" and _transcripts(e.history)[0])
            user_said, assistant_said = _transcripts(history)
        report.note(f"user transcript: {user_said!r}")
        report.note(f"assistant transcript: {assistant_said!r}")
        report.mark(
            "transcripts",
            bool(assistant_said) and (bool(user_said) or not transcribes_input(target)),
        )

        # Turn 2: the question again; the user talks over the reply while it plays.
        mark = len(log)
        await mic.say(question_pcm16(RATE))
        report.mark("interruption", await _talk_over(mic, log, mark, report))
    finally:
        await mic.stop()
        if mic.error is not None:
            report.error(f"send_audio raised {type(mic.error).__name__}: {mic.error}")
        await asyncio.sleep(0)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def _talk_over(mic: Microphone, log: EventLog[Any], mark: int, report: CompatReport) -> bool:
    """Talk over the reply that starts after ``mark``: the SDK must report the audio
    interrupted and truncate the item at what was heard; a response still in progress
    must end cancelled; and the talk-over itself must get its answer."""
    first = await log.wait(lambda e: e.type == "audio" and bool(e.audio.data), mark)
    if first is None:
        report.note("the second question got no audio")
        return False
    response_id = first.audio.response_id
    start = log.index(lambda e: e is first) or mark
    await asyncio.sleep(0.3)  # the user hears the start of it
    active = log.find(_is_raw("response.done"), start) is None
    talking = asyncio.create_task(mic.say(question_pcm16(RATE)))
    interrupted = await log.wait(lambda e: e.type == "audio_interrupted", start)
    truncated = await log.wait(_is_raw("conversation.item.truncated", item_id=first.item_id), start)
    cancelled = True
    if active:
        ended = await log.wait(
            lambda e: _is_raw("response.done")(e) and _raw(e)["response"]["id"] == response_id,
            start,
        )
        status = (_raw(ended) or {}).get("response", {}).get("status") if ended else None
        cancelled = status == "cancelled"
        if not cancelled:
            report.note(f"the talked-over response ended {status!r}, not cancelled")
    await asyncio.wait_for(talking, STEP_TIMEOUT_S)
    answered = await log.wait(
        lambda e: (
            _is_raw("response.done")(e)
            and _raw(e)["response"]["id"] != response_id
            and _raw(e)["response"]["status"] == "completed"
        ),
        start,
    )
    if interrupted is None:
        report.note("the SDK never reported the audio interrupted")
    if truncated is None:
        report.note("no conversation.item.truncated for the talked-over item")
    if answered is None:
        report.note("the talk-over got no completed answer")
    return interrupted is not None and truncated is not None and cancelled and answered is not None
