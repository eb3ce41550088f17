"""How unevenly a session's input audio arrives, and the playout lead that covers it.

A client streams its microphone at real time, so consecutive appends should arrive as far
apart as the audio they carry. The difference, append by append, is the jitter of the path
between the client's capture and the session: the network, the client's own scheduling and
this server's event loops. The same path carries the reply back, so the lead the playout
clock keeps in the client's buffer only has to cover that jitter, not a fixed 300 ms.

The estimate is RTP's interarrival jitter (RFC 3550, section 6.4.1): a running mean of
``|D|`` with gain 1/16, where ``D`` is the change in transit time between two appends.
A gap far longer than the audio before it is a pause in sending (push-to-talk, a client
that gates on its own VAD, a reconnect), not jitter: it starts a new spurt and counts for
nothing, as RTP's marker bit does.
"""

from __future__ import annotations

from dataclasses import dataclass

# The lead never goes below this: one release timer tick late under load plus the
# client's own audio callback period.
LEAD_FLOOR_MS = 80
# Mean absolute deviation to a high percentile of the transit-time change (about the
# 99th for a normal distribution).
JITTER_TO_LEAD = 3.0
# Appends before the estimate is trusted; until then the configured lead holds.
SETTLED_AFTER = 16
# A gap longer than the audio before it by this much is a pause in sending.
SPURT_GAP_S = 1.0


@dataclass(slots=True)
class ArrivalJitter:
    """RFC 3550 interarrival jitter over one session's audio appends (seconds)."""

    jitter_s: float = 0.0
    samples: int = 0
    _last_arrival: float | None = None
    _last_duration_s: float = 0.0

    def observe(self, arrived_at: float, duration_s: float) -> None:
        """An append of ``duration_s`` of audio arrived at ``arrived_at`` (monotonic s)."""
        last, self._last_arrival = self._last_arrival, arrived_at
        previous, self._last_duration_s = self._last_duration_s, duration_s
        if last is None or duration_s <= 0.0:
            return
        spacing = arrived_at - last
        if spacing > previous + SPURT_GAP_S:
            return
        self.jitter_s += (abs(spacing - previous) - self.jitter_s) / 16.0
        self.samples += 1

    def lead_ms(self, ceiling_ms: int) -> int:
        """The playout lead for the next response: the configured ``ceiling_ms`` until
        the estimate has settled, then enough to cover the jitter, within the floor and
        the ceiling."""
        if self.samples < SETTLED_AFTER:
            return ceiling_ms
        wanted = LEAD_FLOOR_MS + JITTER_TO_LEAD * self.jitter_s * 1000.0
        return int(min(ceiling_ms, max(min(LEAD_FLOOR_MS, ceiling_ms), round(wanted))))
