"""Function calling for the local model: a tool picked by meaning, arguments under a
llama.cpp grammar.

A response whose session declared tools is answered in two steps:

1. Which declared function the user's last words call for, or none (``ToolRouter``): the
   words and each tool's name and description are embedded with WordLlama (its weights
   ship in its wheel; an embedding takes microseconds) and the nearest tool is called when
   its cosine similarity reaches ``TOOL_MATCH_FLOOR``. SmolLM2-135M asked the same
   question under a grammar of the names picked right 41 % of the time, about what
   answering none to everything scores (``benchmarks/tool_choice.py``); the embedding
   picks right 84 % (tuning split) and 72 % (held out). ``tool_choice: none`` skips
   the question, ``required`` takes the nearest tool however far, a named function
   answers it.
2. The chosen function's arguments, written by the chat model: the grammar is llama.cpp's
   translation of the tool's JSON schema (each free string at most 120 characters), so
   they are always JSON of the declared shape.

After a function's output (the history ends with it) ``auto`` answers in words: that is
the turn in which the model speaks the result.

Chat templates of small models know only system, user and assistant messages, so a
conversation's function calls and outputs reach the model as notes (``plain_messages``).
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NO_TOOL = "none"
# The cosine similarity between the user's words and a tool's name and description from
# which the tool is called (chosen on the tuning split of benchmarks/tool_choice.py).
TOOL_MATCH_FLOOR = 0.2
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


_ARGUE = (
    "Write the arguments of a call to the function {name}{described} that does what the "
    "user asked, as JSON."
)


def plain_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with function calls and outputs as system notes a template can show: a
    call with its output becomes one note of what the function returned (a small model
    speaks a result it reads last, and none of the call's JSON), a call still waiting for
    its output a note that it was made."""
    out: list[dict[str, Any]] = []
    pending: dict[str, tuple[int, str]] = {}  # call id -> (its note's index, function name)
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                function = call.get("function") or {}
                name, arguments = function.get("name"), function.get("arguments") or "{}"
                pending[str(call.get("id"))] = (len(out), str(name))
                out.append({"role": "system", "content": f"You called {name} with {arguments}."})
            if message.get("content"):
                out.append({"role": "assistant", "content": str(message["content"])})
        elif role == "tool":
            index, name = pending.pop(str(message.get("tool_call_id")), (None, "the function"))
            note = {
                "role": "system",
                "content": f"{name} returned: {message.get('content') or ''}. "
                "Tell the user this result in one short sentence.",
            }
            if index is None:
                out.append(note)
            else:  # in the call's place, so nothing of the call's JSON comes after it
                del out[index]
                out.append(note)
                pending = {k: (i - (i > index), n) for k, (i, n) in pending.items()}
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


def _described(tool: Mapping[str, Any]) -> str:
    """What a tool does, in words: its name and its description."""
    return f"{str(tool.get('name')).replace('_', ' ')}: {tool.get('description') or ''}"


class ToolRouter:
    """Picks the declared tool nearest in meaning to the user's last words (WordLlama)."""

    def __init__(self, floor: float = TOOL_MATCH_FLOOR) -> None:
        from wordllama import WordLlama

        # The wheel ships the weights and the tokenizer; WordLlama 0.4 looks for the
        # tokenizer beside a cache folder, so the package folder is named as the cache.
        package = Path(importlib.util.find_spec("wordllama").origin).parent  # type: ignore[union-attr,arg-type]
        self.model = WordLlama.load(cache_dir=package, disable_download=True)
        self.floor = floor

    def similarities(self, text: str, tools: Sequence[Mapping[str, Any]]) -> list[float]:
        """Cosine similarity of ``text`` to each tool's name and description."""
        vectors = self.model.embed([text, *map(_described, tools)], norm=True)
        return [float(value) for value in vectors[1:] @ vectors[0]]

    def choose(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        choice: Any,
    ) -> Mapping[str, Any] | None:
        """The declared tool this turn calls, or ``None`` to answer in words."""
        if not tools or choice == NO_TOOL:
            return None
        if isinstance(choice, Mapping):
            return next((t for t in tools if t.get("name") == choice.get("name")), None)
        if choice != "required" and messages and messages[-1].get("role") == "tool":
            return None
        text = _last_user(messages)
        if not text.strip():
            return tools[0] if choice == "required" else None
        scores = self.similarities(text, tools)
        best = max(range(len(tools)), key=scores.__getitem__)
        if choice == "required" or scores[best] >= self.floor:
            return tools[best]
        return None


# llama-cpp-python 0.3's JSON-schema converter lets a string hold raw control characters
# (a newline), which JSON forbids; llama.cpp's own converter excludes them, as here.
_LOOSE_CHAR = r'char ::= [^"\\] |'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'


def argument_grammar(schema: Mapping[str, Any]) -> str:
    """GBNF for JSON of ``schema`` whose free strings are bounded and hold no control
    characters, so that any JSON parser reads what the model writes under it."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(json.dumps(bounded(schema)))
    return "\n".join(
        _JSON_CHAR + line[len(_LOOSE_CHAR) :] if line.startswith(_LOOSE_CHAR) else line
        for line in gbnf.split("\n")
    )


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
    grammar = LlamaGrammar.from_string(argument_grammar(schema), verbose=False)
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
