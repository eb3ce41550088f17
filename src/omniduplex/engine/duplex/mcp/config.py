"""Deploy-level settings for remote MCP tools (the ``mcp`` block of a deploy YAML).

Clients declare MCP servers in ``session.tools``; the deployment decides which of them the
server may reach and how long it waits. ``allowed_urls`` lists URL prefixes the server may
connect to, private and loopback addresses included; with none listed, only servers whose
host resolves to public addresses are reached (mcp/policy.py says why). ``list_timeout_s``
bounds connecting, the handshake and listing the tools; ``call_timeout_s`` bounds one tool
call; ``max_result_chars`` bounds the text of one result the model is given (a longer one
is cut, with a note saying so); ``max_servers_per_session`` bounds the MCP servers one
session may declare.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from .policy import McpUrlRefused, normalise_url


@dataclass(frozen=True, slots=True)
class McpConfig:
    allowed_urls: tuple[str, ...] = ()
    list_timeout_s: float = 10.0
    call_timeout_s: float = 20.0
    max_result_chars: int = 8000
    max_servers_per_session: int = 4

    def __post_init__(self) -> None:
        urls = self.allowed_urls
        if isinstance(urls, str | bytes) or not isinstance(urls, Sequence):
            raise ValueError("mcp.allowed_urls must be a list of URL prefixes")
        for url in urls:
            try:
                normalise_url(url)
            except McpUrlRefused as exc:
                raise ValueError(f"mcp.allowed_urls: {url!r}: {exc}") from None
        object.__setattr__(self, "allowed_urls", tuple(urls))
        for name in ("list_timeout_s", "call_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"mcp.{name} must be a positive number of seconds")
        for name in ("max_result_chars", "max_servers_per_session"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"mcp.{name} must be a positive integer")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> McpConfig:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ValueError(f"mcp must be a mapping, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(key) for key in raw if key not in known)
        if unknown:
            named = ", ".join(f"mcp.{key}" for key in unknown)
            raise ValueError(
                f"unknown setting(s) {named}; the known ones are {', '.join(sorted(known))}"
            )
        return cls(**raw)
