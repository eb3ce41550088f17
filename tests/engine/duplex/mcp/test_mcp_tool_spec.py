"""The ``mcp`` tool a session declares: what is accepted, refused, kept secret, and the
rules it carries (which listed tools are offered, which ask for approval)."""

from __future__ import annotations

from typing import Any

import pytest

from omniduplex.engine.duplex.mcp.policy import McpUrlPolicy, McpUrlRefused
from omniduplex.engine.duplex.mcp.tool_spec import McpServerSpec, public_tool
from omniduplex.engine.duplex.settings import SessionSettings, check_tools
from omniduplex.protocol.duplex import RealtimeProtocolError

URL = "https://tools.example.com/mcp"


def tool(**fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "weather", "server_url": URL, **fields}


def refused(tools: list[Any]) -> RealtimeProtocolError:
    with pytest.raises(RealtimeProtocolError) as info:
        check_tools(tools)
    assert info.value.code == "invalid_tool"
    return info.value


def test_an_mcp_tool_beside_a_function_is_accepted_as_declared() -> None:
    function = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    declared = tool(allowed_tools=["get_weather"], require_approval="never")
    assert check_tools([function, declared]) == [function, declared]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"server_label": "9lives"}, "tools[0].server_label"),
        ({"server_label": "has space"}, "tools[0].server_label"),
        ({"server_url": ""}, "tools[0].server_url"),
        ({"connector_id": "connector_gmail"}, "tools[0].connector_id"),
        ({"tunnel_id": "tun_1"}, "tools[0].tunnel_id"),
        ({"headers": {"X-Key": 3}}, "tools[0].headers"),
        ({"headers": {"X-Key": "a\r\nInjected: yes"}}, "tools[0].headers"),
        ({"authorization": "tok\nen"}, "tools[0].authorization"),
        ({"allowed_tools": "get_weather"}, "tools[0].allowed_tools"),
        ({"allowed_tools": {"names": ["x"]}}, "tools[0].allowed_tools.names"),
        ({"require_approval": "sometimes"}, "tools[0].require_approval"),
        (
            {"require_approval": {"always": {"read_only": "yes"}}},
            "tools[0].require_approval.always.read_only",
        ),
        ({"surprise": True}, "tools[0].surprise"),
    ],
)
def test_a_malformed_mcp_tool_is_refused_naming_its_field(
    fields: dict[str, Any], param: str
) -> None:
    assert refused([tool(**fields)]).param == param


def test_a_label_declared_twice_is_refused() -> None:
    assert refused([tool(), tool(server_url=URL + "2")]).param == "tools[1].server_label"


def test_secrets_stay_out_of_the_session_object() -> None:
    settings = SessionSettings.from_realtime(
        {"tools": [tool(headers={"X-Key": "s3cret"}, authorization="t0ken")]},
        served_model="cascade",
    )
    (shown,) = settings._client_view(transcribes=True)["tools"]
    assert shown == public_tool(settings.tools[0]) == tool()
    spec = McpServerSpec.from_tool(settings.tools[0])
    assert dict(spec.headers) == {"X-Key": "s3cret", "Authorization": "Bearer t0ken"}
    assert "s3cret" not in repr(spec) and "t0ken" not in repr(spec)


@pytest.mark.parametrize(
    ("approval", "asks"),
    [
        (None, {"get_weather": True, "delete_all": True}),  # OpenAI's default: always
        ("always", {"get_weather": True, "delete_all": True}),
        ("never", {"get_weather": False, "delete_all": False}),
        ({"never": {"tool_names": ["get_weather"]}}, {"get_weather": False, "delete_all": True}),
        ({"always": {"tool_names": ["delete_all"]}}, {"get_weather": False, "delete_all": True}),
        ({"never": {"read_only": True}}, {"get_weather": False, "delete_all": True}),
        (
            {"always": {"tool_names": ["get_weather"]}, "never": {"read_only": True}},
            {"get_weather": False, "delete_all": True},
        ),
    ],
)
def test_which_tools_ask_for_approval(approval: Any, asks: dict[str, bool]) -> None:
    fields = {} if approval is None else {"require_approval": approval}
    spec = McpServerSpec.from_tool(check_tools([tool(**fields)])[0])
    read_only = {"get_weather": True, "delete_all": False}
    assert {name: spec.needs_approval(name, read_only[name]) for name in asks} == asks


def test_allowed_tools_filter_by_name_and_by_read_only_hint() -> None:
    by_name = McpServerSpec.from_tool(tool(allowed_tools=["get_weather"]))
    assert by_name.allows("get_weather", False) and not by_name.allows("delete_all", True)
    read_only = McpServerSpec.from_tool(tool(allowed_tools={"read_only": True}))
    assert read_only.allows("get_weather", True) and not read_only.allows("delete_all", False)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/mcp",
        "http://localhost/mcp",
        "http://[::1]/mcp",
        "http://169.254.169.254/latest",
        "http://10.0.0.5/mcp",
        "ftp://tools.example.com/mcp",
    ],
)
def test_the_form_check_refuses_private_addresses_without_resolving(url: str) -> None:
    with pytest.raises(McpUrlRefused):
        McpUrlPolicy().check_form(url)


def test_the_form_check_leaves_host_names_to_resolution() -> None:
    McpUrlPolicy().check_form(URL)
    with pytest.raises(McpUrlRefused):
        McpUrlPolicy(["http://127.0.0.1:9000/"]).check_form(URL)
