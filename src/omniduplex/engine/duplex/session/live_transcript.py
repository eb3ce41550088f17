"""Transcribing the user while they speak (plugins that ``transcribes_while_speaking``).

Part of the session runner (single writer), through its ``SessionContext``. Server VAD
opens an *utterance*: at speech start one stage-0 request is opened with the turn's
audio from the speech onset (its prefix padding included) and fed every later append, so
the model decodes as the user talks and reports whole hypotheses addressed to the
session. At commit the utterance either becomes the request of the response that answers
it, or is closed for its transcript alone (no response follows right away).

Hypotheses revise their last words; the wire's deltas cannot. ``TranscriptDeltas`` lets a
word out once two hypotheses in a row agree on it, and the completed event carries the
final transcript, which is authoritative.

An utterance's request belongs to the epoch it was opened in. When a cancel advances the
epoch while the user speaks, the next feed reopens the utterance under the new epoch with
all its audio so far: nothing of a cancelled epoch is used after its terminal event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ....protocol.duplex import wants_logprobs
from ..contracts import DuplexFence, StageSubmission, stage_request_id
from ..plugin import ModelError, ModelInputTranscript, ResponseRequest
from .context import FinalTranscript, SessionContext, StageOutputItem
from .part_events import InputTranscribed

log = logging.getLogger(__name__)


class TranscriptDeltas:
    """Turns successive whole hypotheses into append-only deltas (local agreement of 2)."""

    def __init__(self) -> None:
        self._emitted: list[str] = []
        self._previous: list[str] = []

    @property
    def text(self) -> str:
        """Everything let out so far (the deltas joined)."""
        return " ".join(self._emitted)

    @property
    def words(self) -> int:
        """How many words the deltas let out so far."""
        return len(self._emitted)

    def partial(self, hypothesis: str) -> str:
        """The delta a new hypothesis lets out ('' when nothing new is settled)."""
        words = hypothesis.split()
        agreed = _common_prefix(words, self._previous)
        self._previous = words
        return self._extend(agreed)

    def final(self, transcript: str) -> str:
        """The delta that completes the deltas to ``transcript``, if they are its prefix."""
        self._previous = []
        return self._extend(transcript.split())

    def _extend(self, words: list[str]) -> str:
        count = len(self._emitted)
        if len(words) <= count or words[:count] != self._emitted:
            return ""
        self._emitted = list(words)
        added = " ".join(words[count:])
        return " " + added if count else added


def _common_prefix(a: list[str], b: list[str]) -> list[str]:
    size = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        size += 1
    return a[:size]


@dataclass(slots=True)
class Utterance:
    item_id: str
    start_sample: int  # where the speech (with its padding) starts in the turn's audio
    request_id: str = ""
    fence: DuplexFence | None = None  # the fence its request was opened under
    failed: bool = False
    deltas: TranscriptDeltas = field(default_factory=TranscriptDeltas)
    # Hypotheses so far and the last one, replaced whole (turn detection reads it from a
    # pool thread).
    heard: tuple[int, str] = (0, "")

    @property
    def epoch(self) -> int:
        return -1 if self.fence is None else self.fence.epoch


class LiveTranscription:
    """The runner's part that transcribes the user while they speak (a no-op for plugins
    that do not ``transcribes_while_speaking``, and for model-native ones)."""

    def __init__(
        self, ctx: SessionContext, *, preview: Callable[[], ResponseRequest | None]
    ) -> None:
        self.ctx = ctx
        # The request the response to the turn being spoken would get (drafting plugins).
        self._preview = preview
        self.session = ctx.session
        self.out = ctx.out
        plugin = ctx.plugin
        self.enabled = plugin.transcribes_while_speaking and not plugin.streams_input
        self._speaking: Utterance | None = None
        # Committed utterances whose final transcript is still to come, by request id.
        self._finishing: dict[str, Utterance] = {}
        self._opened = 0

    # ---- while the user speaks ----------------------------------------------------

    def begin(self, item_id: str, start_sample: int) -> None:
        """Speech started: open an utterance with the turn's audio from ``start_sample``."""
        if not self.enabled:
            return
        self.abort()
        self._speaking = Utterance(item_id=item_id, start_sample=max(0, start_sample))
        self._open(self._speaking)

    def feed(self, samples: np.ndarray) -> None:
        """More of the turn's audio (already in the turn) while the user speaks."""
        utterance = self._speaking
        if utterance is None or utterance.failed or not samples.size:
            return
        if utterance.epoch != self.session.epoch:
            self._open(utterance)  # its audio so far includes ``samples``
            return
        self._submit(utterance, samples, opening=False)

    def abort(self) -> None:
        """Forget the utterance being spoken (input cleared, or no speech after all)."""
        utterance, self._speaking = self._speaking, None
        if utterance is not None:
            self._release(utterance)

    # ---- at commit -------------------------------------------------------------------

    def hand_over(self) -> str | None:
        """The committed utterance's request, for the response that answers it (None: the
        response gets the turn's audio)."""
        utterance = self._hand_over()
        return utterance.request_id if utterance is not None else None

    def _hand_over(self) -> Utterance | None:
        utterance, self._speaking = self._speaking, None
        # Transcripts still owed by a cancelled epoch will never arrive: forget them.
        epoch = self.session.epoch
        self._finishing = {r: u for r, u in self._finishing.items() if u.epoch == epoch}
        if utterance is None:
            return None
        if utterance.failed or utterance.epoch != self.session.epoch:
            self._release(utterance)
            return None
        self._finishing[utterance.request_id] = utterance
        return utterance

    def finish_transcript_only(self) -> None:
        """The committed utterance gets no response now: close it for its transcript."""
        utterance = self._hand_over()
        if utterance is None:
            return
        try:
            data = self.ctx.plugin.plan_utterance_end(self.session.model_state)
            self.ctx.stage.submit(
                StageSubmission(utterance.request_id, 0, data, utterance.fence, final=True)
            )
        except Exception as exc:
            self._finishing.pop(utterance.request_id, None)
            self._release(utterance)
            self.out.error("input_transcription_failed", f"could not finish the transcript: {exc}")

    def transcribe_committed(self, item_id: str, audio: np.ndarray) -> None:
        """A transcription session's committed turn: the utterance that heard it is
        closed for its transcript; a turn no utterance heard (manual commits, a plugin
        that does not decode while the user speaks) is transcribed whole."""
        if self._speaking is not None and self._speaking.item_id == item_id:
            self.finish_transcript_only()
            return
        self.abort()
        utterance = Utterance(item_id=item_id, start_sample=0)
        self._opened += 1
        utterance.fence = self.session.fence
        utterance.request_id = stage_request_id(utterance.fence, f"utt{self._opened}")
        plugin = self.ctx.plugin
        state = self.session.model_state
        extra = {"logprobs": True} if self._wants_logprobs() else {}
        try:
            opening = plugin.plan_utterance_audio(state, audio, opening=True, **extra)
            self.ctx.stage.submit(
                StageSubmission(utterance.request_id, 0, opening, utterance.fence)
            )
            end = plugin.plan_utterance_end(state)
            self.ctx.stage.submit(
                StageSubmission(utterance.request_id, 0, end, utterance.fence, final=True)
            )
        except Exception as exc:
            self._release(utterance)
            self.out.error("input_transcription_failed", f"could not transcribe the turn: {exc}")
            return
        self._finishing[utterance.request_id] = utterance

    def take_final(self, request_id: str, transcript: str) -> FinalTranscript | None:
        """The committed utterance a final transcript of ``request_id`` belongs to (it
        reports nothing more), with the delta that completes its deltas."""
        utterance = self._finishing.pop(request_id, None)
        if utterance is None:
            return None
        before = utterance.deltas.words
        return FinalTranscript(utterance.item_id, utterance.deltas.final(transcript), before)

    def forget(self, request_ids: list[str]) -> None:
        """A response ended: utterances it carried will report nothing more."""
        for request_id in request_ids:
            self._finishing.pop(request_id, None)

    # ---- stage outputs -----------------------------------------------------------------

    def claims(self, item: StageOutputItem) -> bool:
        """Handle an output that is the utterance's own (hypotheses, its errors)."""
        utterance = self._find(item.request_id)
        if utterance is None:
            return False
        response = self.session.response
        if not item.to_owner and response is not None and item.request_id in response.request_ids:
            return False  # the response's own output (its reply, or its failure)
        if item.error is not None:
            self._lost(utterance, item.request_id, item.error)
            return True
        for result in self.ctx.plugin.data_plane.project(item.data):
            if isinstance(result, ModelInputTranscript):
                if result.final:
                    self.ctx.tell(InputTranscribed(result, item.request_id))
                else:
                    self._partial(utterance, result)
            elif isinstance(result, ModelError):
                self._lost(utterance, item.request_id, result.message)
        if item.finished:
            self._finishing.pop(item.request_id, None)
        return True

    def heard(self) -> tuple[int, str] | None:
        if not self.enabled:
            return None
        utterance = self._speaking
        return utterance.heard if utterance is not None else (0, "")

    def _partial(self, utterance: Utterance, result: ModelInputTranscript) -> None:
        hypothesis = result.text
        utterance.heard = (utterance.heard[0] + 1, hypothesis)
        before = utterance.deltas.words
        delta = utterance.deltas.partial(hypothesis)
        if delta:
            logprobs = _words_logprobs(result.logprobs, before, utterance.deltas.words)
            self.out.input_transcript_delta(utterance.item_id, delta, logprobs)

    def _lost(self, utterance: Utterance, request_id: str, message: str) -> None:
        self._finishing.pop(request_id, None)
        utterance.failed = True  # a commit falls back to handing the whole turn over
        self._release(utterance)
        self.out.error("input_transcription_failed", message)

    def _find(self, request_id: str) -> Utterance | None:
        speaking = self._speaking
        if speaking is not None and speaking.request_id == request_id:
            return speaking
        return self._finishing.get(request_id)

    # ---- stage requests --------------------------------------------------------------

    def _open(self, utterance: Utterance) -> None:
        """(Re)open the utterance's request in the current epoch with its audio so far."""
        self._release(utterance)
        self._opened += 1
        utterance.fence = self.session.fence
        utterance.request_id = stage_request_id(utterance.fence, f"utt{self._opened}")
        audio = self.session.input.audio()[utterance.start_sample :]
        self._submit(utterance, audio, opening=True)

    def _submit(self, utterance: Utterance, samples: np.ndarray, *, opening: bool) -> None:
        plugin = self.ctx.plugin
        try:
            # Only a plugin that drafts replies is asked with a preview (older ones keep
            # the signature they were written against).
            extra: dict[str, Any] = {}
            if opening and plugin.drafts_replies:
                extra["preview"] = self._preview()
            if opening and self._wants_logprobs():
                extra["logprobs"] = True
            data = plugin.plan_utterance_audio(
                self.session.model_state, samples, opening=opening, **extra
            )
            self.ctx.stage.submit(StageSubmission(utterance.request_id, 0, data, utterance.fence))
        except Exception as exc:
            # The commit hands the whole turn over instead, as without live transcription.
            log.warning("live transcription of %s stopped: %s", utterance.item_id, exc)
            utterance.failed = True
            self._release(utterance)

    def _wants_logprobs(self) -> bool:
        """The session's ``include`` asks for them and the plugin reports them (only
        such a plugin is asked, so older ones keep their signature)."""
        wanted = wants_logprobs(self.session.settings.echoed.get("include"))
        return wanted and self.ctx.plugin.reports_logprobs

    def _release(self, utterance: Utterance) -> None:
        if utterance.request_id:
            self.ctx.stage.abort([utterance.request_id])


def _words_logprobs(
    logprobs: tuple[dict[str, Any], ...] | None, start: int, end: int
) -> list[dict[str, Any]] | None:
    """The log probabilities of words ``start`` to ``end`` of a hypothesis (those a
    delta lets out), when the hypothesis has them."""
    if logprobs is None:
        return None
    return [dict(entry) for entry in logprobs[start:end]]
