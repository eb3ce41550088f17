"""``SessionRecorder``: what one bench session measured, from the client's own clock.

Fed synchronously with every event the client dispatches (typed events from
``DuplexClient`` or wire dicts from the plain Realtime driver) and with the commands it
sends, each with its ``time.perf_counter()`` arrival time. All durations are ms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .stats import summarize
from .timeline import StreamTimeline

__all__ = ["AUDIO_TYPES", "SessionRecorder"]

AUDIO_TYPES = frozenset({"response.output_audio.delta", "response.audio.delta"})
_DONE = "response.done"
_CREATED = "response.created"
_ERROR = "error"
_RESUMED = "connection.resumed"
#: What a server answers to a cancel that arrived just after the response finished.
_CANCEL_TOO_LATE = frozenset({"response_cancel_not_active"})


def get(event: Any, key: str) -> Any:
    if isinstance(event, Mapping):
        return event.get(key)
    return getattr(event, key, None)


def b64_nbytes(text: str) -> int:
    """Decoded size of a base64 string, without decoding it."""
    n = len(text)
    if not n:
        return 0
    pad = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
    return n * 3 // 4 - pad


@dataclass(slots=True)
class _Response:
    commit_at: float | None
    first_at: float | None = None
    received_ms: float = 0.0
    play_end: float = 0.0
    cancel_at: float | None = None
    late_bytes: int = 0
    late_ms: float = 0.0
    server_audio_ms: float | None = None
    done: bool = False


@dataclass(slots=True)
class SessionRecorder:
    """Per-session measurements (see the package docstring for their meaning)."""

    index: int
    scenario: str
    output_rate_hz: int = 24_000
    playout_ms: float = 0.0
    reply_ms: list[float] = field(default_factory=list)
    cancel_ms: list[float] = field(default_factory=list)
    late_audio_bytes: list[int] = field(default_factory=list)
    late_audio_ms: list[float] = field(default_factory=list)
    lag_ms: list[float] = field(default_factory=list)
    gap_ms: list[float] = field(default_factory=list)
    send_lag_ms: list[float] = field(default_factory=list)
    resume_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    cancel_methods: Counter[str] = field(default_factory=Counter)
    #: Cancels that crossed the response's own ``response.done`` on the wire (the
    #: server's "nothing active" answer to them is counted here, not as an error).
    cancels_too_late: int = 0
    turns: int = 0
    drops: int = 0
    events: int = 0
    events_lost: int = 0
    events_duplicated: int = 0
    replay_duplicates_dropped: int = 0
    audio_ms_received: float = 0.0
    audio_ms_missing: float = 0.0
    input_ms_sent: float = 0.0
    session_id: str | None = None
    #: The ``stream`` scenario's input/output timeline (None in the turn scenarios).
    stream: StreamTimeline | None = None
    _responses: dict[str, _Response] = field(default_factory=dict)
    _pending_commit: float | None = None
    _last_seq: int | None = None
    _seen_seqs: set[int] = field(default_factory=set)
    _drop_at: float | None = None
    _late_cancels_pending: int = 0

    # ---- commands --------------------------------------------------------------------

    def committed(self, at: float) -> None:
        """The client sent the command that ends the user's turn (commit, or the end of
        speech under server VAD)."""
        self._pending_commit = at

    def cancelled(self, response_id: str | None, at: float, method: str) -> None:
        self.cancel_methods[method] += 1
        for rid, state in self._responses.items():
            if not state.done and (response_id is None or rid == response_id):
                state.cancel_at = at

    def dropped(self, at: float) -> None:
        self.drops += 1
        self._drop_at = at

    def error(self, code: str) -> None:
        self.errors[code] += 1

    # ---- events ----------------------------------------------------------------------

    def on_event(self, kind: str, event: Any, at: float, seq: int | None = None) -> None:
        self.events += 1
        if seq is not None:
            self._track_seq(seq)
        if kind in AUDIO_TYPES:
            self._audio(event, at)
        elif kind == _CREATED:
            rid = get(event, "response_id") or get(get(event, "response") or {}, "id")
            if isinstance(rid, str):
                self._responses[rid] = _Response(commit_at=self._pending_commit)
                self._pending_commit = None
        elif kind == _DONE:
            self._done(event, at)
        elif kind == _ERROR:
            body = get(event, "error")
            code = str((get(body, "code") if body is not None else get(event, "code")) or "")
            if code in _CANCEL_TOO_LATE and self._late_cancels_pending:
                self._late_cancels_pending -= 1
                self.cancels_too_late += 1
            else:
                self.errors[code or "unknown"] += 1
        elif kind == _RESUMED and self._drop_at is not None:
            self.resume_ms.append((at - self._drop_at) * 1000.0)
            self._drop_at = None

    def _track_seq(self, seq: int) -> None:
        last = self._last_seq
        if last is not None:
            if seq in self._seen_seqs or seq <= last:
                self.events_duplicated += 1
                return
            if seq > last + 1:
                self.events_lost += seq - last - 1
        self._last_seq = seq
        self._seen_seqs.add(seq)
        if len(self._seen_seqs) > 4096:
            self._seen_seqs = {s for s in self._seen_seqs if s > seq - 2048}

    def _audio(self, event: Any, at: float) -> None:
        rid = get(event, "response_id")
        nbytes = b64_nbytes(get(event, "delta") or "")
        rate = get(event, "sample_rate_hz") or self.output_rate_hz
        ms = nbytes * 1000.0 / (2 * rate)
        if self.stream is not None:
            self.stream.on_audio(at, rid if isinstance(rid, str) else None, ms)
        state = self._responses.get(rid) if isinstance(rid, str) else None
        if state is None:
            return
        metadata = get(event, "metadata")
        if isinstance(metadata, Mapping) and isinstance(
            metadata.get("audio_duration_ms"), int | float
        ):
            state.server_audio_ms = float(metadata["audio_duration_ms"])
        if state.cancel_at is not None:
            state.late_bytes += nbytes
            state.late_ms += ms
            state.received_ms += ms
            return
        if state.first_at is None:
            state.first_at = at
            state.play_end = at + self.playout_ms / 1000.0
            if state.commit_at is not None:
                self.reply_ms.append((at - state.commit_at) * 1000.0)
        else:
            # Event lag: arrival minus when a real-time player started at the first
            # delta needs this audio.
            self.lag_ms.append(max(0.0, (at - state.first_at) * 1000.0 - state.received_ms))
        if at > state.play_end:
            if state.received_ms > 0:
                self.gap_ms.append((at - state.play_end) * 1000.0)
            state.play_end = at
        state.play_end += ms / 1000.0
        state.received_ms += ms

    def _done(self, event: Any, at: float) -> None:
        response = get(event, "response")
        rid = get(event, "response_id") or get(response or {}, "id")
        status = str(get(response or {}, "status") or "unknown")
        self.statuses[status] += 1
        state = self._responses.pop(rid, None) if isinstance(rid, str) else None
        if state is None:
            return
        state.done = True
        self.audio_ms_received += state.received_ms
        if status == "cancelled" and state.cancel_at is not None:
            self.cancel_ms.append((at - state.cancel_at) * 1000.0)
            self.late_audio_bytes.append(state.late_bytes)
            self.late_audio_ms.append(state.late_ms)
        elif status == "completed" and state.cancel_at is not None:
            self._late_cancels_pending += 1
        if status == "completed" and state.server_audio_ms is not None:
            missing = state.server_audio_ms - state.received_ms
            if missing > 1.0:
                self.audio_ms_missing += missing

    # ---- output ----------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "session_id": self.session_id,
            "scenario": self.scenario,
            "turns": self.turns,
            "events": self.events,
            "responses": dict(self.statuses),
            "cancel_methods": dict(self.cancel_methods),
            "cancels_too_late": self.cancels_too_late,
            "reply_latency_ms": summarize(self.reply_ms),
            "barge_in_stop_ms": summarize(self.cancel_ms),
            "late_audio_bytes": summarize(self.late_audio_bytes),
            "event_lag_ms": summarize(self.lag_ms),
            "underruns": len(self.gap_ms),
            "underrun_gap_ms": summarize(self.gap_ms),
            "send_lag_ms": summarize(self.send_lag_ms),
            "drops": self.drops,
            "resume_ms": summarize(self.resume_ms),
            "events_lost": self.events_lost,
            "events_duplicated": self.events_duplicated,
            "replay_duplicates_dropped": self.replay_duplicates_dropped,
            "audio_ms_received": round(self.audio_ms_received, 1),
            "audio_ms_missing": round(self.audio_ms_missing, 1),
            "input_ms_sent": round(self.input_ms_sent, 1),
            "errors": dict(self.errors),
            "stream": self.stream.summary() if self.stream is not None else None,
        }
