"""Prometheus metrics of one server (``GET /metrics``), on a registry of its own.

Operators and ``omniduplex bench`` read the same numbers: sessions, appends, events,
reply latency (commit -> first audio), barge-in stop latency (cancel received ->
``response.done`` sent), resumes, journal bytes and outbox drops; and for the requests
outside sessions (chat completions, transcriptions, speech): how many were answered with
which status, how long each took to its last byte (``RequestMetricsMiddleware``), and how
many the engine runs now. Each stage model's own counters (``StageModel.counters``, e.g.
the PersonaPlex table's dropped, stale and starved input and its catch-up steps) are
``omniduplex_stage_<name>_total{stage="..."}``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from omniduplex.protocol.duplex.events import RawDuplexEvent, RealtimeEvent

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_CANCELS = frozenset({"response.cancel", "barge_in", "input.cancel", "output_audio_buffer.clear"})
_AUDIO = frozenset({"response.output_audio.delta", "response.audio.delta"})
_TURN_WAIT_BUCKETS = (0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
_SCORE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
_REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The routes whose requests run through the engine outside any session.
REQUEST_ROUTES = frozenset({"/v1/chat/completions", "/v1/audio/transcriptions", "/v1/audio/speech"})


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.active = Gauge("omniduplex_sessions_active", "Sessions open now", registry=r)
        self.admitted = Counter("omniduplex_sessions_admitted", "Sessions opened", registry=r)
        self.rejected = Counter(
            "omniduplex_sessions_rejected", "Opens refused", ["code"], registry=r
        )
        self.appends = Counter("omniduplex_appends", "Audio appends received", registry=r)
        self.events = Counter("omniduplex_events_sent", "Session events sent", ["type"], registry=r)
        self.reply_latency = Histogram(
            "omniduplex_reply_latency_seconds",
            "input_audio_buffer.committed to the response's first audio delta",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.barge_in_latency = Histogram(
            "omniduplex_barge_in_stop_seconds",
            "cancel command received to response.done(cancelled) sent",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.turn_wait = Histogram(
            "omniduplex_turn_decision_silence_seconds",
            "semantic_vad end-of-turn decisions: the silence each pause lasted, by the"
            " decision's verdict and what came of the pause (ended, resumed)",
            ["verdict", "outcome"],
            buckets=_TURN_WAIT_BUCKETS,
            registry=r,
        )
        self.turn_scores = Histogram(
            "omniduplex_turn_decision_score",
            "semantic_vad end-of-turn decisions: the prosody and semantic (words) scores"
            " each saw, by signal and verdict",
            ["signal", "verdict"],
            buckets=_SCORE_BUCKETS,
            registry=r,
        )
        self.resumes = Counter("omniduplex_resumes", "Successful session resumes", registry=r)
        self.journal_bytes = Gauge(
            "omniduplex_journal_bytes", "Bytes held by replay journals", registry=r
        )
        self.outbox_drops = Counter(
            "omniduplex_outbox_drops", "Events dropped by outbound bounds", registry=r
        )
        self.requests = Counter(
            "omniduplex_requests",
            "Requests outside sessions answered, by route and HTTP status",
            ["route", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "omniduplex_request_seconds",
            "A request outside a session, received to its last byte sent",
            ["route"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.requests_in_flight = Gauge(
            "omniduplex_requests_in_flight",
            "Requests outside sessions the engine runs now (max_requests bounds them)",
            registry=r,
        )
        # per session: when its last commit landed / last cancel arrived (monotonic s)
        self._committed_at: dict[str, float] = {}
        self._cancel_at: dict[str, float] = {}
        self._awaiting_audio: set[str] = set()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def watch_stage_counters(self, source: Callable[[], Mapping[str, Mapping[str, float]]]) -> None:
        """Export ``source()`` (stage name -> counter name -> total) on every scrape."""
        self.registry.register(_StageCounterCollector(source))

    def command_received(self, session_id: str, wire_type: str) -> None:
        if wire_type == "input_audio_buffer.append":
            self.appends.inc()
        elif wire_type in _CANCELS:
            self._cancel_at[session_id] = time.monotonic()

    def engine_event(self, event: RealtimeEvent) -> None:
        """Every engine event before it is rendered: the turn decisions' histograms."""
        if not isinstance(event, RawDuplexEvent) or event.internal_type != "turn.decision":
            return
        details = event.event
        verdict = str(details.get("verdict") or "")
        silence = details.get("silence_ms")
        if isinstance(silence, int | float):
            outcome = str(details.get("outcome") or "")
            self.turn_wait.labels(verdict, outcome).observe(silence / 1000)
        for signal in ("prosody", "semantic"):
            score = details.get(signal)
            if isinstance(score, int | float):
                self.turn_scores.labels(signal, verdict).observe(score)

    def event_sent(self, session_id: str, event: dict[str, Any]) -> None:
        kind = event.get("type", "")
        self.events.labels(kind).inc()
        now = time.monotonic()
        if kind == "input_audio_buffer.committed":
            self._committed_at[session_id] = now
            self._awaiting_audio.add(session_id)
        elif kind in _AUDIO and session_id in self._awaiting_audio:
            self._awaiting_audio.discard(session_id)
            committed = self._committed_at.get(session_id)
            if committed is not None:
                self.reply_latency.observe(now - committed)
        elif kind == "response.done":
            self._awaiting_audio.discard(session_id)
            response = event.get("response") or {}
            cancelled_at = self._cancel_at.pop(session_id, None)
            if response.get("status") == "cancelled" and cancelled_at is not None:
                self.barge_in_latency.observe(now - cancelled_at)

    def session_ended(self, session_id: str) -> None:
        self.active.dec()
        self._committed_at.pop(session_id, None)
        self._cancel_at.pop(session_id, None)
        self._awaiting_audio.discard(session_id)


class _StageCounterCollector(Collector):
    def __init__(self, source: Callable[[], Mapping[str, Mapping[str, float]]]) -> None:
        self._source = source

    def describe(self) -> list[Any]:
        return []  # names depend on the models: known only once they report

    def collect(self) -> Iterator[CounterMetricFamily]:
        families: dict[str, CounterMetricFamily] = {}
        for stage, counters in self._source().items():
            for name, value in counters.items():
                metric = "omniduplex_stage_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)
                family = families.get(metric)
                if family is None:
                    family = CounterMetricFamily(
                        metric, f"stage model counter {name}", labels=["stage"]
                    )
                    families[metric] = family
                family.add_metric([stage], float(value))
        yield from families.values()


class RequestMetricsMiddleware:
    """Counts and times the requests of ``REQUEST_ROUTES`` (pure ASGI, so a streamed
    answer is timed to its last byte, not to its headers)."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope.get("path", "") if scope["type"] == "http" else ""
        if route not in REQUEST_ROUTES:
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500  # what the client gets if the app fails before answering

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.request_seconds.labels(route).observe(time.monotonic() - started)
