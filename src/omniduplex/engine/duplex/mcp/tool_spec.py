"""A session's ``mcp`` tool as the client declares it, checked, and the rules it carries.

OpenAI's shape: ``{"type": "mcp", "server_label", "server_url", "server_description",
"allowed_tools", "require_approval", "headers", "authorization"}``. ``connector_id`` and
``tunnel_id`` name OpenAI's own services and are refused: here a tool server is reached by
its URL. ``headers`` and ``authorization`` are the client's secrets for that server: they
go to the server and nowhere else (``public_tool`` is what ``session.updated`` echoes).

``allowed_tools`` (a list of names, or ``{tool_names, read_only}``) filters the listed
tools. ``require_approval`` is ``always`` (OpenAI's default), ``never``, or
``{always: filter, never: filter}``: a tool the ``never`` filter matches runs without
asking, one the ``always`` filter matches asks; a tool neither matches asks, unless only
an ``always`` filter was given (then only what it names asks).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ....protocol.duplex import RealtimeProtocolError

MCP_TOOL_TYPE = "mcp"
SECRET_KEYS = frozenset({"headers", "authorization"})
_KEYS = frozenset(
    {"type", "server_label", "server_url", "server_description", "allowed_tools"}
    | {"require_approval"}
    | SECRET_KEYS
)
_OPENAI_ONLY = ("connector_id", "tunnel_id")
# OpenAI's label rule: a letter, then letters, digits, '-' and '_'.
_LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


def _refuse(message: str, param: str) -> RealtimeProtocolError:
    return RealtimeProtocolError(message, "invalid_tool", param=param)


@dataclass(frozen=True, slots=True)
class ToolFilter:
    """Which of a server's tools a rule is about: by name, by read-only hint, or both."""

    tool_names: frozenset[str] | None = None
    read_only: bool | None = None

    def matches(self, name: str, read_only: bool) -> bool:
        if self.tool_names is not None and name not in self.tool_names:
            return False
        return self.read_only is None or self.read_only == read_only

    @classmethod
    def parse(cls, raw: Any, param: str) -> ToolFilter:
        if isinstance(raw, list):
            raw = {"tool_names": raw}
        if not isinstance(raw, Mapping):
            raise _refuse(f"{param} must be a list of tool names or a filter object", param)
        unknown = sorted(set(raw) - {"tool_names", "read_only"})
        if unknown:
            raise _refuse(
                f"{param}.{unknown[0]} is not a tool filter field", f"{param}.{unknown[0]}"
            )
        names = raw.get("tool_names")
        if names is not None and (
            not isinstance(names, list) or not all(isinstance(n, str) and n for n in names)
        ):
            raise _refuse(f"{param}.tool_names must be a list of names", f"{param}.tool_names")
        read_only = raw.get("read_only")
        if read_only is not None and not isinstance(read_only, bool):
            raise _refuse(f"{param}.read_only must be a boolean", f"{param}.read_only")
        return cls(None if names is None else frozenset(names), read_only)


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One declared MCP server: where it is, what it may offer, what needs approval."""

    server_label: str
    server_url: str
    server_description: str | None
    allowed: ToolFilter | None
    approve_always: ToolFilter | None
    approve_never: ToolFilter | None
    headers: tuple[tuple[str, str], ...]

    def __repr__(self) -> str:  # never the headers
        return f"McpServerSpec({self.server_label!r}, {self.server_url!r})"

    @property
    def connection_key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What a connection to it depends on: an update that keeps these keeps it open."""
        return self.server_url, self.headers

    def allows(self, name: str, read_only: bool) -> bool:
        return self.allowed is None or self.allowed.matches(name, read_only)

    def needs_approval(self, name: str, read_only: bool) -> bool:
        if self.approve_never is not None and self.approve_never.matches(name, read_only):
            return False
        if self.approve_always is not None and self.approve_always.matches(name, read_only):
            return True
        # Named by neither rule: it asks, unless an ``always`` filter alone was given.
        return self.approve_always is None or self.approve_never is not None

    @classmethod
    def from_tool(cls, tool: Mapping[str, Any]) -> McpServerSpec:
        """The spec of a tool ``check_mcp_tool`` accepted."""
        approval = tool.get("require_approval", "always")
        always = never = None
        if approval == "never":
            never = ToolFilter()
        elif isinstance(approval, Mapping):
            if approval.get("always") is not None:
                always = ToolFilter.parse(approval["always"], "require_approval.always")
            if approval.get("never") is not None:
                never = ToolFilter.parse(approval["never"], "require_approval.never")
        allowed = tool.get("allowed_tools")
        headers = dict(tool.get("headers") or {})
        if tool.get("authorization"):
            headers["Authorization"] = f"Bearer {tool['authorization']}"
        return cls(
            server_label=str(tool["server_label"]),
            server_url=str(tool["server_url"]),
            server_description=tool.get("server_description"),
            allowed=None if allowed is None else ToolFilter.parse(allowed, "allowed_tools"),
            approve_always=always,
            approve_never=never,
            headers=tuple(sorted(headers.items())),
        )


