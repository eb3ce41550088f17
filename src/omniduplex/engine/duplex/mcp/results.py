"""What an MCP server's tools and tool calls become for a Realtime session.

An error is a plain dict in exactly one of the shapes of OpenAI's
``RealtimeMcpToolCall.error`` (``tool_execution_error``, ``http_error``,
``protocol_error``), so the engine can put it on the wire as it is. JSON-RPC codes are the
MCP SDK's (``mcp_types``): ``REQUEST_TIMEOUT`` (-32001) for a call or an open that ran out
of time, ``CONNECTION_CLOSED`` (-32000) for a server that could not be reached or went
away; neither has an HTTP status, and OpenAI's protocol_error carries a JSON-RPC code.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import mcp_types
import orjson


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool an MCP server lists: what a session declares to the model."""

    name: str
    description: str | None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None

    @property
    def read_only(self) -> bool:
        return bool(self.annotations and self.annotations.get("readOnlyHint") is True)

    @classmethod
    def from_sdk(cls, tool: mcp_types.Tool) -> McpTool:
        annotations = tool.annotations
        return cls(
            name=tool.name,
            description=tool.description,
            input_schema=dict(tool.input_schema),
            annotations=(
                None
                if annotations is None
                else annotations.model_dump(by_alias=True, mode="json", exclude_none=True)
            ),
        )


@dataclass(frozen=True, slots=True)
class McpCallResult:
    """A tool call's outcome: the text the model reads, or an error (never both)."""

    output: str | None
    error: dict[str, Any] | None


def tool_execution_error(message: str) -> dict[str, Any]:
    return {"type": "tool_execution_error", "message": message}


def http_error(status: int, message: str) -> dict[str, Any]:
    return {"type": "http_error", "code": status, "message": message}


def protocol_error(code: int, message: str) -> dict[str, Any]:
    return {"type": "protocol_error", "code": code, "message": message}


def timeout_error(what: str, seconds: float) -> dict[str, Any]:
    return protocol_error(mcp_types.REQUEST_TIMEOUT, f"{what} timed out after {seconds:g} s")


def _describe_blob(mime_type: str | None, data: str) -> str:
    try:
        size = len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        size = len(data)
    return f"[{mime_type or 'application/octet-stream'}, {size} bytes]"


def _part_text(part: mcp_types.ContentBlock) -> str:
    if isinstance(part, mcp_types.TextContent):
        return part.text
    if isinstance(part, mcp_types.ImageContent | mcp_types.AudioContent):
        return _describe_blob(part.mime_type, part.data)
    if isinstance(part, mcp_types.ResourceLink):
        return f"[resource {part.uri}]"
    if isinstance(part, mcp_types.EmbeddedResource):
        resource = part.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return resource.text
        return _describe_blob(resource.mime_type, resource.blob)
    return f"[{getattr(part, 'type', 'unknown')} content]"


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text of a result: its parts joined, else its structured content as JSON."""
    parts = [_part_text(part) for part in result.content]
    has_text = any(isinstance(part, mcp_types.TextContent) for part in result.content)
    if not has_text and result.structured_content is not None:
        parts.insert(0, orjson.dumps(result.structured_content).decode())
    return "\n".join(parts)


def truncate(text: str, max_chars: int) -> str:
    """At most ``max_chars`` of ``text``, and a note the model reads when it was cut."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… [truncated: the tool returned {len(text)} characters]"


def call_result(result: mcp_types.CallToolResult, max_chars: int) -> McpCallResult:
    text = truncate(result_text(result), max_chars)
    if result.is_error:
        return McpCallResult(output=None, error=tool_execution_error(text or "the tool failed"))
    return McpCallResult(output=text, error=None)
