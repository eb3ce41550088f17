"""LoopbackDuplexPlugin: declared shape, planning a response, projecting stage outputs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from omniduplex.engine.duplex.contracts import DuplexFence
from omniduplex.engine.duplex.plugin import (
    DuplexRuntimeConfigError,
    ModelAudio,
    ModelError,
    ModelListen,
    ModelResult,
    ModelText,
    ResponseRequest,
    load_duplex_plugin,
)
from omniduplex.engine.stage import StageInput
from omniduplex.model_executor.models.loopback import LoopbackStageModel
from omniduplex.model_executor.models.loopback.plugin import (
    LoopbackDuplexPlugin,
    LoopbackSessionState,
)

PLUGIN_PATH = "omniduplex.model_executor.models.loopback.plugin:LoopbackDuplexPlugin"


def tone(seconds: float, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(round(seconds * 16_000)) / 16_000
    return (amplitude * np.sin(2 * np.pi * 300 * t)).astype(np.float32)


def request(
    audio: np.ndarray, text: str = "", session: dict | None = None, **options: object
) -> ResponseRequest:
    return ResponseRequest(
        fence=DuplexFence("sess-1", epoch=0, turn_id=1),
        response_id="resp_1",
        input_audio=audio,
        input_text=text,
        history=(),
        options=options,
        session=session or {},
    )


def run_response(
    plugin: LoopbackDuplexPlugin,
    req: ResponseRequest,
    state: LoopbackSessionState | None = None,
) -> list[ModelResult]:
    """plan_response -> LoopbackStageModel -> data plane, as the engine chains them."""
    state = state or plugin.create_session_state({})
    plan = plugin.plan_response(state, req)
    assert plan["response_id"] == "resp_1"
    model = LoopbackStageModel(replace(plugin.loopback_options, realtime=False))
    model.add_request("r", StageInput(data=plan))
    results: list[ModelResult] = []
    while ready := model.ready_request_ids():
        for output in model.step(ready):
            results.extend(plugin.data_plane.project(output.data))
    return results


def test_declared_shape() -> None:
    plugin = load_duplex_plugin(PLUGIN_PATH, {"unit_ms": 40, "realtime": False})
    assert isinstance(plugin, LoopbackDuplexPlugin)
    assert plugin.plugin_id == "loopback"
    assert (plugin.input_sample_rate_hz, plugin.output_sample_rate_hz) == (16_000, 24_000)
    assert plugin.streams_input is False

    caps = plugin.capabilities(max_sessions=64)
    assert caps.implementation_level == "turn_based_duplex"
    assert caps.supports_barge_in and caps.supports_session_resume
    assert caps.supports_audio_truncate and caps.supports_text_input
    assert caps.supports_text_only_turn and caps.supports_chat_completions
    assert caps.accepts_input_modality("text") and caps.accepts_input_modality("audio")
    assert caps.chunk_period_ms == 40
    assert "model_native" not in caps.signal_sources


def test_default_options_and_bad_options() -> None:
    assert LoopbackDuplexPlugin().capabilities(max_sessions=1).chunk_period_ms == 100
    with pytest.raises(ValueError, match="unknown loopback option"):
        LoopbackDuplexPlugin({"chunk_ms": 100})


def test_speech_response_projects_to_audio_units() -> None:
    plugin = LoopbackDuplexPlugin()
    results = run_response(plugin, request(tone(0.5)))
    assert all(isinstance(r, ModelAudio) for r in results)
    assert [len(r.samples) for r in results] == [2400] * 5
    assert [r.end_of_turn for r in results] == [False] * 4 + [True]
    assert [r.text for r in results] == ["loop ", "back ", "unit-3 ", "unit-4 ", "unit-5"]


def test_silence_projects_to_listen() -> None:
    results = run_response(LoopbackDuplexPlugin(), request(np.zeros(8000, np.float32)))
    assert results == [ModelListen(reason="silence_or_noise")]


def test_text_input_is_echoed() -> None:
    plugin = LoopbackDuplexPlugin()
    results = run_response(plugin, request(np.zeros(0, np.float32), text="hi there"))
    assert [r.text for r in results] == ["hi ", "there"]
    assert all(isinstance(r, ModelAudio) for r in results)


def test_text_only_session_gets_text_results() -> None:
    plugin = LoopbackDuplexPlugin()
    config = {"modalities": ["text"]}
    state = plugin.create_session_state(config)
    results = run_response(plugin, request(tone(0.2), text="two words", session=config), state)
    assert results == [ModelText(delta="two "), ModelText(delta="words", end_of_turn=True)]
    # A response's own modalities win over the session's.
    both = request(tone(0.2), session=config, modalities=["audio", "text"])
    results = run_response(plugin, both, state)
    assert all(isinstance(r, ModelAudio) for r in results)
    audio = request(tone(0.2), session=config, output_modalities=["audio"])
    results = run_response(plugin, audio, state)
    assert all(isinstance(r, ModelAudio) for r in results)
    assert state.responses_planned == 3


def test_projection_of_each_kind() -> None:
    project = LoopbackDuplexPlugin().data_plane.project
    audio = np.ones(4, np.float32)
    (result,) = project({"kind": "audio", "audio": audio, "text": "a ", "end_of_turn": True})
    assert isinstance(result, ModelAudio)
    assert result.samples.tobytes() == audio.tobytes() and result.end_of_turn
    assert project({"kind": "text", "text": "x"}) == [ModelText(delta="x")]
    assert project({"kind": "listen", "reason": "r"}) == [ModelListen(reason="r")]
    assert project({"kind": "error", "code": "c", "message": "m"}) == [ModelError("c", "m")]
    (unknown,) = project({"kind": "mystery"})
    assert isinstance(unknown, ModelError) and unknown.code == "loopback_unknown_output"


def test_session_state_and_config_validation() -> None:
    plugin = LoopbackDuplexPlugin()
    state = plugin.create_session_state({})
    assert isinstance(state, LoopbackSessionState)
    plugin.validate_session_config({"modalities": ["audio", "text"]})
    plugin.validate_session_config({})
    with pytest.raises(DuplexRuntimeConfigError) as err:
        plugin.validate_session_config({"modalities": ["video"]})
    assert (err.value.code, err.value.param) == ("invalid_duplex_runtime_config", "modalities")
