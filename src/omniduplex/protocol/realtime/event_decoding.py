"""Parsing rendered server events back into typed events.

A client, a replay journal or a test holds events as rendered JSON; this turns such an
object back into the event that renders it. Field values are checked against the
class's annotations, so a malformed object is refused with ``bad_event`` instead of
producing an event that renders garbage. Unknown keys (``server_event_seq`` ...) are
ignored. Nothing but ``RealtimeProtocolError`` ever escapes.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, fields
from types import MappingProxyType
from typing import Any, Union

from .base import RealtimeEvent
from .errors import RealtimeProtocolError

EventClass = type[RealtimeEvent]


def event_type_registry(classes: Iterable[EventClass]) -> Mapping[str, EventClass]:
    """Map every GA and beta ``type`` of ``classes`` to its class (read-only)."""
    registry: dict[str, EventClass] = {}
    for cls in classes:
        for wire_type in {cls.type, cls.beta_type} - {None, ""}:
            assert wire_type is not None
            if registry.setdefault(wire_type, cls) is not cls:
                raise ValueError(f"two event classes claim {wire_type!r}")
    return MappingProxyType(registry)


def decode_event(
    obj: Any,
    registry: Mapping[str, EventClass],
    fallback: Callable[[str], EventClass | None] | None = None,
    *,
    refine: Callable[[EventClass, Mapping[str, Any]], EventClass] | None = None,
) -> RealtimeEvent:
    """The typed event ``obj`` renders; ``unknown_event`` / ``bad_event`` otherwise.

    ``fallback`` names a class for a type the registry lacks; ``refine`` may pick another
    class (a Tier 1 twin) after looking at the object.
    """
    if not isinstance(obj, Mapping):
        raise RealtimeProtocolError("a server event must be a JSON object", "bad_event")
    wire_type = obj.get("type")
    if not isinstance(wire_type, str):
        raise RealtimeProtocolError("a server event needs a string type", "bad_event", param="type")
    cls = registry.get(wire_type)
    if cls is None and fallback is not None:
        cls = fallback(wire_type)
    if cls is None:
        raise RealtimeProtocolError(f"Unknown server event type: {wire_type}", "unknown_event")
    if refine is not None:
        cls = refine(cls, obj)
    try:
        # Classes that keep the generic field walk get the generic check; a class with its
        # own wire shape overrides ``from_wire_fields`` and checks what it reads.
        if getattr(cls.from_wire_fields, "__func__", None) is _BASE_FROM_WIRE_FIELDS:
            check_wire_fields(cls, obj)
        return cls.from_wire_fields(obj)
    except RealtimeProtocolError:
        raise
    except Exception as exc:  # a constructor's own check; the caller sees one error type
        raise RealtimeProtocolError(f"malformed {wire_type} event: {exc}", "bad_event") from exc


_BASE_FROM_WIRE_FIELDS = RealtimeEvent.from_wire_fields.__func__  # type: ignore[attr-defined]


def wire_field_specs(cls: EventClass) -> dict[str, tuple[Any, bool]]:
    """The fields the generic renderer shows: name -> (type hint, required)."""
    cached = _SPECS.get(cls)
    if cached is None:
        hints = typing.get_type_hints(cls)
        shown = {f.name: f for f in fields(cls) if f.name not in ("session_id", "epoch")}
        shown.update({f.name: f for f in fields(cls) if f.name in cls.rendered_identity})
        cached = {name: (hints[name], _required(f)) for name, f in shown.items()}
        _SPECS[cls] = cached
    return cached


_SPECS: dict[EventClass, dict[str, tuple[Any, bool]]] = {}


def _required(f: Field[Any]) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def check_wire_fields(cls: EventClass, obj: Mapping[str, Any]) -> None:
    """Refuse ``obj`` when a field is missing or has the wrong JSON type."""
    for name, (hint, required) in wire_field_specs(cls).items():
        if name not in obj:
            if required:
                raise RealtimeProtocolError(
                    f"{cls.type} event lacks {name}", "bad_event", param=name
                )
            continue
        if not conforms(obj[name], hint):
            raise RealtimeProtocolError(
                f"{cls.type}.{name} has the wrong type", "bad_event", param=name
            )


def expect(
    obj: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    *,
    required: bool = True,
    param: str | None = None,
) -> Any:
    """``obj[key]`` if it is a ``kind``; ``None`` if absent or null and not required."""
    value = obj.get(key)
    if value is None:
        if required:
            raise RealtimeProtocolError(f"missing {key}", "bad_event", param=param or key)
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise RealtimeProtocolError(f"{key} has the wrong type", "bad_event", param=param or key)
    return value


def conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field annotation (str, int, X | None, dict, list, Any)."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return any(conforms(value, arg) for arg in typing.get_args(hint))
    if hint is dict or origin is dict:
        return isinstance(value, Mapping)
    if hint is list or origin is list:
        args = typing.get_args(hint)
        return isinstance(value, list | tuple) and all(conforms(v, args[0]) for v in value if args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True
