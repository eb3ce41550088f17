"""Applying a ``session.update`` field by field: what cannot be honoured is left out.

A stock client sends one ``session.update`` with everything it wants (instructions, voice,
tools, turn detection, ...). If one field is something we cannot do, dropping the whole
update would lose the rest: the agent would run without its instructions. So a field that
is refused is taken out of the patch, reported on its own (an ``error`` naming its
``param``), and the remainder is tried again, until the remainder is accepted.

The mechanism is generic: whatever check refuses a field (the codec's session validation,
the engine's settings, a plugin's ``validate_session_config``) raises an error with a
``param``, and ``apply_partially`` removes the part of the patch that param names. An error
without a ``param``, or one naming nothing in the patch, still refuses the whole update.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from .errors import RealtimeProtocolError

T = TypeVar("T")

# Where the other dialect spells the same setting: a param names the reader's preferred
# spelling, the client may have used the other one.
_TWINS: Final[Mapping[str, tuple[str, ...]]] = {
    "turn_detection": ("audio", "input", "turn_detection"),
    "input_audio_format": ("audio", "input", "format"),
    "output_audio_format": ("audio", "output", "format"),
    "voice": ("audio", "output", "voice"),
    "speed": ("audio", "output", "speed"),
    "modalities": ("output_modalities",),
    "output_modalities": ("modalities",),
    "max_output_tokens": ("max_response_output_tokens",),
    "max_response_output_tokens": ("max_output_tokens",),
    "input_audio_transcription": ("audio", "input", "transcription"),
    "overlap_policy": ("extra_body", "overlap_policy"),
}
# Keys that say what the object is rather than what to change.
_NOT_SETTINGS: Final = frozenset({"type", "object"})


@dataclass(frozen=True, slots=True)
class FieldRejection:
    """One field of an update that was not applied, as the client is told about it."""

    code: str
    message: str
    param: str

    @classmethod
    def of(cls, exc: Exception, param: str) -> FieldRejection:
        code = getattr(exc, "code", None) or "invalid_session_config"
        message = getattr(exc, "message", None) or str(exc)
        return cls(code=str(code), message=str(message), param=param)


@dataclass(frozen=True, slots=True)
class PartialUpdate(Generic[T]):
    """The outcome of ``apply_partially``.

    ``applied``: a remainder was accepted, and ``value`` is what it produced (``False``
    when every setting was refused; ``value`` is then ``None``); ``patch``: that remainder;
    ``rejected``: the fields left out, in order.
    """

    applied: bool
    value: T | None
    patch: dict[str, Any]
    rejected: tuple[FieldRejection, ...] = ()


def has_settings(patch: Mapping[str, Any]) -> bool:
    """Whether anything in ``patch`` would change a setting."""
    return any(key not in _NOT_SETTINGS for key in patch)


def _path(param: str) -> tuple[str, ...]:
    # ``tools[1].name`` names the ``tools`` field like ``tools.1.name`` does.
    return tuple(part for part in re.split(r"[.\[\]]", param) if part)


def _locate(patch: Mapping[str, Any], path: tuple[str, ...]) -> tuple[str, ...] | None:
    """The longest prefix of ``path`` present in ``patch`` (``None``: not even the first)."""
    node: Any = patch
    found: list[str] = []
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            break
        found.append(key)
        node = node[key]
    return tuple(found) or None


def _unit(path: tuple[str, ...]) -> tuple[str, ...]:
    """The part of the patch a param's refusal takes out: a whole setting (a format object
    loses its meaning without its rate), except in turn detection and ``extra_body``,
    whose keys are independent settings of their own."""
    if path[0] == "audio" and len(path) >= 3:
        return _turn_detection_key(path, 3) if path[2] == "turn_detection" else path[:3]
    if path[0] == "turn_detection":
        return _turn_detection_key(path, 1)
    if path[0] == "extra_body":
        return path[:2]
    return path[:1]


def _turn_detection_key(path: tuple[str, ...], depth: int) -> tuple[str, ...]:
    # A turn detection without its type has no meaning: refusing the type refuses the object.
    if path[depth : depth + 1] == ("type",):
        return path[:depth]
    return path[: depth + 1]


def _field_of(patch: Mapping[str, Any], param: str) -> tuple[str, ...] | None:
    path = _path(param)
    if not path or path[0] in _NOT_SETTINGS:
        # No field, or the object's kind itself: the update is refused whole.
        return None
    path = _unit(path)
    candidates = [path]
    twin = _TWINS.get(path[0])
    if twin is not None:
        candidates.append(twin + path[1:])
    for candidate in candidates:
        found = _locate(patch, candidate)
        if found is not None:
            return found
    return None


def without(patch: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """A copy of ``patch`` without the value at ``path``; containers left empty go too."""
    out = copy.deepcopy(dict(patch))
    parents: list[tuple[dict[str, Any], str]] = []
    node: Any = out
    for key in path[:-1]:
        parents.append((node, key))
        node = node[key]
    del node[path[-1]]
    for parent, key in reversed(parents):
        if parent[key]:
            break
        del parent[key]
    return out


def apply_partially(
    patch: Mapping[str, Any],
    attempt: Callable[[dict[str, Any]], T],
    *,
    errors: tuple[type[Exception], ...] = (RealtimeProtocolError,),
) -> PartialUpdate[T]:
    """``attempt(patch)``, leaving out each field it refuses until the rest is accepted.

    ``attempt`` raises one of ``errors`` with a ``param`` for a field it cannot honour.
    An error whose param names nothing in the remaining patch is re-raised (the whole
    update is refused, as before this mechanism). When every setting was refused,
    ``applied`` is false and ``attempt`` is not called on the empty remainder.
    """
    remaining = copy.deepcopy(dict(patch))
    rejected: list[FieldRejection] = []
    while True:
        if rejected and not has_settings(remaining):
            return PartialUpdate(False, None, remaining, tuple(rejected))
        try:
            value = attempt(remaining)
        except errors as exc:
            param = getattr(exc, "param", None)
            located = _field_of(remaining, param) if isinstance(param, str) else None
            if located is None:
                raise
            rejected.append(FieldRejection.of(exc, param or ".".join(located)))
            remaining = without(remaining, located)
            continue
        return PartialUpdate(True, value, remaining, tuple(rejected))
