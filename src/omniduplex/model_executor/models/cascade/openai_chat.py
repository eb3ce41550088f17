"""The OpenAI chat completions side of the responder.

``chat_messages`` builds what either language model is asked (``responder: local`` takes
the same messages); ``OpenAIChatResponder`` (``responder: openai``) streams the reply
from any OpenAI-compatible ``POST {llm_base_url}/chat/completions`` endpoint, content
deltas and function call pieces as they arrive. A backend that answers with an error, bad
JSON or nothing in time raises ``ResponderError``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .local_tools import ToolCallPiece
from .options import CascadeOptions


class ResponderError(RuntimeError):
    """The chat backend failed: an error status or chunk, bad JSON, a timeout, or no
    connection."""


def chat_messages(
    system_prompt: str, instructions: str | None, history: Sequence[Mapping[str, Any]], user: str
) -> list[dict[str, Any]]:
    """The session's instructions (or, when it set none, the deployment's system prompt),
    history (function calls and their outputs included), then the user's turn. A client's
    instructions replace the default prompt, as OpenAI's Realtime API does. An idle
    timeout's empty user turn (``silent_ms``) says in words that the user stayed silent,
    so a model answering it checks in rather than answering nothing."""
    system = instructions.strip() if instructions and instructions.strip() else system_prompt
    messages: list[dict[str, Any]] = [{"role": "system", "content": system.strip()}]
    for message in history:
        role = str(message.get("role", "user"))
        content = str(message.get("content") or "")
        if role == "assistant" and message.get("tool_calls"):
            calls = [dict(call) for call in message["tool_calls"]]
            messages.append({"role": "assistant", "content": content or None, "tool_calls": calls})
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        elif role in ("user", "assistant", "system") and content:
            messages.append({"role": role, "content": content})
        elif role == "user" and message.get("silent_ms") is not None:
            messages.append({"role": "user", "content": silence_note(message["silent_ms"])})
    last = messages[-1]
    if user and not (last["role"] == "user" and str(last["content"]).strip() == user.strip()):
        messages.append({"role": "user", "content": user})
    return messages


def silence_note(silent_ms: Any) -> str:
    """An idle timeout's empty user turn, as the words a chat model reads for it."""
    seconds = round(float(silent_ms) / 1000.0)
    return f"(The user has said nothing for {seconds} seconds.)"


def went_quiet(history: Sequence[Mapping[str, Any]]) -> bool:
    """The turn to answer is an idle timeout's: the user said nothing."""
    return bool(history) and history[-1].get("silent_ms") is not None


def chat_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Realtime function tools in chat completions' shape."""
    out = []
    for tool in tools:
        function = {"name": tool.get("name")}
        for key in ("description", "parameters"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, Mapping):
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


class OpenAIChatResponder:
    """Streams ``POST {llm_base_url}/chat/completions`` (SSE) and yields content deltas."""

    def __init__(self, options: CascadeOptions) -> None:
        self.base_url = str(options.llm_base_url or "").rstrip("/")
        self.model = str(options.llm_model or "")
        self.api_key = options.llm_api_key
        self.timeout_s = float(options.llm_timeout_s)
        self.max_tokens = options.llm_max_tokens

    def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float | None,
        max_tokens: int | None,
        cancelled: threading.Event,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: Any = "auto",
    ) -> Iterator[str | ToolCallPiece]:
        """Content deltas (``str``) and function call pieces as the backend streams them."""
        import httpx

        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if tools:
            body["tools"] = chat_tools(tools)
            body["tool_choice"] = chat_tool_choice(tool_choice)
        if temperature is not None:
            body["temperature"] = temperature
        limit = max_tokens or self.max_tokens
        if limit is not None:
            body["max_tokens"] = limit
        headers = {"Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/chat/completions"
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(self.timeout_s)) as client,
                client.stream("POST", url, json=body, headers=headers) as response,
            ):
                if response.status_code != 200:
                    detail = response.read().decode("utf-8", "replace")[:200]
                    raise ResponderError(f"chat backend answered {response.status_code}: {detail}")
                for line in response.iter_lines():
                    if cancelled.is_set():
                        return
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        return
                    try:
                        chunk = json.loads(payload)
                    except ValueError as exc:
                        raise ResponderError(f"chat backend sent bad JSON: {payload[:80]}") from exc
                    if isinstance(chunk, dict) and chunk.get("error"):
                        raise ResponderError(f"chat backend error: {chunk['error']}")
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            yield str(delta["content"])
                        for call in delta.get("tool_calls") or []:
                            function = call.get("function") or {}
                            yield ToolCallPiece(
                                index=int(call.get("index") or 0),
                                call_id=call.get("id"),
                                name=function.get("name"),
                                arguments=str(function.get("arguments") or ""),
                            )
        except httpx.TimeoutException as exc:
            raise ResponderError(f"chat backend timed out after {self.timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            raise ResponderError(f"chat backend unreachable: {exc}") from exc