def check_mcp_tool(tool: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A copy of an ``mcp`` tool with every field checked (``invalid_tool``, naming it)."""
    for key in _OPENAI_ONLY:
        if tool.get(key) is not None:
            raise _refuse(
                f"{where}.{key}: OpenAI's connectors are not served here; give the MCP "
                "server's server_url",
                f"{where}.{key}",
            )
    unknown = sorted(set(tool) - _KEYS - set(_OPENAI_ONLY))
    if unknown:
        raise _refuse(f"{where}.{unknown[0]} is not an mcp tool field", f"{where}.{unknown[0]}")
    label = tool.get("server_label")
    if not isinstance(label, str) or not _LABEL.match(label):
        raise _refuse(
            f"{where}.server_label must start with a letter and hold only letters, digits, "
            "'-' and '_' (at most 64)",
            f"{where}.server_label",
        )
    url = tool.get("server_url")
    if not isinstance(url, str) or not url:
        raise _refuse(f"{where}.server_url must be the MCP server's URL", f"{where}.server_url")
    description = tool.get("server_description")
    if description is not None and not isinstance(description, str):
        raise _refuse(f"{where}.server_description must be a string", f"{where}.server_description")
    headers = tool.get("headers")
    if headers is not None and (
        not isinstance(headers, Mapping)
        or not all(_header_text(k) and _header_text(v) for k, v in headers.items())
    ):
        raise _refuse(f"{where}.headers must map names to strings on one line", f"{where}.headers")
    authorization = tool.get("authorization")
    if authorization is not None and not _header_text(authorization):
        raise _refuse(
            f"{where}.authorization must be a string on one line", f"{where}.authorization"
        )
    if tool.get("allowed_tools") is not None:
        ToolFilter.parse(tool["allowed_tools"], f"{where}.allowed_tools")
    approval = tool.get("require_approval")
    if approval is not None and approval not in ("always", "never"):
        param = f"{where}.require_approval"
        if not isinstance(approval, Mapping) or set(approval) - {"always", "never"}:
            raise _refuse(f"{param} must be always, never or {{always, never}} filters", param)
        for key in ("always", "never"):
            if approval.get(key) is not None:
                ToolFilter.parse(approval[key], f"{param}.{key}")
    return {**copy.deepcopy(dict(tool)), "type": MCP_TOOL_TYPE}


def _header_text(value: Any) -> bool:
    return isinstance(value, str) and not any(c in value for c in "\r\n\0")


def public_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool as the session object shows it: an ``mcp`` tool without its secrets."""
    if tool.get("type") != MCP_TOOL_TYPE:
        return dict(tool)
    return {key: value for key, value in tool.items() if key not in SECRET_KEYS}
