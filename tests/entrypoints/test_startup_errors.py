"""``omniduplex serve`` that cannot start: one line on stderr (``omniduplex: error: ...``)
naming what is wrong, which key or file and what to do, a non-zero exit status, and no
traceback unless ``--log-level debug``. Each case runs the real command."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from omniduplex.config.pipeline import DEPLOY_DIR
from omniduplex.entrypoints.cli import CONFIG_ERROR_EXIT_CODE, STARTUP_FAILURE_EXIT_CODE

# Guards against hangs only: every case fails before it loads a model, or at its first.
TIMEOUT_S = 300


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omniduplex.entrypoints.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _error_line(done: subprocess.CompletedProcess[str], exit_code: int) -> str:
    """The one error line, checked to be the only one, the last, and traceback-free."""
    assert done.returncode == exit_code, done.stderr
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    errors = [line for line in done.stderr.splitlines() if line.startswith("omniduplex: error:")]
    assert len(errors) == 1, done.stderr
    assert done.stderr.rstrip().splitlines()[-1] == errors[0]
    assert "Application startup failed" not in output  # said once, by the line itself
    return errors[0]


def _deploy_copy(tmp_path: Path, shipped: str, edit: dict[str, object]) -> Path:
    """A shipped deploy file with ``edit`` set in every stage's model kwargs."""
    raw = yaml.safe_load((DEPLOY_DIR / f"{shipped}.yaml").read_text())
    for stage in raw["stages"]:
        stage["model"]["kwargs"] = {**stage["model"]["kwargs"], **edit}
    path = tmp_path / f"{shipped}-edited.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_an_unknown_deploy_key_names_the_nearest_known_key(tmp_path: Path) -> None:
    deploy = tmp_path / "typo.yaml"
    deploy.write_text("base_config: loopback.yaml\nsesion_mode: duplex\n")
    line = _error_line(_serve(str(deploy), "--port", "0"), CONFIG_ERROR_EXIT_CODE)
    assert str(deploy) in line
    assert "unknown key 'sesion_mode' (did you mean 'session_mode'?)" in line
    debug = _serve(str(deploy), "--port", "0", "--log-level", "debug")
    assert debug.returncode == CONFIG_ERROR_EXIT_CODE and "Traceback" in debug.stderr


def test_an_unknown_duplex_session_key_names_the_nearest_known_key(tmp_path: Path) -> None:
    deploy = tmp_path / "session.yaml"
    deploy.write_text("base_config: loopback.yaml\nduplex_session: {max_sesions: 4}\n")
    line = _error_line(_serve(str(deploy), "--port", "0"), CONFIG_ERROR_EXIT_CODE)
    assert f"{deploy}: duplex_session: unknown key 'max_sesions'" in line
    assert "(did you mean 'max_sessions'?)" in line


def test_an_unknown_stage_key_names_the_stage_and_the_nearest_key(tmp_path: Path) -> None:
    deploy = tmp_path / "stage.yaml"
    deploy.write_text("name: x\nstages: [{name: s, model: 'pkg:M', max_batchs: 2}]\n")
    line = _error_line(_serve(str(deploy)), CONFIG_ERROR_EXIT_CODE)
    assert f"{deploy}: stages[0]: unknown key 'max_batchs' (did you mean 'max_batch'?)" in line


def test_a_missing_deploy_key_names_where_it_is_missing(tmp_path: Path) -> None:
    deploy = tmp_path / "no-model.yaml"
    deploy.write_text("name: x\nstages: [{name: s, worker: thread}]\n")
    line = _error_line(_serve(str(deploy)), CONFIG_ERROR_EXIT_CODE)
    assert f"{deploy}: stages[0].model: missing" in line


def test_a_missing_deploy_file_lists_the_shipped_deployments() -> None:
    line = _error_line(_serve("no-such-deployment"), CONFIG_ERROR_EXIT_CODE)
    assert "'no-such-deployment' not found" in line and "loopback" in line


