"""MiniCPM-o 4.5 without a server: the test double's contract, the plugin's mapping and
validation, the options, and the real factory's refusal to start where it cannot run."""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from minicpmo_double import (
    DoubleDuplexFactory,
    MiniCPMODuplexDouble,
    UpstreamContractViolation,
)
from minicpmo_server import data_url, voice_wav
from PIL import Image

from omniduplex.clients.minicpmo_4_5 import create_duplex_session_config
from omniduplex.clients.presets import minicpmo_4_5_session
from omniduplex.config.pipeline import load_deploy_config
from omniduplex.engine.duplex.contracts import DuplexFence, stage_request_id
from omniduplex.engine.duplex.plugin import (
    DuplexRuntimeConfigError,
    InputImage,
    InputImageError,
    ModelAudio,
    ModelError,
    ModelListen,
    ModelSpeak,
    ModelText,
    load_duplex_plugin,
)
from omniduplex.engine.stage import StageInput
from omniduplex.model_executor.models.minicpmo_4_5 import stage as stage_module
from omniduplex.model_executor.models.minicpmo_4_5.options import MiniCPMO45Options
from omniduplex.model_executor.models.minicpmo_4_5.plugin import MiniCPMO45DuplexPlugin
from omniduplex.model_executor.models.minicpmo_4_5.upstream import (
    MiniCPMOUnavailableError,
    TransformersDuplexFactory,
    missing_prerequisites,
)

FIRST = np.zeros(16_560, np.float32)
UNIT = np.zeros(16_000, np.float32)


def prepared(script=("L",), **settings) -> MiniCPMODuplexDouble:
    double = MiniCPMODuplexDouble(list(script), [], **settings)
    double.prepare(prefix_system_prompt="hi")
    return double


# ---- the double enforces upstream's contract ---------------------------------------


def test_the_double_has_upstreams_signatures() -> None:
    generate = inspect.signature(MiniCPMODuplexDouble.streaming_generate).parameters
    assert list(generate)[1:] == [
        "prompt_wav_path",
        "max_new_speak_tokens_per_chunk",
        "decode_mode",
        "temperature",
        "top_k",
        "top_p",
        "listen_prob_scale",
        "listen_top_k",
        "text_repetition_penalty",
        "text_repetition_window_size",
    ]
    prefill = inspect.signature(MiniCPMODuplexDouble.streaming_prefill).parameters
    assert list(prefill)[1:] == [
        "audio_waveform",
        "frame_list",
        "text_list",
        "max_slice_nums",
        "batch_vision_feed",
    ]
    prepare = inspect.signature(MiniCPMODuplexDouble.prepare).parameters
    assert list(prepare)[1:] == [
        "prefix_system_prompt",
        "ref_audio",
        "prompt_wav_path",
        "context_previous_marker",
        "kwargs",
    ]
    assert generate["top_k"].default == 100  # upstream's, not the deployment's 20
    with pytest.raises(TypeError):
        prepared().streaming_generate(temp=0.5)  # not upstream's keyword


@pytest.mark.parametrize(
    ("act", "message"),
    [
        (lambda d: d.streaming_prefill(audio_waveform=UNIT), "unit 0 has 16000 samples"),
        (lambda d: d.streaming_prefill(audio_waveform=FIRST.astype(np.float64)), "float32"),
        (lambda d: d.streaming_prefill(audio_waveform=np.zeros((2, 8280), np.float32)), "1-D"),
        (lambda d: d.streaming_generate(), "without a streaming_prefill"),
        (
            lambda d: d.prepare(prefix_system_prompt="again"),
            "prepare called twice",
        ),
        (
            lambda d: d.streaming_prefill(audio_waveform=FIRST, frame_list=["jpeg"]),
            "RGB PIL images",
        ),
        (lambda d: d.streaming_prefill(audio_waveform=FIRST, frame_list=[]), "non-empty"),
        (
            lambda d: d.streaming_prefill(audio_waveform=FIRST, text_list=["hi"]),
            "no text input",
        ),
    ],
)
def test_the_double_refuses_calls_upstream_does_not_support(act, message) -> None:
    double = prepared()
    with pytest.raises(UpstreamContractViolation, match=message):
        act(double)
    assert double._violations  # recorded as well as raised


