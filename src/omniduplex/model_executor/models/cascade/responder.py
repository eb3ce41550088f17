"""Stage 1: turn the transcript and the conversation into reply text.

``responder: local`` streams a reply from the cascade's own small language model
(``local_llm.py``); ``responder: openai`` streams one from any OpenAI-compatible
``/chat/completions`` endpoint (``OpenAIChatResponder``). Either runs on a background thread
per request, and the stage hands out tokens as they arrive, markdown taken out
(``SpokenText``: the words are spoken). A failing or silent model fails that response only
(``responder_failed``). ``responder: rules`` (``RuleResponder``) is deterministic, for
tests: it answers the time and the date, a few courtesies, and otherwise repeats what it
understood (or says it did not understand).

Outputs, in order, per request: the transcript (passed through for the session's user
item), then reply text pieces (``kind: reply``), the last one ``final``; or one ``listen``
or ``error``. A response with ``tools`` may instead (or after its text) call them:
``kind: tool_call`` pieces (``call_id``, ``name``, the next part of ``arguments``, the last
one ``done``), which TTS passes on untouched.

A request may open with drafts (``kind: draft``, ``draft_replies``): each is answered at
once, its outputs behind a ``kind: draft`` marker (TTS holds what follows it and forgets
anything held before), the transcript and the end withheld. The final transcript then
confirms the draft when it asks exactly what the draft asked (the same chat messages and
settings: ``_Reply.key``): its transcript goes out, then its end; otherwise the draft is
stopped and the answer starts afresh behind a new marker. A draft is not made for a
response that may call tools.

The rule responder calls a declared tool when every word of its name (split at ``_`` and
``-``) is among the user's words (``check_weather`` for "check the weather please"), or
when ``tool_choice`` names it or is ``required`` (the first tool); its arguments give every
string property the tool's schema declares the user's whole sentence. Asked to speak
after a tool's output (the history ends with it), it speaks that output: a JSON object as
its values, anything else as it is.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from omniduplex.engine.stage import StageInput, StageModel, StageOutput

from .engines import responder_engine
from .local_llm import LocalChatResponder
from .local_tools import ToolCallPiece
from .options import CascadeOptions
from .spoken_text import SpokenText

NOT_UNDERSTOOD = "Sorry, I did not understand that."
# The rule responder's first words when asked to speak first, and when asked to speak
# again with nothing new from the user.
GREETING = "Hello! How can I help you?"
ANYTHING_ELSE = "Is there anything else I can help you with?"
# How often the idle stage looks for tokens a backend thread queued.
_POLL_S = 0.005


def _words(text: str) -> set[str]:
    """The words of ``text``, lower case, without punctuation (Whisper writes it)."""
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def new_call_id() -> str:
    return "call_" + os.urandom(12).hex()


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


class ResponderError(RuntimeError):
    pass


def chat_messages(
    system_prompt: str, instructions: str | None, history: Sequence[Mapping[str, Any]], user: str
) -> list[dict[str, Any]]:
    """The session's instructions (or, when it set none, the deployment's system prompt),
    history (function calls and their outputs included), then the user's turn. A client's
    instructions replace the default prompt, as OpenAI's Realtime API does."""
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
    last = messages[-1]
    if user and not (last["role"] == "user" and str(last["content"]).strip() == user.strip()):
        messages.append({"role": "user", "content": user})
    return messages


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


@dataclass(slots=True)
class _Reply:
    meta: dict[str, Any]
    outbox: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    started_at: float = 0.0
    first_token_at: float | None = None
    # A draft's: what it answers (``key``) and its last output, kept until confirmed;
    # once confirmed, its transcript, which goes out behind the draft marker and ahead of
    # the end (the outbox may already hold a quick draft's end when the commit comes).
    draft: bool = False
    key: Any = None
    withheld_end: dict[str, Any] | None = None
    marker_sent: bool = False
    confirmation: dict[str, Any] | None = None