def test_a_setting_that_needs_another_names_both_and_the_file(tmp_path: Path) -> None:
    # responder: openai without the endpoint it is to call.
    deploy = _deploy_copy(tmp_path, "cascade-rules", {"responder": "openai"})
    line = _error_line(_serve(str(deploy), "--port", "0"), STARTUP_FAILURE_EXIT_CODE)
    assert str(deploy) in line
    assert "responder 'openai' needs llm_base_url and llm_model" in line
    debug = _serve(str(deploy), "--port", "0", "--log-level", "debug")
    assert debug.returncode == STARTUP_FAILURE_EXIT_CODE
    assert "Traceback" in debug.stderr
    assert debug.stderr.rstrip().splitlines()[-1].startswith("omniduplex: error:")


def test_a_model_without_its_checkpoint_says_what_to_set() -> None:
    # minicpmo-4.5 ships with model_dir unset: no machine has the checkpoint by default.
    line = _error_line(_serve("minicpmo-4.5", "--port", "0"), STARTUP_FAILURE_EXIT_CODE)
    assert "minicpmo-4.5.yaml" in line
    assert "model_dir is not set" in line and "huggingface-cli download" in line


def test_a_port_in_use_is_found_before_any_model_loads() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve("loopback", "--port", str(port))
    line = _error_line(done, STARTUP_FAILURE_EXIT_CODE)
    assert f"port {port} on 127.0.0.1 is already in use" in line and "--port" in line
    assert "Waiting for application startup" not in done.stderr  # nothing was started


def test_a_host_that_does_not_resolve_is_a_usage_error() -> None:
    line = _error_line(_serve("loopback", "--host", "no-such-host.invalid"), CONFIG_ERROR_EXIT_CODE)
    assert "--host 'no-such-host.invalid'" in line


def test_an_unreachable_ray_head_is_one_line() -> None:
    pytest.importorskip("ray")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    line = _error_line(_serve("loopback", "--ray", f"127.0.0.1:{port}"), CONFIG_ERROR_EXIT_CODE)
    assert "unreachable" in line and "ray start --head" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--replicas", "2", "--ray", "auto"), "--replicas starts replicas on this machine"),
        (("--replicas", "0"), "--replicas must be at least 1, got 0"),
    ],
)
def test_replicas_that_cannot_be_served_are_one_line(args: tuple[str, ...], says: str) -> None:
    line = _error_line(_serve("loopback", "--port", "0", *args), CONFIG_ERROR_EXIT_CODE)
    assert says in line


def test_an_unknown_cluster_backend_names_the_known_ones(tmp_path: Path) -> None:
    deploy = tmp_path / "cluster.yaml"
    deploy.write_text("base_config: loopback.yaml\ncluster: {backend: threads, replicas: 2}\n")
    line = _error_line(_serve(str(deploy), "--port", "0"), CONFIG_ERROR_EXIT_CODE)
    assert "cluster.backend must be one of ray, processes" in line


def test_a_certificate_without_its_key_is_a_usage_error(tmp_path: Path) -> None:
    done = _serve("loopback", "--ssl-certfile", str(tmp_path / "cert.pem"))
    line = _error_line(done, CONFIG_ERROR_EXIT_CODE)
    assert "--ssl-certfile and --ssl-keyfile go together" in line


def test_an_unreadable_certificate_is_found_before_any_model_loads(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate\n")
    key.write_text("not a key\n")
    done = _serve("loopback", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key))
    line = _error_line(done, CONFIG_ERROR_EXIT_CODE)
    assert "cannot serve TLS" in line and str(cert) in line
    assert "Waiting for application startup" not in done.stderr


def test_a_bad_mcp_setting_names_the_file_and_the_key(tmp_path: Path) -> None:
    deploy = tmp_path / "mcp.yaml"
    deploy.write_text("base_config: loopback.yaml\nmcp: {call_timeout: 3}\n")
    line = _error_line(_serve(str(deploy), "--port", "0"), CONFIG_ERROR_EXIT_CODE)
    assert str(deploy) in line and "mcp.call_timeout" in line


def test_a_bad_mcp_allow_prefix_is_one_line() -> None:
    done = _serve("loopback", "--port", "0", "--mcp-allow", "ftp://files.internal/")
    line = _error_line(done, CONFIG_ERROR_EXIT_CODE)
    assert "--mcp-allow: mcp.allowed_urls: 'ftp://files.internal/'" in line
