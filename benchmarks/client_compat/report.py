"""What every client driver shares: the table's columns, one run's report, the server it
talks to, and the speech it sends."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import numpy as np
import soxr

T = TypeVar("T")

# Guards against hangs only: a step that has not happened by then has failed.
STEP_TIMEOUT_S = 60.0

# One column per step of a conversation, in the order a conversation takes them.
COLUMNS = (
    "connect",
    "configure",
    "audio_in",
    "reply_audio",
    "transcripts",
    "interruption",
    "close",
)

# What the driver speaks: a question whose answer (the clock's, on the cascade's rule
# responder and its local model alike) is a whole sentence, long enough to interrupt
# while it plays.
QUESTION = "What is the date today?"


@dataclasses.dataclass
class CompatReport:
    """One client library's conversation against one deployment.

    ``steps`` maps each of ``COLUMNS`` to whether it worked; ``errors`` lists every error
    the client library itself surfaced (its error events, callbacks or exceptions);
    ``notes`` says anything else worth knowing about the run.
    """

    client: str
    version: str
    deployment: str
    steps: dict[str, bool] = dataclasses.field(default_factory=dict)
    errors: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        for column in COLUMNS:
            self.steps.setdefault(column, False)

    @property
    def ok(self) -> bool:
        return all(self.steps.get(column, False) for column in COLUMNS) and not self.errors

    def mark(self, column: str, worked: bool = True) -> None:
        if column not in COLUMNS:
            raise KeyError(column)
        self.steps[column] = bool(worked)

    def error(self, message: str) -> None:
        self.errors.append(message)

    def note(self, message: str) -> None:
        self.notes.append(message)

    def to_json(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "version": self.version,
            "deployment": self.deployment,
            "ok": self.ok,
            "steps": {column: bool(self.steps.get(column, False)) for column in COLUMNS},
            "errors": list(self.errors),
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        """One line for an assertion message: the failed steps and the errors."""
        failed = [c for c in COLUMNS if not self.steps.get(c, False)]
        return (
            f"{self.client} {self.version} on {self.deployment}: failed steps {failed}; "
            f"errors {self.errors}; notes {self.notes}"
        )


@dataclasses.dataclass(frozen=True)
class Target:
    """A running omniduplex server.

    ``http_url`` is its root (``http://127.0.0.1:PORT``), ``ws_url`` its Realtime route
    (``ws://127.0.0.1:PORT/v1/realtime``), ``model`` the served model name and
    ``deployment`` the deployment it serves.
    """

    http_url: str
    ws_url: str
    model: str
    deployment: str

    @property
    def http_v1(self) -> str:
        """``http://HOST:PORT/v1``: an OpenAI client's ``base_url``."""
        return self.http_url.rstrip("/") + "/v1"

    @property
    def ws_v1(self) -> str:
        """``ws://HOST:PORT/v1``: an OpenAI client's ``websocket_base_url``."""
        return self.ws_url.rstrip("/").rsplit("/", 1)[0]


def transcribes_input(target: Target) -> bool:
    """Whether the deployment's model transcribes the user's speech, so a conversation
    must show the user's transcript as well as the assistant's: the cascades do (their
    ASR), loopback does not (it has no recogniser; only its replies carry a transcript)."""
    return not target.deployment.startswith("loopback")


def _float_to_pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


@functools.cache
def _spoken(text: str, rate_hz: int) -> bytes:
    """``text`` spoken at ``rate_hz`` as pcm16: piper's neural voice when installed (the
    cascade's free-speech ASR recognises it well), else the cascade's espeak-ng voice."""
    try:
        from omniduplex.model_executor.models.cascade.piper_voice import PiperSpeechVoice

        voice: Any = PiperSpeechVoice()
    except Exception:  # the piper extra is not installed: espeak ships with the project
        from omniduplex.model_executor.models.cascade.tts import EspeakVoice

        voice = EspeakVoice("en-us")
    samples = np.asarray(voice.synthesize(text), dtype=np.float32)
    resampled = soxr.resample(samples, voice.sample_rate_hz, rate_hz)
    return _float_to_pcm16(np.asarray(resampled, dtype=np.float32))


def question_pcm16(rate_hz: int = 24_000, text: str = QUESTION) -> bytes:
    """A spoken English question as mono pcm16 at ``rate_hz``, without leading or trailing
    silence (add ``silence_pcm16`` around it)."""
    return _spoken(text, int(rate_hz))


def silence_pcm16(ms: int, rate_hz: int = 24_000) -> bytes:
    """``ms`` milliseconds of digital silence as mono pcm16 at ``rate_hz``."""
    return bytes(2 * (int(rate_hz) * int(ms) // 1000))


def chunks(pcm: bytes, rate_hz: int, chunk_ms: int = 40) -> list[bytes]:
    """``pcm`` (mono pcm16) cut into ``chunk_ms`` pieces, as a microphone would send it."""
    step = 2 * (int(rate_hz) * int(chunk_ms) // 1000)
    return [pcm[i : i + step] for i in range(0, len(pcm), step)]


async def paced(pcm: bytes, rate_hz: int, chunk_ms: int = 40) -> AsyncIterator[bytes]:
    """``chunks(pcm, rate_hz, chunk_ms)`` handed out in real time: chunk k at k * chunk_ms
    after the first (a microphone's pace; a slow consumer is not made up for twice)."""
    t0 = time.perf_counter()
    for k, piece in enumerate(chunks(pcm, rate_hz, chunk_ms)):
        delay = t0 + k * chunk_ms / 1000 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        yield piece


class Microphone:
    """A live microphone: from ``start()`` to ``stop()`` it hands ``send`` one
    ``chunk_ms`` chunk of pcm16 every ``chunk_ms`` in real time, silence unless it is
    saying something (``say``), as a client's audio input does."""

    def __init__(
        self, send: Callable[[bytes], Awaitable[None]], rate_hz: int, chunk_ms: int = 40
    ) -> None:
        self._send = send
        self.rate_hz = int(rate_hz)
        self.chunk_ms = int(chunk_ms)
        self._step = 2 * (self.rate_hz * self.chunk_ms // 1000)
        self._pending = bytearray()
        self._drained = asyncio.Event()
        self._drained.set()
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self.sent_ms = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def say(self, pcm: bytes) -> None:
        """Speak ``pcm`` next; returns once its last chunk has been handed to ``send``."""
        self.start()
        self._pending.extend(pcm)
        self._drained.clear()
        waiter = asyncio.create_task(self._drained.wait())
        assert self._task is not None
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self.error is not None:
            raise self.error

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        t0 = time.perf_counter()
        k = 0
        try:
            while True:
                delay = t0 + k * self.chunk_ms / 1000 - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self._pending:
                    chunk = bytes(self._pending[: self._step])
                    del self._pending[: self._step]
                    chunk += bytes(self._step - len(chunk))
                else:
                    chunk = bytes(self._step)
                await self._send(chunk)
                self.sent_ms += self.chunk_ms
                if not self._pending:
                    self._drained.set()
                k += 1
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the client refused audio: the caller hears of it
            self.error = exc
            self._drained.set()


class EventLog(Generic[T]):
    """Everything a client library handed the driver, in order, with a way to wait for the
    first item after a position that satisfies a predicate."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self._changed = asyncio.Event()

    def add(self, item: T) -> None:
        self.items.append(item)
        self._changed.set()

    def __len__(self) -> int:
        return len(self.items)

    def find(self, accept: Callable[[T], bool], after: int = 0) -> T | None:
        return next((item for item in self.items[after:] if accept(item)), None)

    def index(self, accept: Callable[[T], bool], after: int = 0) -> int | None:
        return next((i for i in range(after, len(self.items)) if accept(self.items[i])), None)

    async def wait(
        self, accept: Callable[[T], bool], after: int = 0, timeout_s: float = STEP_TIMEOUT_S
    ) -> T | None:
        """The first item at ``after`` or later that ``accept``s, waiting up to
        ``timeout_s`` for it; None when it never came."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            found = self.find(accept, after)
            if found is not None:
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return self.find(accept, after)


def package_version(distribution: str) -> str:
    """The installed version of ``distribution`` ("missing" when it is not installed)."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "missing"
