"""Remote MCP tools: the server's connections to the MCP servers a session declares.

The names load on first use: a deploy file's ``mcp`` block is read (``McpConfig``) by
every deployment, which should not pay for importing the ``mcp`` SDK until a session
declares an MCP server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import McpConfig
    from .connection import McpConnection, McpOpenError
    from .policy import McpUrlPolicy, McpUrlRefused
    from .results import McpCallResult, McpTool

_MODULE_OF = {
    "McpCallResult": "results",
    "McpConfig": "config",
    "McpConnection": "connection",
    "McpOpenError": "connection",
    "McpTool": "results",
    "McpUrlPolicy": "policy",
    "McpUrlRefused": "policy",
}
__all__ = [
    "McpCallResult",
    "McpConfig",
    "McpConnection",
    "McpOpenError",
    "McpTool",
    "McpUrlPolicy",
    "McpUrlRefused",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
