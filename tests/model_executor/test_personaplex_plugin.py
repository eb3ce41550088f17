"""The PersonaPlex plugin, data plane, deploy files and client preset (no torch needed)."""

from __future__ import annotations

import numpy as np
import pytest

from omniduplex.clients.personaplex import create_duplex_session_config
from omniduplex.config import load_deploy_config
from omniduplex.engine.duplex.contracts import DuplexFence
from omniduplex.engine.duplex.plugin import (
    DuplexRuntimeConfigError,
    ModelAudio,
    ModelListen,
    ModelSpeak,
    load_duplex_plugin,
)
from omniduplex.model_executor.models.personaplex.options import PersonaPlexOptions
from omniduplex.model_executor.models.personaplex.plugin import (
    PersonaPlexDuplexPlugin,
    PersonaPlexSessionState,
)

FRAME = 1920


def plugin(**options: object) -> PersonaPlexDuplexPlugin:
    return PersonaPlexDuplexPlugin({"model": "tiny", **options})


def test_capabilities_describe_a_model_native_80ms_model_without_barge_in_or_resume() -> None:
    caps = plugin().capabilities(max_sessions=4)
    assert caps.implementation_level == "model_native_duplex"
    assert caps.supports_barge_in is False
    assert caps.supports_session_resume is False
    assert caps.supports_text_input is False
    assert caps.chunk_period_ms == 80
    assert caps.signal_sources == ("model_native",)
    assert caps.as_dict()["input_audio_formats"] == ["pcm_f32le", "pcm16"]
    p = plugin()
    assert p.streams_input is True
    assert p.input_sample_rate_hz == p.output_sample_rate_hz == 24_000


def test_data_plane_maps_turn_phases_to_speak_audio_and_listen() -> None:
    project = plugin().data_plane.project
    audio = np.zeros(FRAME, np.float32)
    speak = project({"kind": "frame", "phase": "speak", "audio": audio, "text": "hi "})
    assert isinstance(speak[0], ModelSpeak) and isinstance(speak[1], ModelAudio)
    assert speak[1].text == "hi " and speak[1].samples.shape == (FRAME,)
    middle = project({"kind": "frame", "phase": "speaking", "audio": audio, "text": ""})
    assert len(middle) == 1 and isinstance(middle[0], ModelAudio)
    listen = project({"kind": "frame", "phase": "listen", "audio": audio, "text": ""})
    assert isinstance(listen[0], ModelAudio) and listen[1] == ModelListen(reason="model_listen")
    assert project({"kind": "superseded"}) == []
    assert project({"kind": "bogus"})[0].code == "personaplex_unknown_output"


def test_the_first_unit_of_each_epoch_carries_the_session_config() -> None:
    p = plugin()
    config = {
        "instructions": "You enjoy having a good conversation.",
        "voice": None,
        "temperature": 0.6,
        "extra_body": {"top_k": 50, "seed": 4, "temperature_text": 0.5},
    }
    p.validate_session_config(config)
    state = p.create_session_state(config)
    assert isinstance(state, PersonaPlexSessionState)
    frame = np.zeros(FRAME, np.float32)
    first = p.plan_input_unit(state, frame, fence=DuplexFence("s", 0))
    assert first["config"]["persona"] == config["instructions"]
    assert first["config"]["temperature"] == 0.6
    assert first["config"]["top_k"] == 50 and first["config"]["seed"] == 4
    assert "config" not in p.plan_input_unit(state, frame, fence=DuplexFence("s", 0))
    assert "config" in p.plan_input_unit(state, frame, fence=DuplexFence("s", 1))
    with pytest.raises(ValueError):
        p.plan_input_unit(state, np.zeros(100, np.float32), fence=DuplexFence("s", 1))
    with pytest.raises(NotImplementedError):
        p.plan_response(state, None)  # type: ignore[arg-type]


def test_session_settings_the_model_cannot_honour_are_refused(tmp_path) -> None:
    p = plugin()
    with pytest.raises(DuplexRuntimeConfigError) as exc:
        p.validate_session_config({"voice": "alloy"})
    assert exc.value.code == "unsupported_voice" and exc.value.param == "voice"
    with pytest.raises(DuplexRuntimeConfigError):
        p.validate_session_config({"voice": "../etc/passwd"})
    with pytest.raises(DuplexRuntimeConfigError) as exc:
        plugin(voice_prompt_dir=str(tmp_path)).validate_session_config({"voice": "NATF2.pt"})
    assert exc.value.code == "unsupported_voice"
    (tmp_path / "NATF2.wav").write_bytes(b"")
    plugin(voice_prompt_dir=str(tmp_path)).validate_session_config({"voice": "NATF2"})
    for bad in ({"temperature": 5}, {"extra_body": {"top_k": 0}}, {"extra_body": {"seed": "x"}}):
        with pytest.raises(DuplexRuntimeConfigError):
            p.validate_session_config(bad)
    with pytest.raises(ValueError, match="unknown personaplex option"):
        PersonaPlexOptions.from_mapping({"slot": 4})


@pytest.mark.parametrize("name", ["personaplex", "personaplex-tiny"])
def test_deploy_files_load_and_agree_with_the_plugin(name: str) -> None:
    pipeline = load_deploy_config(name)
    stage = pipeline.stages[0]
    options = PersonaPlexOptions.from_mapping(stage.model.kwargs)
    # One tick must step every session: the batch and admission fit the slot table.
    assert stage.max_batch >= options.slots
    assert pipeline.duplex_session["max_sessions"] <= options.slots
    loaded = load_duplex_plugin(pipeline.duplex_plugin, stage.model.kwargs)
    assert loaded.plugin_id == "personaplex"
    assert (options.model == "tiny") == (name == "personaplex-tiny")
    # Stepping runs in a process of its own, off the API event loop's GIL.
    assert stage.worker == "process"
    assert options.realtime and options.max_input_lag_ms // 80 > options.max_backlog_frames


def test_pacing_options_that_could_not_catch_up_are_refused() -> None:
    with pytest.raises(ValueError, match="max_backlog_frames"):
        PersonaPlexOptions(max_backlog_frames=0)
    with pytest.raises(ValueError, match="max_input_lag_ms"):
        PersonaPlexOptions(max_backlog_frames=2, max_input_lag_ms=160)
    with pytest.raises(ValueError, match="tick_grace_ms"):
        PersonaPlexOptions(tick_grace_ms=-1)


def test_client_preset_streams_f32_at_24k_with_voice_and_persona() -> None:
    session = create_duplex_session_config(voice="NATF2", persona="Be kind.", temperature=0.7)
    assert session["voice"] == "NATF2"
    assert session["instructions"] == "Be kind."
    assert session["temperature"] == 0.7
    assert session["audio"]["input"]["format"] == {"type": "pcm_f32le", "rate": 24_000}
    assert session["audio"]["input"]["turn_detection"] is None
    assert session["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24_000}
    assert session["extra_body"]["auto_response"] is False
    merged = create_duplex_session_config(extra_body={"seed": 1})
    assert merged["extra_body"] == {"auto_response": False, "seed": 1}