def test_the_double_wants_1035_ms_first_then_1000_ms_and_a_generate_per_prefill() -> None:
    double = prepared()
    assert double.streaming_prefill(audio_waveform=FIRST)["success"]
    with pytest.raises(UpstreamContractViolation, match="twice without streaming_generate"):
        double.streaming_prefill(audio_waveform=UNIT)
    double = prepared()
    double.streaming_prefill(audio_waveform=FIRST)
    double.streaming_generate()
    with pytest.raises(UpstreamContractViolation, match="unit 1 has 16560 samples"):
        double.streaming_prefill(audio_waveform=FIRST)
    double.streaming_prefill(audio_waveform=UNIT)  # the refused one changed nothing
    double.streaming_generate()


def test_prepare_takes_plain_instructions_and_nothing_upstream_would_drop() -> None:
    fresh = MiniCPMODuplexDouble([], [])
    context = fresh.prepare(
        prefix_system_prompt="Be kind.",
        ref_audio=np.ones(1600, np.float32),
        prompt_wav_path="voice.wav",
    )
    assert context == (
        "<|im_start|>system\nBe kind.\n<|audio_start|>[audio embedding]<|audio_end|><|im_end|>"
    )
    with pytest.raises(UpstreamContractViolation, match="wrapped twice"):
        MiniCPMODuplexDouble([], []).prepare(prefix_system_prompt="<|im_start|>system\nhi")
    with pytest.raises(UpstreamContractViolation, match="swallows them unread"):
        MiniCPMODuplexDouble([], []).prepare(prefix_system_prompt="hi", suffix_system_prompt="x")


def test_break_event_semantics() -> None:
    double = prepared(["S:one", "S:two"])
    double.streaming_prefill(audio_waveform=FIRST)
    double.set_break_event()
    broken = double.streaming_generate()  # a prefilled unit generates nothing once broken
    assert broken["is_listen"] and broken["end_of_turn"] and broken["text"] == ""
    with pytest.raises(UpstreamContractViolation, match="while the break event is set"):
        double.streaming_prefill(audio_waveform=UNIT)
    double.clear_break_event()
    double.streaming_prefill(audio_waveform=UNIT)
    spoken = double.streaming_generate()
    assert not spoken["is_listen"] and spoken["text"] == "one"
    assert spoken["audio_waveform"].dtype == np.float32 and spoken["audio_waveform"].size == 24_000
    assert double.break_set_at == [1]
    # A broken unit uses up no forced listen and leaves the model's turn open.
    forced = prepared(["S:one", "L", "E:two"], force_listen_count=1)
    forced.streaming_prefill(audio_waveform=FIRST)
    forced.set_break_event()
    forced.streaming_generate()
    forced.clear_break_event()
    answers = []
    for _ in range(4):
        forced.streaming_prefill(audio_waveform=UNIT)
        answers.append(forced.streaming_generate())
    assert [(a["is_listen"], a["text"]) for a in answers] == [
        (True, ""),  # the forced listen
        (False, "one"),
        (False, ""),  # "L" inside a turn: upstream speaks on (<|tts_bos|>)
        (False, "two"),
    ]
    assert answers[-1]["end_of_turn"]
    text_only = prepared(["E:hi"], generate_audio=False)
    text_only.streaming_prefill(audio_waveform=FIRST)
    assert text_only.streaming_generate()["audio_waveform"] is None


def test_nothing_after_session_stop_and_nothing_on_an_event_loop() -> None:
    double = prepared()
    double.set_session_stop()
    with pytest.raises(UpstreamContractViolation, match="after set_session_stop"):
        double.streaming_prefill(audio_waveform=FIRST)
    on_loop = prepared()

    async def step_on_the_loop() -> None:
        on_loop.streaming_prefill(audio_waveform=FIRST)

    with pytest.raises(UpstreamContractViolation, match="asyncio loop"):
        asyncio.run(step_on_the_loop())


def test_the_double_refuses_keywords_upstream_does_not_take() -> None:
    with pytest.raises(UpstreamContractViolation, match="unknown MiniCPMODuplex keyword"):
        MiniCPMODuplexDouble([], [], chunk_seconds=1)
    # The standalone constructor's keywords: as_duplex does not read them.
    with pytest.raises(UpstreamContractViolation, match="as_duplex would ignore them"):
        MiniCPMODuplexDouble([], [], attn_implementation="sdpa")
    factory = DoubleDuplexFactory(MiniCPMO45Options(), script=["L"])
    options = MiniCPMO45Options()
    factory.open(0, options.upstream_kwargs())  # everything the stage passes is upstream's
    with pytest.raises(UpstreamContractViolation, match="opened twice"):
        factory.open(0, options.upstream_kwargs())


