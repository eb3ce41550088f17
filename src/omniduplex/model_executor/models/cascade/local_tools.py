"""Function calling for the local model, under llama.cpp grammars.

A response whose session declared tools asks the model two things, each as a short
completion of its own under a grammar, so that what it writes is always usable:

1. Which declared function the user's last words call for, or ``none``: the grammar admits
   exactly the declared names (and ``none`` unless ``tool_choice`` is ``required``), so the
   model can only pick among them. ``tool_choice: none`` skips the question, a named
   function answers it.
2. The chosen function's arguments: the grammar is llama.cpp's translation of the tool's
   JSON schema (each free string at most 120 characters), so they are always JSON of the
   declared shape.

After a function's output (the history ends with it) ``auto`` answers in words: that is
the turn in which the model speaks the result.

Chat templates of small models know only system, user and assistant messages, so a
conversation's function calls and outputs reach the model as notes (``plain_messages``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NO_TOOL = "none"
# Longest free string argument the grammar admits (a city, a reminder's text, a time).
_STRING_CHARS = 120


class ToolArgumentsError(RuntimeError):
    """The call's arguments outgrew their token budget, so they are not whole JSON."""


@dataclass(frozen=True, slots=True)
class ToolCallPiece:
    """Part of a streamed function call (either responder's): ``index`` tells the calls of
    one reply apart."""

    index: int
    call_id: str | None
    name: str | None
    arguments: str


_DECIDE = (
    "You decide whether answering the user's last message needs one of these functions."
    "\n{functions}\nAnswer with the name of the function to call{or_none}."
)
_ARGUE = (
    "Write the arguments of a call to the function {name}{described} that does what the "
    "user asked, as JSON."
)


def plain_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with function calls and outputs as system notes a template can show."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id -> function name
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                function = call.get("function") or {}
                name, arguments = function.get("name"), function.get("arguments") or "{}"
                names[str(call.get("id"))] = str(name)
                out.append({"role": "system", "content": f"You called {name} with {arguments}."})
            if message.get("content"):
                out.append({"role": "assistant", "content": str(message["content"])})
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), "the function")
            content = str(message.get("content") or "")
            out.append(
                {
                    "role": "system",
                    "content": f"The answer ({name}): {content}\n"
                    "Tell the user this answer in one short sentence.",
                }
            )
        else:
            out.append({"role": str(role), "content": str(message.get("content") or "")})
    return out


def _last_user(messages: Sequence[Mapping[str, Any]]) -> str:
    return next(
        (str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), ""
    )


def bounded(schema: Any) -> Any:
    """``schema`` with a length on every free string, for the grammar only: a small model
    may otherwise write one string until its token budget runs out."""
    if isinstance(schema, list):
        return [bounded(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {key: bounded(value) for key, value in schema.items()}
    free = not any(key in out for key in ("maxLength", "enum", "const", "pattern", "format"))
    if out.get("type") == "string" and free:
        out["maxLength"] = _STRING_CHARS
    return out


def _gbnf_literal(text: str) -> str:
    return json.dumps(text)  # a JSON string is a GBNF literal for these names


def choose_tool(
    llm: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], choice: Any
) -> Mapping[str, Any] | None:
    """The declared tool this turn calls, or ``None`` to answer in words."""
    from llama_cpp import LlamaGrammar

    if not tools or choice == NO_TOOL:
        return None
    by_name = {str(tool.get("name")): tool for tool in tools}
    if isinstance(choice, Mapping):
        return by_name.get(str(choice.get("name")))
    if choice != "required" and messages and messages[-1].get("role") == "tool":
        return None
    names = list(by_name)
    options = names if choice == "required" else [*names, NO_TOOL]
    functions = "\n".join(f"- {name}: {by_name[name].get('description') or name}" for name in names)
    system = _DECIDE.format(
        functions=functions, or_none="" if choice == "required" else ", or none if none is needed"
    )
    grammar = LlamaGrammar.from_string(
        "root ::= " + " | ".join(_gbnf_literal(name) for name in options), verbose=False
    )
    reply = llm.create_chat_completion(
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": _last_user(messages)},
        ],
        grammar=grammar,
        temperature=0.0,
        max_tokens=32,
    )
    picked = str(reply["choices"][0]["message"].get("content") or "").strip()
    return by_name.get(picked)


def stream_arguments(
    llm: Any,
    messages: Sequence[Mapping[str, Any]],
    tool: Mapping[str, Any],
    *,
    seed: int | None,
    max_tokens: int,
    cancelled: threading.Event,
) -> Iterator[str]:
    """The call's arguments as the model writes them, JSON of the tool's schema."""
    from llama_cpp import LlamaGrammar

    schema = tool.get("parameters")
    if not isinstance(schema, Mapping) or not schema.get("properties"):
        yield "{}"
        return
    grammar = LlamaGrammar.from_json_schema(json.dumps(bounded(schema)), verbose=False)
    description = tool.get("description")
    system = _ARGUE.format(
        name=tool.get("name"), described=f" ({description})" if description else ""
    )
    system += f"\nIts parameters: {json.dumps(schema.get('properties'))}"
    chunks = llm.create_chat_completion(
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": _last_user(messages)},
        ],
        grammar=grammar,
        stream=True,
        temperature=0.0,
        max_tokens=max_tokens,
        seed=seed,
    )
    for chunk in chunks:
        if cancelled.is_set():
            return
        for choice in chunk.get("choices") or []:
            piece = str((choice.get("delta") or {}).get("content") or "")
            if piece:
                yield piece
            if choice.get("finish_reason") == "length":
                raise ToolArgumentsError(
                    f"the arguments of {tool.get('name')} outgrew {max_tokens} tokens"
                )
