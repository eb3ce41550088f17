"""OpenAI's server events of remote MCP tools: listing a server's tools, and a call.

A session that declares an ``mcp`` tool has the server list that MCP server's tools into
an ``mcp_list_tools`` item (``mcp_list_tools.in_progress`` / ``.completed`` / ``.failed``);
a response that calls one has an ``mcp_call`` output item, its arguments streamed
(``response.mcp_call_arguments.delta`` / ``.done``), then the call itself
(``response.mcp_call.in_progress`` / ``.completed`` / ``.failed``). They exist in GA only:
the beta interface never had them, so a beta connection sees the items but not these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import RealtimeEvent


@dataclass(kw_only=True, slots=True)
class _ListToolsEvent(RealtimeEvent):
    item_id: str


@dataclass(kw_only=True, slots=True)
class McpListToolsInProgress(_ListToolsEvent):
    type: ClassVar[str] = "mcp_list_tools.in_progress"


@dataclass(kw_only=True, slots=True)
class McpListToolsCompleted(_ListToolsEvent):
    type: ClassVar[str] = "mcp_list_tools.completed"


@dataclass(kw_only=True, slots=True)
class McpListToolsFailed(_ListToolsEvent):
    type: ClassVar[str] = "mcp_list_tools.failed"


@dataclass(kw_only=True, slots=True)
class ResponseMcpCallArgumentsDelta(RealtimeEvent):
    type: ClassVar[str] = "response.mcp_call_arguments.delta"

    response_id: str
    item_id: str
    output_index: int
    delta: str


@dataclass(kw_only=True, slots=True)
class ResponseMcpCallArgumentsDone(RealtimeEvent):
    type: ClassVar[str] = "response.mcp_call_arguments.done"

    response_id: str
    item_id: str
    output_index: int
    arguments: str


@dataclass(kw_only=True, slots=True)
class _CallEvent(RealtimeEvent):
    item_id: str
    output_index: int


@dataclass(kw_only=True, slots=True)
class ResponseMcpCallInProgress(_CallEvent):
    type: ClassVar[str] = "response.mcp_call.in_progress"


@dataclass(kw_only=True, slots=True)
class ResponseMcpCallCompleted(_CallEvent):
    type: ClassVar[str] = "response.mcp_call.completed"


@dataclass(kw_only=True, slots=True)
class ResponseMcpCallFailed(_CallEvent):
    type: ClassVar[str] = "response.mcp_call.failed"


MCP_EVENT_CLASSES: tuple[type[RealtimeEvent], ...] = (
    McpListToolsInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    ResponseMcpCallArgumentsDelta,
    ResponseMcpCallArgumentsDone,
    ResponseMcpCallInProgress,
    ResponseMcpCallCompleted,
    ResponseMcpCallFailed,
)