# ---- the plugin ---------------------------------------------------------------------


def plugin(**options) -> MiniCPMO45DuplexPlugin:
    return MiniCPMO45DuplexPlugin(options)


def test_the_data_plane_maps_units_onto_speak_audio_and_listen() -> None:
    project = plugin().data_plane.project
    audio = np.ones(24_000, np.float32)
    opening = project(
        {"kind": "unit", "opens": True, "closes": False, "audio": audio, "text": "Hi"}
    )
    assert [type(r) for r in opening] == [ModelSpeak, ModelAudio]
    assert opening[1].text == "Hi" and opening[1].samples.size == 24_000
    ending = project({"kind": "unit", "opens": False, "closes": True, "audio": audio, "text": "."})
    assert [type(r) for r in ending] == [ModelAudio, ModelListen]
    closing_listen = project(
        {"kind": "unit", "opens": False, "closes": True, "audio": None, "text": ""}
    )
    assert [type(r) for r in closing_listen] == [ModelListen]
    text_only = project(
        {"kind": "unit", "opens": True, "closes": False, "audio": None, "text": "a"}
    )
    assert [type(r) for r in text_only] == [ModelSpeak, ModelText]
    assert project({"kind": "superseded"}) == []
    assert isinstance(project({"kind": "bogus"})[0], ModelError)


def test_each_epoch_opens_its_stage_request_with_the_session_config() -> None:
    p = plugin()
    state = p.create_session_state(
        {"instructions": "Be kind.", "temperature": 0.4, "extra_body": {"top_k": 3}}
    )
    first = p.plan_input_unit(state, UNIT, fence=DuplexFence("s", 0))
    assert first["config"]["instructions"] == "Be kind."
    assert first["config"]["temperature"] == 0.4 and first["config"]["top_k"] == 3
    assert first["audio"].size == 16_000
    assert "config" not in p.plan_input_unit(state, UNIT, fence=DuplexFence("s", 0))
    assert "config" in p.plan_input_unit(state, UNIT, fence=DuplexFence("s", 1))
    with pytest.raises(ValueError, match="16000-sample units"):
        p.plan_input_unit(state, np.zeros(1600, np.float32), fence=DuplexFence("s", 1))


def test_capabilities_are_model_native_with_barge_in_and_1s_units() -> None:
    caps = plugin(slots=2).capabilities(max_sessions=2).as_dict()
    assert caps["implementation_level"] == "model_native_duplex"
    assert caps["chunk_period_ms"] == 1000
    assert caps["supports_barge_in"] is True
    assert caps["supports_image_input"] is True
    assert caps["optional_input_modalities"] == ["video"]
    assert caps["input_sample_rate_hz"] == 16_000 and caps["output_sample_rate_hz"] == 24_000


@pytest.mark.parametrize(
    ("config", "param", "code"),
    [
        ({"temperature": 0}, "temperature", "invalid_duplex_runtime_config"),
        ({"extra_body": {"top_k": 0}}, "top_k", "invalid_duplex_runtime_config"),
        ({"extra_body": {"top_k": True}}, "top_k", "invalid_duplex_runtime_config"),
        ({"extra_body": {"top_p": 0}}, "top_p", "invalid_duplex_runtime_config"),
        (
            {"extra_body": {"listen_prob_scale": -1}},
            "listen_prob_scale",
            "invalid_duplex_runtime_config",
        ),
        (
            {"extra_body": {"force_listen_count": 1.5}},
            "force_listen_count",
            "invalid_duplex_runtime_config",
        ),
        ({"modalities": ["video"]}, "modalities", "invalid_duplex_runtime_config"),
        ({"voice": "nobody"}, "voice", "invalid_duplex_runtime_config"),
        ({"ref_audio": "https://example.com/v.wav"}, "ref_audio", "unsupported_ref_audio_path"),
        ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio", "invalid_duplex_runtime_config"),
    ],
)
def test_bad_session_settings_are_refused_with_typed_errors(config, param, code) -> None:
    with pytest.raises(DuplexRuntimeConfigError) as refused:
        plugin().validate_session_config(config)
    assert refused.value.param == param
    assert refused.value.code == code


