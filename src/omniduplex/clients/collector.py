"""``EventCollector``: every event and every sent command, with its arrival time.

Used by tests and benchmarks (unbounded by design: it keeps everything it saw)::

    collector = EventCollector()
    collector.attach(client)          # synchronous listener: exact arrival times
    ... drive the conversation ...
    print(collector.summary())

Times are ``time.perf_counter()`` seconds. ``summary()`` derives latencies only from what
the client itself observed: when it sent a command and when an event reached it.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .events import (
    AUDIO_DELTA,
    CANCEL_COMMANDS,
    ERROR,
    INPUT_COMMITTED,
    RESPONSE_CREATED,
    RESPONSE_DONE,
    TERMINAL_TYPES,
    TEXT_DELTA,
    TRANSCRIPT_DELTA,
    DuplexClientError,
    decode_output_audio,
    response_id_of,
)

__all__ = ["EventCollector", "Record", "distribution"]

_COMMIT_COMMANDS = frozenset({"input_audio_buffer.commit", "input.commit", "response.create"})
_INPUT_TRANSCRIPT_DELTA = "conversation.item.input_audio_transcription.delta"
_INPUT_TRANSCRIBED = "conversation.item.input_audio_transcription.completed"


@dataclass(frozen=True, slots=True)
class Record:
    """One observation: ``kind`` is ``"event"`` (received) or ``"send"`` (a wire dict)."""

    kind: str
    type: str
    at: float
    obj: Any


def distribution(
    values: Iterable[float],
    *,
    quantiles: tuple[float, ...] = (0.50, 0.95),
    non_negative: bool = True,
) -> dict[str, float | int] | None:
    """``{count, mean, p50, p95, min, max}`` (nearest rank, ms rounded to 3 decimals) of
    the finite values, the non-negative ones only unless ``non_negative`` is False; other
    ``quantiles`` add or drop ``p<nn>`` keys. ``None`` when no value is kept."""
    kept = sorted(
        v
        for v in values
        if isinstance(v, int | float) and math.isfinite(v) and (v >= 0 or not non_negative)
    )
    if not kept:
        return None

    def rank(p: float) -> float:
        return kept[max(0, math.ceil(p * len(kept)) - 1)]

    out: dict[str, float | int] = {"count": len(kept), "mean": round(sum(kept) / len(kept), 3)}
    for q in quantiles:
        out[f"p{round(q * 100)}"] = round(rank(q), 3)
    out["min"] = round(kept[0], 3)
    out["max"] = round(kept[-1], 3)
    return out


class EventCollector:
    """Records what one client received and sent, with ``perf_counter`` times."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.records: list[Record] = []
        self.started_at = clock()
        self._detach: Callable[[], None] | None = None

    # ---- feeding -------------------------------------------------------------------------

    def attach(self, client: Any) -> EventCollector:
        """Record everything ``client`` dispatches and sends from now on (synchronously,
        so arrival times are exact and nothing can be missed)."""
        self.detach()
        self._detach = client.add_listener(self._on_client)
        return self

    def detach(self) -> None:
        if self._detach is not None:
            self._detach()
            self._detach = None

    async def consume(self, client: Any) -> None:
        """Alternative to ``attach``: read ``client.events()`` until the session ends."""
        try:
            async for event in client.events():
                self.add(event)
        except DuplexClientError:
            pass

    def _on_client(self, kind: str, obj: Any, at: float) -> None:
        if kind == "send":
            self.sent(obj, at=at)
        else:
            self.add(obj, at=at)

    def add(self, event: Any, *, at: float | None = None) -> None:
        """Record a received event (typed event or wire dict)."""
        kind = event.get("type", "") if isinstance(event, Mapping) else getattr(event, "type", "")
        self.records.append(Record("event", kind, self.clock() if at is None else at, event))

    def sent(self, command: Mapping[str, Any], *, at: float | None = None) -> None:
        """Record a command the client sent (a wire dict)."""
        kind = command.get("type", "")
        self.records.append(Record("send", kind, self.clock() if at is None else at, command))

    # ---- queries -------------------------------------------------------------------------

    @property
    def events(self) -> list[Any]:
        return [r.obj for r in self.records if r.kind == "event"]

    @property
    def types(self) -> list[str]:
        return [r.type for r in self.records if r.kind == "event"]

    def of_type(self, *types: str) -> list[Any]:
        """Received events of any of ``types``, in arrival order."""
        return [r.obj for r in self.records if r.kind == "event" and r.type in types]

    def sent_of_type(self, *types: str) -> list[Mapping[str, Any]]:
        return [r.obj for r in self.records if r.kind == "send" and r.type in types]

    def count(self, type_: str) -> int:
        return sum(1 for r in self.records if r.kind == "event" and r.type == type_)

    def errors(self) -> list[Any]:
        return self.of_type(ERROR)

    def response_ids(self) -> list[str]:
        """Responses in ``response.created`` order."""
        out: list[str] = []
        for r in self.records:
            if r.kind == "event" and r.type == RESPONSE_CREATED:
                rid = _rid(r.obj)
                if rid is not None and rid not in out:
                    out.append(rid)
        return out

    def response_events(self, response_id: str) -> list[Any]:
        return [r.obj for r in self.records if r.kind == "event" and _rid(r.obj) == response_id]

    def transcript(self, response_id: str) -> str:
        return "".join(
            _get(e, "delta") or ""
            for e in self.response_events(response_id)
            if _type(e) in (TRANSCRIPT_DELTA, TEXT_DELTA)
        )

    def user_transcript(self, item_id: str) -> str:
        """What the server heard in a user item: its completed transcript, or until that
        arrives the ``input_audio_transcription.delta`` texts so far."""
        heard = ""
        for r in self.records:
            if r.kind != "event" or _get(r.obj, "item_id") != item_id:
                continue
            if r.type == _INPUT_TRANSCRIBED:
                return str(_get(r.obj, "transcript") or "")
            if r.type == _INPUT_TRANSCRIPT_DELTA:
                heard += str(_get(r.obj, "delta") or "")
        return heard

    def audio_bytes(self, response_id: str | None = None) -> bytes:
        """PCM16 of one response (or of all, in arrival order)."""
        chunks: list[bytes] = []
        for r in self.records:
            if r.kind != "event" or r.type != AUDIO_DELTA:
                continue
            if response_id is not None and _rid(r.obj) != response_id:
                continue
            chunks.append(decode_output_audio(_WireView(r.obj))[0])
        return b"".join(chunks)

    def timeline(self, *, origin: float | None = None) -> list[tuple[float, str, str]]:
        """``(ms since origin, "->"/"<-", type)`` per record; ``origin`` defaults to the
        first record."""
        if not self.records:
            return []
        start = self.records[0].at if origin is None else origin
        return [
            (round((r.at - start) * 1000.0, 1), "->" if r.kind == "send" else "<-", r.type)
            for r in self.records
        ]

    # ---- the summary ---------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Latencies and counts, all derived from client-side times (ms).

        * ``responses[id]``: ``status``, ``audio_ms`` (received), ``chunks``,
          ``commit_to_first_audio_ms`` (the last commit / ``response.create`` sent before
          the response was created, else the server's ``input_audio_buffer.committed``
          arrival), ``created_to_first_audio_ms``, ``cancel_to_done_ms`` (the first
          cancelling command sent while it was active, to its ``response.done``);
        * ``commit_to_first_audio_ms`` / ``cancel_to_done_ms`` /
          ``created_to_first_audio_ms``: distributions over the responses;
        * ``counts`` (received events per type), ``sent`` (commands per type), ``errors``,
          ``duration_ms``.
        """
        per_response: dict[str, dict[str, Any]] = {}
        last_commit_sent: float | None = None
        last_commit_seen: float | None = None
        active: dict[str, dict[str, Any]] = {}
        for r in self.records:
            if r.kind == "send":
                if r.type in _COMMIT_COMMANDS:
                    last_commit_sent = r.at
                elif r.type in CANCEL_COMMANDS:
                    target = r.obj.get("response_id") if isinstance(r.obj, Mapping) else None
                    for rid, info in active.items():
                        if (target is None or target == rid) and info["cancel_at"] is None:
                            info["cancel_at"] = r.at
                continue
            if r.type == INPUT_COMMITTED:
                last_commit_seen = r.at
                continue
            rid = _rid(r.obj)
            if r.type == RESPONSE_CREATED and rid is not None:
                info = {
                    "created_at": r.at,
                    "commit_at": last_commit_sent
                    if last_commit_sent is not None
                    else last_commit_seen,
                    "first_audio_at": None,
                    "cancel_at": None,
                    "done_at": None,
                    "status": None,
                    "audio_bytes": 0,
                    "audio_ms": 0.0,
                    "chunks": 0,
                }
                per_response[rid] = info
                active[rid] = info
                last_commit_sent = None
                last_commit_seen = None
                continue
            info = per_response.get(rid) if rid is not None else None
            if info is None:
                continue
            if r.type == AUDIO_DELTA:
                pcm, rate = decode_output_audio(_WireView(r.obj))
                if info["first_audio_at"] is None:
                    info["first_audio_at"] = r.at
                info["chunks"] += 1
                info["audio_bytes"] += len(pcm)
                info["audio_ms"] += len(pcm) * 1000.0 / (2 * rate)
            elif r.type == RESPONSE_DONE:
                info["done_at"] = r.at
                response = _get(r.obj, "response")
                if isinstance(response, Mapping):
                    info["status"] = response.get("status")
                active.pop(rid, None)

        def ms(a: float | None, b: float | None) -> float | None:
            if a is None or b is None:
                return None
            return round((b - a) * 1000.0, 3)

        responses: dict[str, dict[str, Any]] = {}
        for rid, info in per_response.items():
            cancelled = info["status"] == "cancelled"
            responses[rid] = {
                "status": info["status"],
                "chunks": info["chunks"],
                "audio_ms": round(info["audio_ms"], 3),
                "commit_to_first_audio_ms": ms(info["commit_at"], info["first_audio_at"]),
                "created_to_first_audio_ms": ms(info["created_at"], info["first_audio_at"]),
                "created_to_done_ms": ms(info["created_at"], info["done_at"]),
                "cancel_to_done_ms": ms(info["cancel_at"], info["done_at"]) if cancelled else None,
            }

        def dist(key: str) -> dict[str, float | int] | None:
            return distribution([v[key] for v in responses.values() if v[key] is not None])

        counts = Counter(r.type for r in self.records if r.kind == "event")
        sent = Counter(r.type for r in self.records if r.kind == "send")
        first = self.records[0].at if self.records else self.started_at
        last = self.records[-1].at if self.records else first
        return {
            "responses": responses,
            "commit_to_first_audio_ms": dist("commit_to_first_audio_ms"),
            "created_to_first_audio_ms": dist("created_to_first_audio_ms"),
            "cancel_to_done_ms": dist("cancel_to_done_ms"),
            "counts": dict(counts),
            "sent": dict(sent),
            "errors": counts.get(ERROR, 0),
            "closed": any(r.kind == "event" and r.type in TERMINAL_TYPES for r in self.records),
            "duration_ms": round((last - first) * 1000.0, 3),
        }


def _type(event: Any) -> str:
    if isinstance(event, Mapping):
        return str(event.get("type", ""))
    return str(getattr(event, "type", ""))


def _get(event: Any, key: str) -> Any:
    if isinstance(event, Mapping):
        return event.get(key)
    return getattr(event, key, None)


def _rid(event: Any) -> str | None:
    if isinstance(event, Mapping):
        rid = event.get("response_id")
        if isinstance(rid, str):
            return rid
        response = event.get("response")
        if isinstance(response, Mapping) and isinstance(response.get("id"), str):
            return str(response["id"])
        return None
    return response_id_of(event)


class _WireView:
    """Attribute access over a wire dict, for ``decode_output_audio``."""

    __slots__ = ("_obj",)

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __getattr__(self, name: str) -> Any:
        return _get(self._obj, name)
