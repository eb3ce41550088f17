"""Base classes of the typed wire vocabulary: server events and client commands.

An event is a frozen-at-construction dataclass: every mutable payload it is given is
copied when it is built (a later change to the caller's dict never reaches the wire), and
rendering is a plain walk over a per-class field plan, cheap enough for the audio hot path.

Identity fields (``event_id``, ``session_id``, ``epoch``) live on every event for
in-process consumers; the generic renderer emits only ``event_id``. A class that shows
``session_id`` / ``epoch`` on the wire lists them in ``rendered_identity``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

Dialect = Literal["ga", "beta"]
DIALECTS: tuple[Dialect, ...] = ("ga", "beta")
IDENTITY_FIELDS = frozenset({"event_id", "session_id", "epoch"})


def new_event_id() -> str:
    """A server event id: ``event_`` + 32 lowercase hex digits (uuid4-sized)."""
    return "event_" + os.urandom(16).hex()


def snapshot(value: Any) -> Any:
    """A JSON-shaped deep copy: mappings become dicts with str keys, sequences lists."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): snapshot(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [snapshot(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        raise TypeError("raw bytes cannot be rendered; encode audio as base64 first")
    return value


class _WirePlan:
    __slots__ = ("fields", "optional", "snapshot_fields")

    def __init__(self, cls: type[RealtimeEvent]) -> None:
        names = [f.name for f in fields(cls)]
        rendered = [n for n in names if n not in IDENTITY_FIELDS or n in cls.rendered_identity]
        self.fields: tuple[str, ...] = tuple(n for n in rendered if n != "event_id")
        self.optional: frozenset[str] = frozenset(cls.optional_fields)
        self.snapshot_fields: tuple[str, ...] = tuple(n for n in names if n not in IDENTITY_FIELDS)


@dataclass(kw_only=True, slots=True)
class RealtimeEvent:
    """One server-to-client event.

    Class attributes describe the wire: ``type`` is the GA name, ``beta_type`` the name in
    the beta dialect (``None``: the event does not exist there and is not sent),
    ``optional_fields`` are omitted when ``None``, ``tier`` is 1 (OpenAI), 2 (OpenAI name
    with our additions) or 3 (ours).
    """

    type: ClassVar[str] = ""
    beta_type: ClassVar[str | None] = None
    tier: ClassVar[int] = 1
    optional_fields: ClassVar[frozenset[str]] = frozenset()
    rendered_identity: ClassVar[frozenset[str]] = frozenset()
    terminal: ClassVar[bool] = False

    event_id: str = field(default_factory=new_event_id)
    session_id: str | None = None
    epoch: int | None = None

    def __post_init__(self) -> None:
        for name in self._plan().snapshot_fields:
            value = getattr(self, name)
            if isinstance(value, Mapping | list | tuple):
                object.__setattr__(self, name, snapshot(value))

    @classmethod
    def _plan(cls) -> _WirePlan:
        plan = cls.__dict__.get("_wire_plan_cache")
        if plan is None:
            plan = _WirePlan(cls)
            cls._wire_plan_cache = plan  # type: ignore[attr-defined]
        return plan

    @classmethod
    def wire_type(cls, dialect: Dialect = "ga") -> str | None:
        """The event's ``type`` in ``dialect``, or ``None`` when that dialect lacks it."""
        if dialect == "beta":
            return cls.beta_type
        return cls.type

    def wire_fields(self) -> dict[str, Any]:
        """The event's own fields as they appear on the wire (no ``type``/``event_id``)."""
        plan = self._plan()
        optional = plan.optional
        out: dict[str, Any] = {}
        for name in plan.fields:
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            out[name] = value
        return out

    def to_realtime(self, dialect: Dialect = "ga") -> dict[str, Any] | None:
        """Render the event as its Realtime JSON object, or ``None`` if ``dialect`` lacks it."""
        wire_type = self.wire_type(dialect)
        if wire_type is None:
            return None
        out: dict[str, Any] = {"type": wire_type, "event_id": self.event_id}
        out.update(self.wire_fields())
        if dialect == "beta":
            return self.adapt_beta(out)
        return out

    def adapt_beta(self, rendered: dict[str, Any]) -> dict[str, Any]:
        """Reshape a rendered event for the beta dialect (session shape, names of parts)."""
        return rendered

    @classmethod
    def from_wire_fields(cls, obj: Mapping[str, Any]) -> RealtimeEvent:
        """Rebuild an event from its rendered JSON (unknown keys are ignored)."""
        names = {f.name for f in fields(cls)} - {"session_id", "epoch"}
        names |= set(cls.rendered_identity)
        kwargs = {name: obj[name] for name in names if name in obj}
        return cls(**kwargs)


@dataclass(kw_only=True, slots=True)
class RealtimeCommand:
    """One client-to-server command, decoded and validated.

    ``type`` is the canonical wire name; ``event_id`` is the client's own id, echoed on any
    error that answers the command. ``to_realtime`` renders the command back to a wire
    object that ``command_from_realtime`` parses to an equal command.
    """

    type: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    tier: ClassVar[int] = 1

    event_id: str | None = None

    def to_realtime(self, dialect: Dialect = "ga") -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.event_id is not None:
            out["event_id"] = self.event_id
        for f in fields(self):
            if f.name == "event_id":
                continue
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = snapshot(value)
        return out
