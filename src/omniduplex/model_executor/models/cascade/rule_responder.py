"""``responder: rules``: replies by rule, no model; deterministic, for tests.

``RuleResponder`` answers the time and the date, a few courtesies, and otherwise repeats
what it understood (or says it did not understand). It calls a declared tool when every
word of its name (split at ``_`` and ``-``) is among the user's words (``check_weather``
for "check the weather please"), or when ``tool_choice`` names it or is ``required`` (the
first tool); its arguments give every string property the tool's schema declares the
user's whole sentence. Asked to speak after a tool's output (the history ends with it),
it speaks that output: a JSON object as its values, anything else as it is. To a user
who stayed silent past the idle timeout it says ``STILL_THERE``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .options import CascadeOptions

NOT_UNDERSTOOD = "Sorry, I did not understand that."
# The rule responder's first words when asked to speak first, and when asked to speak
# again with nothing new from the user.
GREETING = "Hello! How can I help you?"
ANYTHING_ELSE = "Is there anything else I can help you with?"
# Its words to a user who stayed silent past the session's idle_timeout_ms.
STILL_THERE = "Are you still there?"


def _words(text: str) -> set[str]:
    """The words of ``text``, lower case, without punctuation (Whisper writes it)."""
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _name_words(name: str) -> set[str]:
    return {word for word in re.split(r"[_\-]+", name.lower()) if word}


def _spoken_output(output: str) -> str:
    """A tool's output as words: a JSON object's values, anything else as it is."""
    try:
        value = json.loads(output)
    except ValueError:
        return output.strip()
    if isinstance(value, dict):
        return ", ".join(str(v) for v in value.values())
    return str(value)


class RuleResponder:
    """Rules, no model: same words in, same words out (``now`` pins the clock)."""

    def __init__(self, now: Callable[[], dt.datetime] | None = None) -> None:
        self._now = now or (lambda: dt.datetime.now().astimezone())

    @classmethod
    def from_options(cls, options: CascadeOptions) -> RuleResponder:
        if options.responder_now:
            fixed = dt.datetime.fromisoformat(options.responder_now)
            return cls(now=lambda: fixed)
        return cls()

    def reply(self, heard: str) -> str:
        text = " ".join(heard.split())
        words = _words(text)
        if not words:
            return NOT_UNDERSTOOD
        clock = self.clock_answer(text)
        if clock is not None:
            return clock
        if "name" in words and "your" in words:
            return "I am omniduplex, a voice assistant."
        if words & {"thank", "thanks"}:
            return "You're welcome."
        if words & {"bye", "goodbye"}:
            return "Goodbye!"
        if words & {"hello", "hi", "hey"}:
            return "Hello! How can I help you?"
        return f"You said: {text.rstrip('.!?')}."

    def clock_answer(self, heard: str) -> str | None:
        """The time or the date, when ``heard`` asks for it (else ``None``)."""
        words = _words(heard)
        now = self._now()
        if "time" in words and words & {"what", "tell", "the", "whats"}:
            hour = now.hour % 12 or 12
            return f"It is {hour}:{now.minute:02d} {'AM' if now.hour < 12 else 'PM'}."
        if words & {"date", "day", "today"} and words & {"what", "which", "whats", "tell"}:
            return f"Today is {now:%A}, {now:%B} {now.day}, {now.year}."
        return None

    def opening(self, history: Sequence[Mapping[str, Any]]) -> str:
        """What to say with nothing new from the user: a tool's output just given, a
        greeting, or an offer of more help."""
        if history and history[-1].get("role") == "tool":
            spoken = _spoken_output(str(history[-1].get("content") or ""))
            return f"{spoken.rstrip('.')}." if spoken else ANYTHING_ELSE
        spoke = any(message.get("role") == "assistant" for message in history)
        return ANYTHING_ELSE if spoke else GREETING

    def tool_call(
        self, heard: str, tools: Sequence[Mapping[str, Any]], choice: Any
    ) -> tuple[str, dict[str, Any]] | None:
        """The tool to call for ``heard`` and its arguments, by the rule in the module
        docstring; ``None`` to answer in words."""
        if not tools or choice == "none":
            return None
        by_name = {str(tool.get("name")): tool for tool in tools}
        chosen = None
        if isinstance(choice, Mapping):
            chosen = by_name.get(str(choice.get("name")))
        if chosen is None:
            words = _words(heard)
            chosen = next((t for t in tools if _name_words(str(t.get("name"))) <= words), None)
        if chosen is None and choice == "required":
            chosen = tools[0]
        if chosen is None:
            return None
        schema = chosen.get("parameters") if isinstance(chosen.get("parameters"), Mapping) else {}
        properties = (
            schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        )
        text = " ".join(heard.split())
        arguments = {
            key: text
            for key, spec in properties.items()
            if isinstance(spec, Mapping) and spec.get("type") == "string"
        }
        return str(chosen.get("name")), arguments
