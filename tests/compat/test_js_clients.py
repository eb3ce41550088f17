"""OpenAI's JavaScript clients against a real server: the ``openai`` npm package's Realtime
WebSocket client and the Agents SDK (``@openai/agents-realtime``), at the versions pinned in
``tests/compat/js/package-lock.json`` (the README's test command runs ``npm ci`` there).

Each scenario is a Node script in ``tests/compat/js`` that drives the library through its
public API and prints one JSON report; this module starts the server, hands the script the
spoken question, and checks the report. The ``openai`` package connects only over wss, so
the servers here serve TLS with a fresh self-signed certificate that Node is told to trust.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_harness import RunningServer, TlsFiles, run_server, self_signed_tls

from client_compat.report import COLUMNS, question_pcm16
from mcp_servers import serve_mcp
from omniduplex.engine.duplex.mcp import McpConfig

JS_DIR = Path(__file__).resolve().parent / "js"
# Guards against a hung script only.
SCRIPT_TIMEOUT_S = 300

WEATHER = {
    "type": "function",
    "name": "check_weather",
    "description": "The weather forecast for a place.",
    "parameters": {
        "type": "object",
        "properties": {"place": {"type": "string"}},
        "required": ["place"],
    },
}
ASK = "Check the weather in Paris please."
FORECAST = {"forecast": "sunny and warm"}

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (JS_DIR / "node_modules").is_dir(),
    reason="the JavaScript clients need node and `npm ci --prefix tests/compat/js` "
    "(the README's test command runs it where npm is installed)",
)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return self_signed_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def question(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("speech") / "question.pcm"
    path.write_bytes(question_pcm16(24_000))
    return str(path)


@pytest.fixture(scope="module")
def rules(tls: TlsFiles) -> Iterator[RunningServer]:
    with run_server("cascade-rules", tls=tls) as running:
        yield running


@pytest.fixture(scope="module")
def cascade(tls: TlsFiles) -> Iterator[RunningServer]:
    with run_server("cascade", tls=tls) as running:
        yield running


def run_node(driver: str, scenario: str, tls: TlsFiles, **options: Any) -> dict[str, Any]:
    env = {**os.environ, "NODE_EXTRA_CA_CERTS": tls.certfile}
    done = subprocess.run(
        ["node", f"{driver}.mjs", scenario, json.dumps(options)],
        cwd=JS_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_worked(report: dict[str, Any], steps: set[str]) -> None:
    assert set(report["steps"]) >= steps, report
    assert all(report["steps"].values()) and not report["errors"], report


def _target(server: RunningServer, deployment: str) -> dict[str, Any]:
    return {
        "model": deployment,
        "base_url": f"{server.http_url}/v1",
        "ws_url": server.ws_url,
    }


CONVERSATION_STEPS = set(COLUMNS)  # the steps of the Python drivers' conversation


@pytest.mark.parametrize("driver", ["openai_ws", "agents_realtime"])
@pytest.mark.parametrize("deployment", ["cascade-rules", "cascade"])
def test_a_spoken_conversation_is_answered_and_talking_over_a_reply_stops_it(
    request: pytest.FixtureRequest, tls: TlsFiles, question: str, driver: str, deployment: str
) -> None:
    server = request.getfixturevalue("rules" if deployment == "cascade-rules" else "cascade")
    report = run_node(
        driver,
        "conversation",
        tls,
        **_target(server, deployment),
        question_pcm=question,
        transcribes=True,
    )
    _assert_worked(report, CONVERSATION_STEPS)
    if driver == "agents_realtime":
        # The SDK told the app to stop playing when the user talked over the reply.
        assert report["steps"]["audio_interrupted"], report


@pytest.mark.parametrize("driver", ["openai_ws", "agents_realtime"])
def test_a_declared_function_is_called_and_its_output_answered(
    rules: RunningServer, tls: TlsFiles, driver: str
) -> None:
    report = run_node(
        driver,
        "tool",
        tls,
        **_target(rules, "cascade-rules"),
        tool=WEATHER,
        ask=ASK,
        output=FORECAST,
    )
    _assert_worked(report, {"connect", "configure", "call", "answer", "close"})
    # cascade-rules calls with the user's words and speaks the tool's output.
    assert f"answer: {json.dumps(FORECAST['forecast'] + '.')}" in " ".join(report["notes"])


def test_a_transcription_session_captions_speech(
    rules: RunningServer, tls: TlsFiles, question: str
) -> None:
    # `{ intent: "transcription" }` is how the openai package opens one; the Agents SDK has none.
    report = run_node(
        "openai_ws", "transcription", tls, **_target(rules, "cascade-rules"), question_pcm=question
    )
    _assert_worked(
        report, {"connect", "configure", "committed", "transcript", "deltas", "no_response"}
    )


@pytest.mark.parametrize("approval", [False, True], ids=["never", "approved"])
def test_the_agents_sdk_declares_a_remote_mcp_server_and_the_server_calls_it(
    tls: TlsFiles, approval: bool
) -> None:
    with serve_mcp() as mcp_url:
        prefix = mcp_url.rsplit("/", 1)[0] + "/"
        with run_server("cascade-rules", tls=tls, mcp=McpConfig(allowed_urls=(prefix,))) as own:
            report = run_node(
                "agents_realtime",
                "mcp",
                tls,
                **_target(own, "cascade-rules"),
                mcp_url=mcp_url,
                tool_name="get_weather",
                ask="Get the weather in Paris.",
                approval=approval,
            )
    _assert_worked(report, {"connect", "configure", "listed", "call", "approved", "answer"})
    assert "18 degrees and sunny" in " ".join(report["notes"])
