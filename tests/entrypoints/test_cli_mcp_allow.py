"""``omniduplex serve --mcp-allow PREFIX`` adds to the deployment's ``mcp.allowed_urls``."""

from __future__ import annotations

import pytest

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.cli import (
    CONFIG_ERROR_EXIT_CODE,
    StartupError,
    build_parser,
    pipeline_for_args,
)


def test_each_prefix_is_added_after_the_deploy_files() -> None:
    args = build_parser().parse_args(
        ["serve", "loopback", "--mcp-allow", "http://127.0.0.1:8123/", "--mcp-allow",
         "https://tools.internal/mcp"]
    )  # fmt: skip
    pipeline = load_deploy_config("loopback")
    pipeline = pipeline_for_args(args, pipeline)
    assert pipeline.mcp.allowed_urls == ("http://127.0.0.1:8123/", "https://tools.internal/mcp")


def test_without_the_flag_the_deploy_files_list_stays() -> None:
    args = build_parser().parse_args(["serve", "loopback", "--max-sessions", "3"])
    before = load_deploy_config("loopback")
    after = pipeline_for_args(args, before)
    assert after.mcp == before.mcp
    assert after.duplex_session["max_sessions"] == 3


def test_a_prefix_that_is_not_an_http_url_is_a_config_error() -> None:
    args = build_parser().parse_args(["serve", "loopback", "--mcp-allow", "ftp://files/"])
    with pytest.raises(StartupError) as caught:
        pipeline_for_args(args, load_deploy_config("loopback"))
    assert caught.value.exit_code == CONFIG_ERROR_EXIT_CODE
    assert str(caught.value).startswith("--mcp-allow: mcp.allowed_urls: 'ftp://files/'")
