"""The deployment's ``mcp`` settings are checked when they are built."""

from __future__ import annotations

import pytest

from omniduplex.engine.duplex.mcp import McpConfig


def test_defaults() -> None:
    config = McpConfig.from_mapping(None)
    assert config == McpConfig()
    assert config.allowed_urls == ()
    assert (config.list_timeout_s, config.call_timeout_s) == (10.0, 20.0)
    assert (config.max_result_chars, config.max_servers_per_session) == (8000, 4)


def test_a_mapping_sets_each_value_and_the_urls_become_a_tuple() -> None:
    config = McpConfig.from_mapping(
        {
            "allowed_urls": ["http://127.0.0.1:8123/", "https://tools.internal/mcp"],
            "list_timeout_s": 2,
            "call_timeout_s": 0.5,
            "max_result_chars": 100,
            "max_servers_per_session": 1,
        }
    )
    assert config.allowed_urls == ("http://127.0.0.1:8123/", "https://tools.internal/mcp")
    assert config.call_timeout_s == 0.5


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"call_timeout": 3}, "mcp.call_timeout"),
        ({"allowed_urls": "http://127.0.0.1/"}, "mcp.allowed_urls"),
        ({"allowed_urls": ["ftp://files.example/"]}, "mcp.allowed_urls"),
        ({"allowed_urls": ["http://"]}, "mcp.allowed_urls"),
        ({"allowed_urls": [7]}, "mcp.allowed_urls"),
        ({"list_timeout_s": 0}, "mcp.list_timeout_s"),
        ({"call_timeout_s": -1}, "mcp.call_timeout_s"),
        ({"call_timeout_s": "20"}, "mcp.call_timeout_s"),
        ({"call_timeout_s": True}, "mcp.call_timeout_s"),
        ({"max_result_chars": 0}, "mcp.max_result_chars"),
        ({"max_result_chars": 10.5}, "mcp.max_result_chars"),
        ({"max_servers_per_session": False}, "mcp.max_servers_per_session"),
    ],
)
def test_a_bad_value_is_refused_naming_its_key(raw: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named) as caught:
        McpConfig.from_mapping(raw)
    assert "\n" not in str(caught.value)


def test_a_block_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(ValueError, match="mcp must be a mapping"):
        McpConfig.from_mapping(["http://127.0.0.1/"])  # type: ignore[arg-type]
