"""The ``stream`` scenario: audio in at real-time pace, nothing else (model-native servers).

A model-native server (PersonaPlex, Moshi) hears a continuous stream and speaks when its
model decides; it refuses commits and ``response.create``. Each session here only appends
``--chunk-ms`` of audio on a fixed real-time schedule until ``--duration`` is over, reads
whatever the server sends, and measures (``StreamTimeline``):

* **output audio rate**: seconds of output audio received per second of wall time, from
  the first output audio to the end of the stream (1.0: the model's audio keeps real time;
  a model that stays silent part of the time also lowers it);
* **frame latency**: for a lockstep model (one output frame per input frame), output
  frame *i* answers input frame *i*. The client numbers the output audio in order of
  arrival; a gap between two responses (the model listening) counts as the whole frames
  its arrival gap spans. The numbering is anchored at the first output audio, taken to
  answer the freshest input sent by then; from there output position ``p`` answers input
  position ``p + anchor``, and the frame latency of an output unit is its arrival minus the
  send time of the input chunk that completed its matching input position. The anchor
  makes this a lower bound: a backlog the server already had when it first spoke (input
  queued during a voice prompt, say) is invisible from the wire, while any backlog that
  builds up later (a tick that overruns and is never made up) shows as latency growth.
  Output that matches input the client has not sent yet (the server fed the session
  silence while it streamed) is counted as ``frames_ahead_of_input`` and gets no latency;
  output after the end of the stream gets neither;
* **growth**: frame latency p50 over the first and the last ``min(10 s, span / 2)`` of
  the session and the least-squares slope in ms per minute;
* **held in real time**: output rate >= ``REALTIME_RATE`` and frame latency p95 <
  ``REALTIME_P95_MS``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from .stats import summarize

__all__ = ["GROWTH_WINDOW_S", "REALTIME_P95_MS", "REALTIME_RATE", "StreamTimeline"]

#: A session is held in real time when its output keeps at least this share of real time...
REALTIME_RATE = 0.95
#: ... and its frame latency p95 stays under this.
REALTIME_P95_MS = 200.0
#: Growth windows: the first and last this many seconds (or half the span when shorter).
GROWTH_WINDOW_S = 10.0


@dataclass(slots=True)
class StreamTimeline:
    """One session's input sends and output arrivals on the client's ``perf_counter``."""

    #: Send time and cumulative input ms after each append.
    send_at: list[float] = field(default_factory=list)
    input_end_ms: list[float] = field(default_factory=list)
    #: Arrival time and ms of each output audio unit.
    arrivals: list[tuple[float, float]] = field(default_factory=list)
    #: (arrival time, frame latency ms) of each output unit that answers sent input.
    latency: list[tuple[float, float]] = field(default_factory=list)
    stream_started_at: float | None = None
    stream_ended_at: float | None = None
    first_output_at: float | None = None
    unit_ms: float | None = None
    output_position_ms: float = 0.0
    anchor_ms: float = 0.0
    frames_ahead_of_input: int = 0
    gaps_inferred: int = 0
    gap_ms_inferred: float = 0.0
    _response_id: str | None = None
    _last_output_at: float | None = None

    def on_sent(self, at: float, chunk_ms: float) -> None:
        """An append of ``chunk_ms`` left the client at ``at``."""
        if self.stream_started_at is None:
            self.stream_started_at = at
        total = (self.input_end_ms[-1] if self.input_end_ms else 0.0) + chunk_ms
        self.send_at.append(at)
        self.input_end_ms.append(total)

    def on_audio(self, at: float, response_id: str | None, ms: float) -> None:
        """An output audio unit of ``ms`` (of response ``response_id``) arrived at ``at``."""
        if ms <= 0:
            return
        self.arrivals.append((at, ms))
        if self.unit_ms is None:
            self.unit_ms = ms
        sent_ms = self.input_end_ms[-1] if self.input_end_ms else 0.0
        if self.first_output_at is None:
            self.first_output_at = at
            # The anchor: the first output answers the freshest input sent by now.
            self.anchor_ms = sent_ms - ms
        elif response_id != self._response_id and self._last_output_at is not None:
            # The model listened between two responses: the frames it stayed quiet for.
            frames = round((at - self._last_output_at) * 1000.0 / self.unit_ms) - 1
            if frames > 0:
                self.gaps_inferred += 1
                self.gap_ms_inferred += frames * self.unit_ms
                self.output_position_ms += frames * self.unit_ms
        self._response_id = response_id
        self._last_output_at = at
        self.output_position_ms += ms
        target = self.output_position_ms + self.anchor_ms
        if target <= 0.0:
            return  # answers audio from before the client's first append
        index = bisect.bisect_left(self.input_end_ms, target - 1e-6)
        if index >= len(self.input_end_ms):
            # After the stream ended the server answers silence: not ahead of anything.
            if self.stream_ended_at is None or at <= self.stream_ended_at:
                self.frames_ahead_of_input += 1
            return
        self.latency.append((at, (at - self.send_at[index]) * 1000.0))

    def ended(self, at: float) -> None:
        self.stream_ended_at = at

    # ---- summary -----------------------------------------------------------------------

    def output_rate(self) -> float | None:
        start, end = self.first_output_at, self.stream_ended_at
        if start is None or end is None or end <= start:
            return None
        received = sum(ms for t, ms in self.arrivals if t <= end)
        return received / 1000.0 / (end - start)

    def growth(self) -> dict[str, Any] | None:
        if len(self.latency) < 2:
            return None
        t0, t1 = self.latency[0][0], self.latency[-1][0]
        window = min(GROWTH_WINDOW_S, (t1 - t0) / 2.0)
        first = [v for t, v in self.latency if t <= t0 + window]
        last = [v for t, v in self.latency if t >= t1 - window]
        return {
            "window_s": round(window, 3),
            "first_p50_ms": _p50(first),
            "last_p50_ms": _p50(last),
            "slope_ms_per_min": _slope_per_min(self.latency),
        }

    def summary(self) -> dict[str, Any]:
        rate = self.output_rate()
        latency = summarize(v for _, v in self.latency)
        held = (
            rate is not None
            and latency is not None
            and rate >= REALTIME_RATE
            and latency["p95"] < REALTIME_P95_MS
        )
        first_output_ms = None
        if self.first_output_at is not None and self.stream_started_at is not None:
            first_output_ms = round((self.first_output_at - self.stream_started_at) * 1000.0, 3)
        return {
            "input_ms_sent": round(self.input_end_ms[-1], 1) if self.input_end_ms else 0.0,
            "output_ms_received": round(sum(ms for _, ms in self.arrivals), 1),
            "output_rate": round(rate, 4) if rate is not None else None,
            "first_output_ms": first_output_ms,
            "output_unit_ms": self.unit_ms,
            "frame_latency_ms": latency,
            "latency_growth": self.growth(),
            "frames_ahead_of_input": self.frames_ahead_of_input,
            "gaps_inferred": self.gaps_inferred,
            "gap_ms_inferred": round(self.gap_ms_inferred, 1),
            "held_realtime": held,
        }


def _p50(values: list[float]) -> float | None:
    dist = summarize(values)
    return dist["p50"] if dist else None


def _slope_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of latency (ms) over time, in ms per minute."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var <= 0:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return round(cov / var * 60.0, 3)
