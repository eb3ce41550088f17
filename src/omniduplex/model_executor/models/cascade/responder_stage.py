"""Stage 1: turn the transcript and the conversation into reply text.

``responder: local`` streams a reply from the cascade's own small language model
(``local_llm.py``); ``responder: openai`` streams one from any OpenAI-compatible
``/chat/completions`` endpoint (``openai_chat.py``). Either runs on a background thread
per request, and the stage hands out tokens as they arrive, markdown taken out
(``SpokenText``: the words are spoken). A failing or silent model fails that response only
(``responder_failed``). ``responder: rules`` replies by rule (``rule_responder.py``).

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
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from omniduplex.engine.stage import StageInput, StageModel, StageOutput

from .engines import responder_engine
from .local_llm import LocalChatResponder
from .local_tools import ToolCallPiece
from .openai_chat import OpenAIChatResponder, ResponderError, chat_messages, went_quiet
from .options import CascadeOptions
from .rule_responder import NOT_UNDERSTOOD, STILL_THERE, RuleResponder
from .spoken_text import SpokenText

# How often the idle stage looks for tokens a backend thread queued.
_POLL_S = 0.005


def new_call_id() -> str:
    return "call_" + os.urandom(12).hex()


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
        if not user and went_quiet(meta.get("history") or ()):
            self._check_in(request_id, reply)
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

    def _check_in(self, request_id: str, reply: _Reply) -> None:
        """The user stayed silent past the idle timeout: prompt them to go on (the LLM
        reads the silence from history, ``chat_messages``)."""
        meta = reply.meta
        if self.llm is None:
            reply.outbox.put({"kind": "reply", "text": STILL_THERE, "final": True, "_final": True})
            return
        history = meta.get("history") or ()
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
