"""The words model's child process (``words_turn_model``): SmolLM2 on llama.cpp.

Run as ``python -m omniduplex.model_executor.models.cascade.words_turn_worker GGUF
THREADS``. It prints ``{"ready": true}`` once loaded, then answers each stdin line
``{"id": N, "text": "..."}`` with ``{"id": N, "p": P}``: the probability that the user's
message ends after ``text`` (the end-of-turn token or a sentence-final mark next). The
chat template's head (system and the user's opening) is evaluated once and kept in the
cache, so a question evaluates only the words' tokens.
"""

from __future__ import annotations

import json
import sys

import numpy as np

# SmolLM2's ChatML, the user's message left open after its words.
_HEAD = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
_END_MARKS = (".", "?", "!")


def main(model_path: str, threads: int) -> None:
    from llama_cpp import Llama

    llm = Llama(
        model_path=model_path,
        n_ctx=256,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=True,
        verbose=False,
    )
    head = llm.tokenize(_HEAD.encode(), add_bos=False, special=True)
    llm.eval(head)
    kept = llm.n_tokens
    ends = {llm.tokenize(b"<|im_end|>", add_bos=False, special=True)[0]}
    ends |= {llm.tokenize(mark.encode(), add_bos=False, special=False)[0] for mark in _END_MARKS}
    ending = np.array(sorted(ends))
    room = 256 - kept - 1
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        question = json.loads(line)
        words = llm.tokenize(question["text"].encode(), add_bos=False, special=False)[-room:]
        llm._ctx.kv_cache_seq_rm(-1, kept, -1)
        llm.n_tokens = kept
        llm.eval(words)
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top = logits.max()
        probabilities = np.exp(logits - top)
        p = float(probabilities[ending].sum() / probabilities.sum())
        print(json.dumps({"id": question["id"], "p": p}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