def test_a_ref_audio_data_url_is_accepted() -> None:
    plugin().validate_session_config({"ref_audio": data_url(voice_wav(0.5))})


def test_the_deployment_loads_its_plugin_and_the_preset_matches_it() -> None:
    pipeline = load_deploy_config("minicpmo-4.5")
    loaded = load_duplex_plugin(pipeline.duplex_plugin, pipeline.stages[0].model.kwargs)
    assert loaded.plugin_id == "minicpmo_4_5"
    assert pipeline.duplex_session["max_sessions"] == 4 == loaded.minicpmo_options.slots
    assert loaded.minicpmo_options.sampling.temperature == 0.7
    session = create_duplex_session_config(voice="house", instructions="x")
    assert session["audio"]["input"]["format"] == {"type": "pcm_f32le", "rate": 16_000}
    assert session["audio"]["output"]["format"]["rate"] == 24_000
    assert session["audio"]["input"]["turn_detection"] is None
    assert session["extra_body"] == {"auto_response": False, "force_listen_count": 0}
    assert minicpmo_4_5_session(voice="house", instructions="x") == session


def test_options_refuse_unknown_keys() -> None:
    with pytest.raises(ValueError, match="unknown minicpmo option"):
        MiniCPMO45Options.from_mapping({"slotz": 2})
    with pytest.raises(ValueError, match="unknown minicpmo sampling option"):
        MiniCPMO45Options.from_mapping({"sampling": {"temprature": 1}})


# ---- the real factory refuses to start where it cannot run ------------------------


def test_the_real_factory_names_everything_that_is_missing(tmp_path: Path) -> None:
    options = MiniCPMO45Options(model_dir=None)
    missing = missing_prerequisites(options)
    assert any("model_dir is not set" in m for m in missing)
    assert any("no voice" in m for m in missing)
    with pytest.raises(MiniCPMOUnavailableError, match=r"minicpmo-4\.5 cannot start: model_dir"):
        TransformersDuplexFactory(options)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "v.wav").write_bytes(voice_wav())
    ready = MiniCPMO45Options(model_dir=str(tmp_path), voice_dir=str(tmp_path), default_voice="v")
    # What is left is this machine's: no CUDA (or no torch) and no transformers.
    assert not any("model_dir" in m or "voice" in m for m in missing_prerequisites(ready))
    gone = MiniCPMO45Options(model_dir=str(tmp_path / "nowhere"))
    assert any("does not exist" in m for m in missing_prerequisites(gone))


def test_serving_it_without_cuda_or_a_checkpoint_exits_at_once_naming_what_is_missing() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "omniduplex.entrypoints.cli",
            "serve",
            "minicpmo-4.5",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: it fails before loading anything
    )
    assert done.returncode != 0
    assert "minicpmo-4.5 cannot start" in done.stderr
    assert "model_dir is not set" in done.stderr


# ---- the stage on its own -------------------------------------------------------------


def test_a_failed_conversation_does_not_come_back_with_default_settings(monkeypatch) -> None:
    model = stage_module.MiniCPMO45StageModel(
        upstream_factory="minicpmo_double:DoubleDuplexFactory",
        upstream_factory_kwargs={"script": ["L"]},
        device="cpu",
    )
    model.stage_index = 0
    request_id = stage_request_id(DuplexFence("s", 0), "stage0")
    monkeypatch.setattr(stage_module, "FIRST_UNIT_PAD_SAMPLES", 0)
    model.add_request(request_id, StageInput({"audio": UNIT, "config": {"instructions": "x"}}))
    (failed,) = model.step(model.ready_request_ids())
    assert failed.error is not None and "unit 0 has 16000 samples" in failed.error
    assert model.live_request_ids == ()
    (double,) = model.factory.released  # stopped and handed back
    assert double.is_session_stop_set()
    # The session's next unit (no config: same epoch) re-opens the id: refused, loudly.
    with pytest.raises(ValueError, match="failed earlier in this epoch"):
        model.add_request(request_id, StageInput({"audio": UNIT}))


