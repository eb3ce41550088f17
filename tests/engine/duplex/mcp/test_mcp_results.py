"""A tool result's content becomes the text the model reads (mcp/results.py)."""

from __future__ import annotations

import base64

import mcp_types

from omniduplex.engine.duplex.mcp import McpCallResult
from omniduplex.engine.duplex.mcp.results import call_result


def result(**fields: object) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult.model_validate(fields)


def test_text_parts_are_joined() -> None:
    content = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert call_result(result(content=content), 100) == McpCallResult("one\ntwo", None)


def test_structured_content_is_json_when_there_is_no_text() -> None:
    made = call_result(result(content=[], structuredContent={"temp": 18, "sky": "sunny"}), 100)
    assert made == McpCallResult('{"temp":18,"sky":"sunny"}', None)


def test_text_wins_over_structured_content() -> None:
    content = [{"type": "text", "text": "18 degrees"}]
    made = call_result(result(content=content, structuredContent={"temp": 18}), 100)
    assert made.output == "18 degrees"


def test_non_text_parts_are_described_briefly() -> None:
    png = base64.b64encode(b"\x89PNG" + bytes(1230)).decode()
    content = [
        {"type": "text", "text": "a chart:"},
        {"type": "image", "data": png, "mimeType": "image/png"},
        {"type": "resource_link", "uri": "file:///report.pdf", "name": "report"},
    ]
    made = call_result(result(content=content), 1000)
    assert made.output == "a chart:\n[image/png, 1234 bytes]\n[resource file:///report.pdf]"


def test_an_error_result_is_a_tool_execution_error_with_its_text() -> None:
    made = call_result(result(content=[{"type": "text", "text": "no city"}], isError=True), 100)
    assert made == McpCallResult(None, {"type": "tool_execution_error", "message": "no city"})


def test_the_note_counts_the_whole_text() -> None:
    made = call_result(result(content=[{"type": "text", "text": "y" * 12}]), 5)
    assert made.output == "yyyyy… [truncated: the tool returned 12 characters]"
