"""Remote MCP tools: the server's connections to the MCP servers a session declares."""

from .config import McpConfig
from .connection import McpConnection, McpOpenError
from .policy import McpUrlPolicy, McpUrlRefused
from .results import McpCallResult, McpTool

__all__ = [
    "McpCallResult",
    "McpConfig",
    "McpConnection",
    "McpOpenError",
    "McpTool",
    "McpUrlPolicy",
    "McpUrlRefused",
]