class ResponderStageModel(StageModel):
    """One request per response; its input is the ASR stage's transcript output, after
    any drafts (``drafts_started``; the final transcript confirmed ``drafts_confirmed``
    of them and dropped ``drafts_dropped``)."""

    def __init__(
        self,
        options: CascadeOptions | Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        **settings: Any,
    ) -> None:
        self.options = CascadeOptions.coerce(options, settings)
        self._clock = clock
        self.rules = RuleResponder.from_options(self.options)
        self.engine, _ = responder_engine(self.options)
        self.llm: OpenAIChatResponder | LocalChatResponder | None = None
        if self.engine == "openai":
            self.llm = OpenAIChatResponder(self.options)
        elif self.engine == "local":
            self.llm = LocalChatResponder(self.options)
        self._replies: dict[str, _Reply] = {}
        self.drafts_started = self.drafts_confirmed = self.drafts_dropped = 0

    @property
    def open_requests(self) -> int:
        return len(self._replies)

    def add_request(self, request_id: str, inputs: StageInput) -> None:
        reply = _Reply(meta=dict(inputs.data), started_at=self._clock())
        self._replies[request_id] = reply
        if reply.meta.get("kind") == "draft":
            self._draft(request_id, reply)
        else:
            self._start(request_id, reply)

    def update_request(self, request_id: str, inputs: StageInput) -> None:
        """A later draft, or the final transcript, of a request that opened with one."""
        current = self._replies.get(request_id)
        if current is None or not current.draft:
            raise ValueError(f"responder request {request_id!r} takes exactly one input")
        meta = dict(inputs.data)
        key = self._key(meta)
        if key is not None and key == current.key:
            if meta.get("kind") == "draft":
                return  # the same question again
            self._confirm(current, meta)
            return
        current.cancelled.set()
        reply = _Reply(meta=meta, started_at=self._clock())
        self._replies[request_id] = reply
        if meta.get("kind") == "draft":
            self._draft(request_id, reply)
            return
        if current.key is not None:
            self.drafts_dropped += 1
        reply.outbox.put({"kind": "draft"})  # TTS forgets the draft's words
        self._start(request_id, reply)

    def _draft(self, request_id: str, reply: _Reply) -> None:
        reply.draft = True
        reply.key = self._key(reply.meta)
        if reply.key is None:
            return  # nothing to draft (tools may be called): wait for the transcript
        self.drafts_started += 1
        reply.outbox.put({"kind": "draft"})
        self._start(request_id, reply)

    def _confirm(self, reply: _Reply, meta: dict[str, Any]) -> None:
        """The draft answers the committed turn: let its transcript and end go out."""
        self.drafts_confirmed += 1
        reply.draft = False
        trace = dict(meta.get("trace") or {})
        trace["responder_drafted_s"] = self._clock() - reply.started_at
        reply.meta = {**meta, "trace": trace}
        reply.confirmation = self._transcript(meta)

    def _key(self, meta: Mapping[str, Any]) -> Any:
        """What a reply's words depend on; ``None`` when it cannot be drafted."""
        user = self._user(meta)
        if meta.get("kind") not in ("draft", "transcript") or not user or meta.get("tools"):
            return None
        messages = chat_messages(
            self.options.system_prompt, meta.get("instructions"), meta.get("history") or (), user
        )
        settings = ("temperature", "max_output_tokens", "voice", "with_audio")
        return json.dumps([messages, [meta.get(name) for name in settings]], sort_keys=True)

    @staticmethod
    def _user(meta: Mapping[str, Any]) -> str:
        heard = str(meta.get("transcript") or "").strip()
        typed = str(meta.get("text") or "").strip()
        return " ".join(part for part in (heard, typed) if part)

    @staticmethod
    def _transcript(meta: Mapping[str, Any]) -> dict[str, Any]:
        """The transcript, for the session's user item."""
        return {
            **_passed_on(meta),
            "kind": "transcript",
            "transcript": meta.get("transcript") or "",
            "heard_audio": bool(meta.get("heard_audio")),
        }

    def abort(self, request_id: str) -> None:
        reply = self._replies.pop(request_id, None)
        if reply is not None:
            reply.cancelled.set()

    def close(self) -> None:
        for request_id in list(self._replies):
            self.abort(request_id)

    def _start(self, request_id: str, reply: _Reply) -> None:
        meta = reply.meta
        kind = meta.get("kind")
        if kind not in ("transcript", "draft"):
            # An upstream error (or anything else) goes on unchanged.
            reply.outbox.put({**meta, "_final": True})
            return
        if not reply.draft:
            reply.outbox.put(self._transcript(meta))
        user = self._user(meta)
        if meta.get("opening") and not user:
            self._open_conversation(request_id, reply)
            return
        if not user and not meta.get("heard_audio"):
            # A turn without speech (noise the energy detector took for speech) or empty.
            reason = "no_speech" if meta.get("input_audio_s") else "no_input"
            reply.outbox.put({"kind": "listen", "reason": reason, "_final": True})
            return
        if self.llm is None:
            call = self.rules.tool_call(user, meta.get("tools") or (), meta.get("tool_choice"))
            if call is not None:
                name, arguments = call
                piece = {"kind": "tool_call", "call_id": new_call_id(), "name": name}
                reply.outbox.put({**piece, "arguments": json.dumps(arguments), "done": True})
                reply.outbox.put({"kind": "reply", "text": "", "final": True, "_final": True})
                return
            text = self.rules.reply(user)
            reply.outbox.put({"kind": "reply", "text": text, "final": True, "_final": True})
            return
        if not user:
            reply.outbox.put(
                {"kind": "reply", "text": NOT_UNDERSTOOD, "final": True, "_final": True}
            )
            return
        # A small model neither knows the time nor copies it from a prompt reliably; a
        # declared tool the model picks goes first (a client's own clock, say).
        clock = self.rules.clock_answer(user) if self.engine == "local" else None
        callable_tools = meta.get("tools") and meta.get("tool_choice") != "none"
        if clock is not None and not callable_tools:
            reply.outbox.put({"kind": "reply", "text": clock, "final": True, "_final": True})
            return
        messages = chat_messages(
            self.options.system_prompt, meta.get("instructions"), meta.get("history") or (), user
        )
        self._start_llm(request_id, reply, messages, rule_answer=clock)

    def _open_conversation(self, request_id: str, reply: _Reply) -> None:
        """Speak first (or again) from the instructions and the history alone."""
        meta = reply.meta
        history = meta.get("history") or ()
        if self.llm is None:
            text = self.rules.opening(history)
            reply.outbox.put({"kind": "reply", "text": text, "final": True, "_final": True})
            return
        messages = chat_messages(self.options.system_prompt, meta.get("instructions"), history, "")
        self._start_llm(request_id, reply, messages)

    def _start_llm(
        self,
        request_id: str,
        reply: _Reply,
        messages: list[dict[str, Any]],
        rule_answer: str | None = None,
    ) -> None:
        reply.thread = threading.Thread(
            target=self._run_llm,
            args=(reply, messages, rule_answer),
            name=f"cascade-llm-{request_id[-24:]}",
            daemon=True,
        )
        reply.thread.start()

    def _run_llm(
        self, reply: _Reply, messages: list[dict[str, Any]], rule_answer: str | None
    ) -> None:
        assert self.llm is not None
        meta = reply.meta
        produced = False
        calls: dict[int, dict[str, Any]] = {}  # by the backend's index
        spoken = SpokenText()
        extra = {"rule_answer": rule_answer} if rule_answer is not None else {}
        try:
            for delta in self.llm.stream(
                messages,
                temperature=meta.get("temperature"),
                max_tokens=meta.get("max_output_tokens"),
                cancelled=reply.cancelled,
                tools=meta.get("tools") or (),
                tool_choice=meta.get("tool_choice") or "auto",
                **extra,
            ):
                if reply.cancelled.is_set():
                    return
                produced = True
                if isinstance(delta, ToolCallPiece):
                    call = calls.setdefault(
                        delta.index,
                        {"kind": "tool_call", "call_id": delta.call_id or new_call_id()},
                    )
                    call["name"] = call.get("name") or delta.name or ""
                    reply.outbox.put({**call, "arguments": delta.arguments, "done": False})
                    continue
                text = spoken.feed(delta)
                if text:
                    reply.outbox.put({"kind": "reply", "text": text, "final": False})
            rest = spoken.feed("", final=True)
            if rest:
                reply.outbox.put({"kind": "reply", "text": rest, "final": False})
            for call in calls.values():
                reply.outbox.put({**call, "arguments": "", "done": True})
        except Exception as exc:
            message = (
                str(exc) if isinstance(exc, ResponderError) else f"{type(exc).__name__}: {exc}"
            )
            reply.outbox.put(
                {"kind": "error", "code": "responder_failed", "message": message, "_final": True}
            )
            return
        if not produced:
            reply.outbox.put(
                {
                    "kind": "error",
                    "code": "responder_failed",
                    "message": "chat backend returned no text",
                    "_final": True,
                }
            )
            return
        reply.outbox.put({"kind": "reply", "text": "", "final": True, "_final": True})

    def ready_request_ids(self) -> list[str]:
        return [
            rid
            for rid, reply in self._replies.items()
            if not reply.outbox.empty() or reply.confirmation is not None
        ]

    def wake_after_s(self) -> float | None:
        if any(reply.thread is not None for reply in self._replies.values()):
            return _POLL_S
        return None

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        outputs: list[StageOutput] = []
        now = self._clock()
        for request_id in request_ids:
            reply = self._replies.get(request_id)
            if reply is None:
                continue
            while True:
                try:
                    data = reply.outbox.get_nowait()
                except queue.Empty:
                    data = self._confirmed_end(reply)
                    if data is None:
                        break
                if data.get("kind") == "draft":
                    reply.marker_sent = True
                elif data.get("_final"):
                    if reply.draft:
                        reply.withheld_end = data  # a draft ends only once confirmed
                        break
                    if reply.confirmation is not None:
                        outputs.append(self.output(request_id, reply.confirmation))
                        reply.confirmation = None
                final = bool(data.pop("_final", False))
                if data.get("kind") == "reply":
                    if reply.first_token_at is None:
                        reply.first_token_at = now
                    trace = dict(reply.meta.get("trace") or {})
                    trace["responder_first_text_s"] = reply.first_token_at - reply.started_at
                    trace["responder_started_at"] = reply.started_at
                    data = {**_passed_on(reply.meta), **data, "trace": trace}
                elif data.get("kind") in ("listen", "error", "tool_call"):
                    data = {**_passed_on(reply.meta), **data}
                if final:
                    del self._replies[request_id]
                outputs.append(self.output(request_id, data, finished=final))
                if final:
                    break
        return outputs

    def _confirmed_end(self, reply: _Reply) -> dict[str, Any] | None:
        """With the outbox drained: a confirmed draft's transcript (once its marker is
        out), then its withheld end."""
        if reply.confirmation is not None and reply.marker_sent:
            confirmation, reply.confirmation = reply.confirmation, None
            return confirmation
        if reply.confirmation is None and not reply.draft and reply.withheld_end is not None:
            end, reply.withheld_end = reply.withheld_end, None
            return end
        return None


def _passed_on(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What TTS needs of the request besides the text."""
    return {key: meta[key] for key in ("response_id", "with_audio", "voice") if key in meta}
