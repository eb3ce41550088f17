"""Stock client libraries against a real server: the drivers live in
``benchmarks/client_compat`` (the compatibility table's script runs the same ones), the
server is the in-thread harness of ``tests/entrypoints/openai``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
for _path in (_ROOT / "benchmarks", _ROOT / "tests" / "entrypoints" / "openai", _ROOT / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from server_harness import run_server  # noqa: E402

from client_compat.report import Target  # noqa: E402
from omniduplex.config.pipeline import load_deploy_config  # noqa: E402

DEPLOYMENTS = ("loopback", "cascade")


@pytest.fixture(scope="module", params=DEPLOYMENTS)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """``omniduplex serve loopback`` / ``cascade`` (the shipped deployments, unchanged),
    one server per test module and deployment."""
    deployment = str(request.param)
    pipeline = load_deploy_config(deployment)
    with run_server(deployment) as running:
        yield Target(
            http_url=running.http_url,
            ws_url=running.ws_url,
            model=pipeline.served_model_name or pipeline.name,
            deployment=deployment,
        )
