"""Deploy-level session limits (the ``duplex_session`` block of a deploy YAML).

Clients never set these. ``max_sessions`` bounds admission; the byte and turn limits bound
what one session may queue; ``max_input_turn_s`` bounds the audio one uncommitted turn
may hold (a client that streams without ever committing: ``input_audio_buffer_full``);
``max_buffered_input_s`` bounds the input audio all sessions hold together, uncommitted
turns and committed ones no response has taken yet (``server_input_audio_full``); the
outbox limits bound what the server holds for a client that stops reading (DESIGN
decision 13).

The input is held as float32 at the model's input rate: 64 KB per second of audio at
16 kHz, 96 KB at 24 kHz. A turn of 120 s is minutes longer than a spoken turn (seconds to
tens of seconds) and takes a two-minute recording whole; OpenAI takes one append of up to
15 MiB of base64 (about 4 min of 24 kHz pcm16), so longer uploads are split into turns
here. 1920 s in all is 16 such turns (the default ``max_sessions``), about 123 MB at
16 kHz and 184 MB at 24 kHz. A deployment with more sessions shares it: turns under
server VAD keep little more than the speech itself.

``output_audio_pacing`` / ``output_audio_lead_ms`` / ``output_audio_lead`` are the
sessions' defaults for the playout clock (a session may change each in
``session.update``): ``realtime`` releases a response's audio at real time plus the lead,
``none`` as fast as it is generated. The lead is at most ``output_audio_lead_ms``:
``adaptive`` keeps what the jitter of the session's own input arrivals needs
(session/arrival_jitter.py), ``fixed`` exactly that.
``max_unplayed_output_bytes_per_session`` bounds the audio a paced response may hold in
the engine ahead of its playout (base64 text; 8 MiB is about 130 s of 24 kHz pcm16): a
response that generates more than that ahead of real time fails with
``output_audio_backlog_full``.

``max_unsent_output_bytes_per_session`` bounds what a Realtime socket holds for its client
on top of the transport's own 64 KiB write buffer: events queued and not yet written
(base64 audio, each event charged 256 bytes more; a resume's replay, and what follows it
while it waits, is the journal's, within its bound). 256 KiB is about 4 s of 24 kHz pcm16
(6 s at 16 kHz). A client that falls that far behind, or ``max_outbox_events_per_session``
events, is treated as disconnected: its socket is aborted and its session detaches
(resumable) or closes. ``max_outbox_bytes_per_session`` is the same bound for an
in-process handle's outbox.

``max_transcription_sessions`` bounds transcription sessions (``session.type:
"transcription"``) apart: they only run the ASR, so a deployment serves many of them beside
its conversations, and neither kind takes the other's slots.

``when_full`` is what a new session finds when its kind's limit is reached: ``refuse``
answers ``resource_exhausted``; ``evict_detached`` (the default) gives it the slot of the
session of its kind that has been detached longest (its socket dropped, still inside its
``disconnect_grace_s``), which ends with ``session.expired``, reason
``evicted_for_new_session``; with none detached, the new session is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

_CHECKED_APART = frozenset(
    {"idle_ttl_s", "output_audio_pacing", "output_audio_lead_ms", "output_audio_lead", "when_full"}
)
WHEN_FULL = ("refuse", "evict_detached")


@dataclass(frozen=True, slots=True)
class DuplexSessionRuntimeConfig:
    max_sessions: int = 16
    max_transcription_sessions: int = 64
    idle_ttl_s: float | None = 300.0
    disconnect_grace_s: float = 30.0
    reaper_interval_s: float = 1.0
    resume_replay_ttl_s: float = 60.0
    resume_replay_max_bytes_per_session: int = 8 * 1024 * 1024
    max_pending_input_bytes_per_session: int = 16 * 1024 * 1024
    max_pending_turns_per_session: int = 4
    max_input_turn_s: float = 120.0
    max_buffered_input_s: float = 1920.0
    max_outbox_events_per_session: int = 2048
    max_outbox_bytes_per_session: int = 8 * 1024 * 1024
    max_unsent_output_bytes_per_session: int = 256 * 1024
    max_idle_timeout_s: float = 3600.0
    offload_workers: int = 4
    output_audio_pacing: str = "realtime"
    output_audio_lead_ms: int = 300
    output_audio_lead: str = "adaptive"
    max_unplayed_output_bytes_per_session: int = 8 * 1024 * 1024
    when_full: str = "evict_detached"

    def __post_init__(self) -> None:
        if self.idle_ttl_s is not None and self.idle_ttl_s <= 0:
            raise ValueError("duplex_session.idle_ttl_s must be positive or null")
        if self.output_audio_pacing not in ("realtime", "none"):
            raise ValueError("duplex_session.output_audio_pacing must be realtime or none")
        if self.output_audio_lead not in ("adaptive", "fixed"):
            raise ValueError("duplex_session.output_audio_lead must be adaptive or fixed")
        if self.when_full not in WHEN_FULL:
            raise ValueError(f"duplex_session.when_full must be one of {', '.join(WHEN_FULL)}")
        lead = self.output_audio_lead_ms
        if isinstance(lead, bool) or not isinstance(lead, int) or lead < 0:
            raise ValueError("duplex_session.output_audio_lead_ms must be an integer >= 0")
        for f in fields(self):
            if f.name in _CHECKED_APART:
                continue
            value = getattr(self, f.name)
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"duplex_session.{f.name} must be positive")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> DuplexSessionRuntimeConfig:
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown duplex_session setting(s): {', '.join(unknown)}")
        return cls(**raw)
