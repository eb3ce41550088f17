"""Readers for single client-supplied JSON values, shared by the command, session and item codecs.

Every reader takes the raw value and the ``param`` that names it in an error, returns a typed
value, and raises ``RealtimeProtocolError`` for anything else. ``null`` means "absent"
everywhere: optional readers return ``None`` for it.

Values arrive from JSON but also from in-process callers, so nothing here trusts a type:
``bool`` is an ``int`` subclass, and an ``int`` may be too large to become a ``float``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from .errors import RealtimeProtocolError

# The largest integer every JSON consumer (JavaScript included) reads exactly.
MAX_SAFE_INT: Final = 2**53 - 1
# Client-chosen identifiers (event, item, response, call ids) are short tokens; a longer
# one is refused so that it is never echoed back in an error or stored in history.
MAX_ID_CHARS: Final = 256
# Nesting that JSON values copied into a command may have. orjson parses up to 1024 levels,
# which a recursive copy (and Python's default recursion limit) would not survive.
MAX_JSON_DEPTH: Final = 64
# OpenAI's bounds on a ``metadata`` map: 16 pairs, keys of 64 and values of 512 characters.
MAX_METADATA_PAIRS: Final = 16
MAX_METADATA_KEY_CHARS: Final = 64
MAX_METADATA_VALUE_CHARS: Final = 512
# Error messages quote client values; a quote never grows past this.
MAX_QUOTE_CHARS: Final = 64


def fail(message: str, param: str | None = None, code: str = "bad_event") -> RealtimeProtocolError:
    return RealtimeProtocolError(message, code, param=param)


def quote(value: Any) -> str:
    """A short ``repr`` of a client value for an error message."""
    if isinstance(value, str) and len(value) > MAX_QUOTE_CHARS:
        return repr(value[:MAX_QUOTE_CHARS]) + "..."
    if isinstance(value, Mapping | list | tuple):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= MAX_QUOTE_CHARS else text[:MAX_QUOTE_CHARS] + "..."


def is_number(value: Any) -> bool:
    """A JSON number: an int or a finite float, never a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def one_of(value: Any, options: frozenset[str]) -> bool:
    """Membership that a client value cannot crash: an unhashable value is simply not in."""
    return isinstance(value, str) and value in options


def member(obj: Mapping[str, Any], *path: str) -> Any:
    """The value at a nested key path, or ``None`` when any step is missing or not an object."""
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def optional_str(raw: Any, param: str, *, max_chars: int | None = None) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise fail(f"{param} must be a string", param)
    if max_chars is not None and len(raw) > max_chars:
        raise fail(f"{param} may have at most {max_chars} characters", param)
    return raw


def optional_id(raw: Any, param: str) -> str | None:
    """An optional identifier: a string of at most ``MAX_ID_CHARS``; ``""`` counts as absent."""
    value = optional_str(raw, param, max_chars=MAX_ID_CHARS)
    return value or None


def required_id(raw: Any, param: str, code: str = "bad_event") -> str:
    """A required identifier; missing, empty or not a string fails with ``code``."""
    if not isinstance(raw, str) or not raw:
        raise fail(f"{param} is required and must be a non-empty string", param, code)
    if len(raw) > MAX_ID_CHARS:
        raise fail(f"{param} may have at most {MAX_ID_CHARS} characters", param, code)
    return raw


def optional_bool(raw: Any, param: str) -> bool | None:
    if raw is None or isinstance(raw, bool):
        return raw
    raise fail(f"{param} must be a boolean", param)


def optional_number(
    raw: Any, param: str, *, minimum: float | None = None, maximum: float | None = None
) -> int | float | None:
    """An optional finite number within ``[minimum, maximum]`` (compared without overflow)."""
    if raw is None:
        return None
    if not is_number(raw):
        raise fail(f"{param} must be a finite number", param)
    if minimum is not None and raw < minimum:
        raise fail(f"{param} must be at least {minimum}", param)
    if maximum is not None and raw > maximum:
        raise fail(f"{param} must be at most {maximum}", param)
    return raw


def milliseconds(raw: Any, param: str, code: str = "bad_event") -> int:
    """A non-negative time in ms; fractions are floored (a position is never rounded up)."""
    if not is_number(raw) or raw < 0 or raw > MAX_SAFE_INT:
        raise fail(f"{param} must be a number of milliseconds >= 0", param, code)
    return int(raw)


def non_negative_int(raw: Any, param: str, code: str = "bad_event") -> int:
    """An integer in ``[0, MAX_SAFE_INT]``; an integral float such as ``3.0`` is accepted."""
    if not is_number(raw) or raw < 0 or raw > MAX_SAFE_INT or int(raw) != raw:
        raise fail(f"{param} must be an integer >= 0", param, code)
    return int(raw)


def json_copy(value: Any, param: str) -> Any:
    """A deep copy of a JSON value (dicts with str keys, lists, str, finite floats, 64-bit
    ints, bools, ``None``); tuples become lists. Anything else, or nesting deeper than
    ``MAX_JSON_DEPTH``, fails as ``bad_event``."""
    return _copy(value, param, 0)


def _copy(value: Any, param: str, depth: int) -> Any:
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        # JSON encoders (orjson) stop at 64 bits; a command must stay renderable.
        if -(2**63) <= value < 2**64:
            return value
        raise fail(f"{param} contains an integer beyond 64 bits", param)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise fail(f"{param} contains a non-finite number", param)
    if depth >= MAX_JSON_DEPTH:
        raise fail(f"{param} is nested more than {MAX_JSON_DEPTH} levels deep", param)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise fail(f"{param} has a key that is not a string", param)
            out[key] = _copy(item, param, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_copy(item, param, depth + 1) for item in value]
    raise fail(f"{param} contains a value that is not JSON", param)


def json_object(raw: Any, param: str) -> dict[str, Any] | None:
    """An optional JSON object, deep-copied; ``None`` when absent."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise fail(f"{param} must be an object", param)
    copied: dict[str, Any] = json_copy(raw, param)
    return copied


def check_metadata(raw: Any, param: str) -> None:
    """An optional ``metadata`` map as OpenAI takes it: at most 16 string keys of up to 64
    characters, each with a string value of up to 512."""
    if raw is None:
        return
    if not isinstance(raw, Mapping):
        raise fail(f"{param} must be an object of strings", param)
    if len(raw) > MAX_METADATA_PAIRS:
        raise fail(f"{param} may have at most {MAX_METADATA_PAIRS} pairs", param)
    for key, value in raw.items():
        if not isinstance(key, str) or len(key) > MAX_METADATA_KEY_CHARS:
            raise fail(f"{param} keys must be strings of at most {MAX_METADATA_KEY_CHARS}", param)
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_CHARS:
            raise fail(
                f"{param}.{key} must be a string of at most {MAX_METADATA_VALUE_CHARS} characters",
                f"{param}.{key}",
            )