def test_a_unit_prefilled_before_a_cancel_does_not_end_the_muted_turn() -> None:
    """Upstream answers a broken unit "listen, end of turn" while the model's own turn
    goes on: the rest of the interrupted turn stays muted until the model ends it."""
    model = stage_module.MiniCPMO45StageModel(
        upstream_factory="minicpmo_double:DoubleDuplexFactory",
        upstream_factory_kwargs={"script": ["S:one", "S: two", "S: three", "E: four.", "E:new"]},
        device="cpu",
    )
    model.stage_index = 0
    old = stage_request_id(DuplexFence("s", 0), "stage0")
    model.add_request(old, StageInput({"audio": UNIT, "config": {"instructions": "x"}}))
    model.step(model.ready_request_ids())  # prefill
    (spoken,) = model.step(model.ready_request_ids())  # generate: "one" opens a response
    assert spoken.data["opens"] and spoken.data["text"] == "one"
    model.update_request(old, StageInput({"audio": UNIT}))
    model.step(model.ready_request_ids())  # the next unit is prefilled, not generated yet
    new = stage_request_id(DuplexFence("s", 1), "stage0")
    model.add_request(new, StageInput({"audio": UNIT, "config": {"instructions": "x"}}))
    for _ in range(3):
        model.update_request(new, StageInput({"audio": UNIT}))
    outputs = []
    while model.ready_request_ids():
        outputs += model.step(model.ready_request_ids())
    units = [o.data for o in outputs if o.data.get("kind") == "unit"]
    # " two" was broken, " three" and " four." are muted: only the next turn is heard.
    assert [(u["opens"], u["text"]) for u in units] == [(True, "new")]
    (double,) = [d for _, d in model.factory.opened]
    assert not model.factory.violations and double.break_set_at == [2]
    model.close()


def test_the_gpu_timing_script_runs_against_the_double(tmp_path: Path) -> None:
    """benchmarks/minicpmo_units.py is for a GPU machine; its CPU smoke mode keeps it
    from rotting (its timings here mean nothing)."""
    out = tmp_path / "units.json"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "minicpmo_units.py"
    command = [sys.executable, str(script), "--double", "--sessions", "2", "--units", "5"]
    done = subprocess.run(
        [*command, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert [row["sessions"] for row in report["by_sessions"]] == [1, 2]
    # the double's script: listen, then three speak units, per conversation
    assert [row["speak_units"] for row in report["by_sessions"]] == [3, 6]


def png(color: tuple[int, int, int]) -> InputImage:
    buffer = io.BytesIO()
    Image.new("RGB", (3, 2), color).save(buffer, "PNG")
    return InputImage("image/png", buffer.getvalue())


def test_a_unit_dropped_from_the_backlog_passes_its_images_on() -> None:
    model = stage_module.MiniCPMO45StageModel(
        upstream_factory="minicpmo_double:DoubleDuplexFactory",
        upstream_factory_kwargs={"script": ["L"]},
        device="cpu",
        max_queued_units=1,
    )
    model.stage_index = 0
    request_id = stage_request_id(DuplexFence("s", 0), "stage0")
    red, green = png((255, 0, 0)), png((0, 255, 0))
    # Three units reach the stage before it steps: the backlog keeps only the newest.
    model.add_request(
        request_id, StageInput({"audio": UNIT, "config": {"instructions": "x"}, "images": (red,)})
    )
    model.update_request(request_id, StageInput({"audio": UNIT, "images": (green,)}))
    model.update_request(request_id, StageInput({"audio": UNIT}))
    while model.ready_request_ids():
        model.step(model.ready_request_ids())
    (double,) = [d for _, d in model.factory.opened]
    assert model.stats.dropped_units == 2
    (frames,) = double.prefill_frames
    assert [frame.getpixel((0, 0)) for frame in frames] == [(255, 0, 0), (0, 255, 0)]
    assert not model.factory.violations
    model.close()


def test_the_plugin_takes_all_images_or_none() -> None:
    minicpmo = plugin()
    state = minicpmo.create_session_state({})
    broken = InputImage("image/png", png((1, 1, 1)).data[:30])
    with pytest.raises(InputImageError) as refused:
        minicpmo.take_input_images(state, [png((9, 9, 9)), broken])
    assert refused.value.index == 1
    assert state.pending_images == []  # the readable one was not kept either
    minicpmo.take_input_images(state, [png((9, 9, 9))])
    data = state.plan_unit(UNIT, unit_samples=16_000, fence=DuplexFence("s", 0), model="m")
    assert len(data["images"]) == 1
    assert "images" not in state.plan_unit(
        UNIT, unit_samples=16_000, fence=DuplexFence("s", 0), model="m"
    )
