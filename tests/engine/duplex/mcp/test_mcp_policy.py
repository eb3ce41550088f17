"""Which MCP server URLs the server connects to (mcp/policy.py)."""

from __future__ import annotations

import pytest

from omniduplex.engine.duplex.mcp import McpUrlPolicy, McpUrlRefused

PRIVATE = [
    "http://127.0.0.1:8123/mcp",
    "http://localhost/mcp",
    "http://LOCALHOST./mcp",
    "http://0.0.0.0/",
    "http://[::1]/mcp",
    "http://[::]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:10.0.0.1]/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",  # shared address space (carrier NAT)
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://[fc00::1]/",
    "http://2130706433/",  # 127.0.0.1 as one number: resolvers accept it
]


@pytest.mark.parametrize("url", PRIVATE)
async def test_without_an_allow_list_private_addresses_are_refused(url: str) -> None:
    with pytest.raises(McpUrlRefused, match=r"mcp\.allowed_urls"):
        await McpUrlPolicy().check(url)


@pytest.mark.parametrize("url", ["http://8.8.8.8/mcp", "https://[2001:4860:4860::8888]/mcp"])
async def test_without_an_allow_list_a_public_address_is_reached(url: str) -> None:
    await McpUrlPolicy().check(url)


@pytest.mark.parametrize(
    "url",
    ["ftp://8.8.8.8/", "file:///etc/passwd", "ws://8.8.8.8/", "8.8.8.8/mcp", "http:///mcp", ""],
)
async def test_only_http_urls_with_a_host_are_reached(url: str) -> None:
    with pytest.raises(McpUrlRefused):
        await McpUrlPolicy().check(url)
    with pytest.raises(McpUrlRefused):
        await McpUrlPolicy(["http://127.0.0.1:8123/"]).check(url)


async def test_an_unresolvable_host_is_refused_saying_so() -> None:
    with pytest.raises(McpUrlRefused, match="could not be resolved"):
        await McpUrlPolicy().check("https://no-such-host.invalid/mcp")


async def test_a_listed_prefix_admits_a_loopback_server() -> None:
    policy = McpUrlPolicy(["http://127.0.0.1:8123/"])
    await policy.check("http://127.0.0.1:8123/mcp")
    await policy.check("HTTP://127.0.0.1:8123")
    await policy.check("http://127.0.0.1:8123/sse?x=1")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:81234/",
        "http://127.0.0.1:8123.evil.com/",
        "http://127.0.0.1:8124/",
        "http://127.0.0.1/",
        "https://127.0.0.1:8123/",
        "http://127.0.0.1:8123@evil.com/",
        "http://localhost:8123/",
        "http://8.8.8.8/",  # a listed deployment reaches only what it lists
    ],
)
async def test_a_prefix_admits_nothing_past_its_boundary(url: str) -> None:
    with pytest.raises(McpUrlRefused):
        await McpUrlPolicy(["http://127.0.0.1:8123/"]).check(url)


async def test_a_prefix_path_matches_whole_segments() -> None:
    policy = McpUrlPolicy(["http://tools.internal:9000/team-a"])
    await policy.check("http://tools.internal:9000/team-a")
    await policy.check("http://tools.internal:9000/team-a/mcp")
    for url in (
        "http://tools.internal:9000/team-ab/mcp",
        "http://tools.internal:9000/team-a/../admin",
        "http://tools.internal:9000/team-a/%2e%2e/admin",
    ):
        with pytest.raises(McpUrlRefused):
            await policy.check(url)


async def test_default_ports_compare_equal() -> None:
    await McpUrlPolicy(["https://tools.internal/"]).check("https://tools.internal:443/mcp")
    await McpUrlPolicy(["http://tools.internal:80/"]).check("http://tools.internal/mcp")


async def test_the_message_is_one_short_line() -> None:
    with pytest.raises(McpUrlRefused) as caught:
        await McpUrlPolicy().check("http://169.254.169.254/")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200
