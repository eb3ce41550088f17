"""PipelineConfig / StageConfig and deploy YAML loading."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from omniduplex.config import (
    DEPLOY_DIR,
    PipelineConfig,
    StageConfig,
    load_deploy_config,
    parse_pipeline_config,
)
from omniduplex.engine.duplex.mcp import McpConfig
from omniduplex.engine.stage import StageModelSpec

SPEC = StageModelSpec("pkg.mod:Model")

VALID = """
name: echo
served_model_name: echo-1
session_mode: turn
duplex_session: {max_sessions: 4, idle_ttl_s: null, custom: [1, 2]}
stages:
  - name: upper
    worker: thread
    max_batch: 8
    model:
      factory: pkg.upper:Upper
      kwargs: {chunk_size: 4}
  - name: tts
    worker: process
    max_restarts: 0
    model: pkg.tts:Speaker
"""


def write(tmp_path: Path, text: str, name: str = "deploy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_loads_a_deploy_file(tmp_path):
    config = load_deploy_config(write(tmp_path, VALID))
    assert config.name == "echo" and config.served_model_name == "echo-1"
    assert config.session_mode == "turn" and config.duplex_plugin is None
    # Passed through untouched, including keys this layer does not know.
    assert config.duplex_session == {"max_sessions": 4, "idle_ttl_s": None, "custom": [1, 2]}
    upper, tts = config.stages
    assert upper == StageConfig(
        "upper", StageModelSpec("pkg.upper:Upper", {"chunk_size": 4}), "thread", 8, 3
    )
    assert tts.worker == "process" and tts.max_batch == 8 and tts.max_restarts == 0
    assert tts.model == StageModelSpec("pkg.tts:Speaker")
    assert config.final_stage_index == 1


def test_defaults():
    config = PipelineConfig(name="p", stages=[StageConfig("s", SPEC)])
    assert config.stages == (StageConfig("s", SPEC, "thread", 8, 3),)
    assert config.session_mode == "turn"
    assert config.served_model_name == "p"
    assert config.duplex_session == {}


def test_duplex_declaration():
    config = PipelineConfig(
        name="p", stages=[StageConfig("s", SPEC)], duplex_plugin="pkg:Plugin", session_mode="duplex"
    )
    assert config.session_mode == "duplex"
    turn = PipelineConfig(
        name="p", stages=[StageConfig("s", SPEC)], duplex_plugin="pkg:Plugin", session_mode="turn"
    )
    assert turn.session_mode == "turn" and turn.duplex_plugin == "pkg:Plugin"


def test_resolves_names_in_the_deploy_folder(tmp_path):
    write(tmp_path, VALID, "echo.yaml")
    assert load_deploy_config("echo", deploy_dir=tmp_path).name == "echo"
    assert load_deploy_config("echo.yaml", deploy_dir=tmp_path).name == "echo"
    with pytest.raises(FileNotFoundError, match=r"'nope' not found.*known names: echo"):
        load_deploy_config("nope", deploy_dir=tmp_path)
    with pytest.raises(FileNotFoundError):
        load_deploy_config(tmp_path / "missing" / "x.yaml")


def test_shipped_deploy_folder_exists():
    assert DEPLOY_DIR.is_dir()
    for path in DEPLOY_DIR.glob("*.yaml"):
        load_deploy_config(path.stem)


def test_base_config_overrides_and_merges(tmp_path):
    write(tmp_path, VALID, "base.yaml")
    path = write(
        tmp_path,
        """
        base_config: base.yaml
        name: echo-turn
        duplex_session: {max_sessions: 2}
        """,
        "child.yaml",
    )
    config = load_deploy_config(path)
    assert config.name == "echo-turn"
    assert config.duplex_session == {"max_sessions": 2, "idle_ttl_s": None, "custom": [1, 2]}
    assert [s.name for s in config.stages] == ["upper", "tts"]


def test_the_mcp_block_is_read_and_a_profile_changes_one_key(tmp_path):
    write(
        tmp_path,
        VALID + "mcp: {allowed_urls: ['http://127.0.0.1:8123/'], call_timeout_s: 5}\n",
        "base.yaml",
    )
    base = load_deploy_config(tmp_path / "base.yaml")
    assert base.mcp == McpConfig(allowed_urls=("http://127.0.0.1:8123/",), call_timeout_s=5)
    path = write(tmp_path, "base_config: base.yaml\nmcp: {max_result_chars: 100}\n", "child.yaml")
    child = load_deploy_config(path).mcp
    assert child.allowed_urls == ("http://127.0.0.1:8123/",) and child.call_timeout_s == 5
    assert child.max_result_chars == 100
    assert load_deploy_config(write(tmp_path, VALID, "plain.yaml")).mcp == McpConfig()


def test_base_config_cycle_is_an_error(tmp_path):
    write(tmp_path, "base_config: b.yaml\n", "a.yaml")
    write(tmp_path, "base_config: a.yaml\n", "b.yaml")
    with pytest.raises(ValueError, match="base_config cycle"):
        load_deploy_config(tmp_path / "a.yaml")


STAGE = "stages: [{name: s, model: {factory: 'pkg:M'}}]"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "must be a mapping"),
        ("name: x\nstages: [{name: s, model: 'pkg:M'}]\ncolour: red\n", "unknown key.*colour"),
        (f"{STAGE}\n", "name: missing"),
        ("name: x\n", "stages must be a non-empty list"),
        ("name: x\nstages: []\n", "stages must be a non-empty list"),
        ("name: x\nstages: [{model: 'pkg:M'}]\n", r"stages\[0\]\.name: missing"),
        ("name: x\nstages: [{name: s}]\n", r"stages\[0\]\.model: missing"),
        ("name: x\nstages: [{name: s, model: 'pkg.M'}]\n", "package.module:Class"),
        ("name: x\nstages: [{name: s, model: {kwargs: {}}}]\n", "factory: missing"),
        ("name: x\nstages: [{name: s, model: {factory: 'p:M', kwargs: [1]}}]\n", "kwargs"),
        ("name: x\nstages: [{name: s, model: 'p:M', retries: 1}]\n", "unknown key.*retries"),
        ("name: x\nstages: [{name: s, model: 'p:M', worker: ray}]\n", "worker must be one of"),
        ("name: x\nstages: [{name: s, model: 'p:M', max_batch: 0}]\n", "max_batch must be"),
        ("name: x\nstages: [{name: s, model: 'p:M', max_batch: true}]\n", "max_batch must be"),
        ("name: x\nstages: [{name: s, model: 'p:M', max_restarts: -1}]\n", "max_restarts"),
        (
            "name: x\nstages: [{name: s, model: 'p:M'}, {name: s, model: 'p:M'}]\n",
            "duplicate stage name 's'",
        ),
        (f"name: x\n{STAGE}\nsession_mode: chat\n", "session_mode must be turn or duplex"),
        (f"name: x\n{STAGE}\nsession_mode: duplex\n", "needs a duplex_plugin"),
        (f"name: x\n{STAGE}\nduplex_plugin: 'p:Plugin'\n", "must set session_mode"),
        (f"name: x\n{STAGE}\nduplex_plugin: ''\nsession_mode: turn\n", "duplex_plugin must"),
        (f"name: x\n{STAGE}\nduplex_session: [1]\n", "duplex_session must be a mapping"),
        (f"name: x\n{STAGE}\nserved_model_name: ''\n", "served_model_name must"),
        (f"name: x\n{STAGE}\nmax_requests: 0\n", "max_requests must be a positive"),
        (f"name: x\n{STAGE}\nmcp: {{call_timeout: 3}}\n", r"setting\(s\) mcp\.call_timeout"),
        (f"name: x\n{STAGE}\nmcp: {{call_timeout_s: 0}}\n", r"mcp\.call_timeout_s must be"),
        (f"name: x\n{STAGE}\nmcp: {{allowed_urls: [ftp://x/]}}\n", r"mcp\.allowed_urls"),
        (f"name: x\n{STAGE}\nmcp: [1]\n", "mcp must be a mapping"),
        ("name: x\nstages: [unclosed\n", "invalid YAML"),
    ],
)
def test_validation_errors_name_the_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=message) as info:
        load_deploy_config(path)
    assert str(path) in str(info.value)


def test_parse_mapping_directly():
    config = parse_pipeline_config({"name": "m", "stages": [{"name": "s", "model": "p:M"}]})
    assert config.stages[0].model.factory == "p:M"
    assert config.max_requests == 64
    bounded = {"name": "m", "stages": [{"name": "s", "model": "p:M"}], "max_requests": 3}
    assert parse_pipeline_config(bounded).max_requests == 3
    with pytest.raises(ValueError, match="<mapping>: stages must be a non-empty list"):
        parse_pipeline_config({"name": "m"})


def test_dataclass_validation():
    with pytest.raises(ValueError, match="at least one stage"):
        PipelineConfig(name="p", stages=[])
    with pytest.raises(ValueError, match="StageConfig"):
        PipelineConfig(name="p", stages=[{"name": "s"}])
    with pytest.raises(ValueError, match="non-empty string"):
        StageConfig("", SPEC)
    with pytest.raises(ValueError, match=r"package\.module:Class"):
        StageModelSpec("no_colon")
    with pytest.raises(ValueError, match=r"package\.module:Class"):
        StageModelSpec(42)  # type: ignore[arg-type]
