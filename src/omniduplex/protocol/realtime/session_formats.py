"""Audio formats and rates in a session object, in beta and GA spelling.

Beta: flat ``input_audio_format`` / ``output_audio_format`` (or our ``response_format``)
strings. GA: ``audio.input.format`` / ``audio.output.format`` objects that may carry a
``rate``. The flat field wins where both are given (wire.md 5.4); when it names the same
format as the GA object, the object's rate still counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .capabilities import PERMISSIVE_CAPABILITIES, RealtimeProtocolCapabilities
from .errors import RealtimeProtocolError
from .formats import (
    MAX_SAMPLE_RATE_HZ,
    MIN_SAMPLE_RATE_HZ,
    AudioFormat,
    parse_input_format,
    parse_output_format,
    validate_sample_rate,
)
from .wire_values import MAX_QUOTE_CHARS, fail, member, quote

__all__ = [
    "first_present",
    "parse_format",
    "read_input_format",
    "read_input_rate",
    "read_output_format",
    "read_output_rate",
]


def first_present(
    session: Mapping[str, Any], flat: tuple[str, ...], nested: tuple[str, ...]
) -> tuple[Any, str]:
    for key in flat:
        value = session.get(key)
        if value is not None:
            return value, key
    if not nested:
        return None, flat[0]
    return member(session, *nested), ".".join(nested)


def _rate(raw: Any, param: str) -> int:
    # ``validate_sample_rate`` converts to float: an int beyond float range must fail here.
    is_int = isinstance(raw, int) and not isinstance(raw, bool)
    if is_int and not MIN_SAMPLE_RATE_HZ <= raw <= MAX_SAMPLE_RATE_HZ:
        raise fail(f"{param} must be between {MIN_SAMPLE_RATE_HZ} and {MAX_SAMPLE_RATE_HZ}", param)
    return validate_sample_rate(raw, param=param)


def parse_format(
    raw: Any, param: str, *, output: bool, allowed: frozenset[str] | None = None
) -> AudioFormat:
    """Parse one format spelling for input or output, limited to ``allowed`` names.

    Wraps ``formats`` so that a hostile value can neither overflow a rate check nor put
    megabytes into the error message.
    """
    kind = "output_audio_format" if output else "input_audio_format"
    unsupported = f"Unsupported {kind}: {quote(raw)}"
    if isinstance(raw, str) and len(raw) > MAX_QUOTE_CHARS:
        raise fail(unsupported, param, "unsupported_audio_format")
    if isinstance(raw, Mapping):
        for key in ("rate", "sample_rate_hz", "sample_rate"):
            if raw.get(key) is not None:
                _rate(raw[key], f"{param}.{key}")
                break
        spelled = raw.get("type", raw.get("format"))
        unsupported = f"Unsupported {kind}: {quote(spelled)}"
        if isinstance(spelled, str) and len(spelled) > MAX_QUOTE_CHARS:
            raise fail(unsupported, param, "unsupported_audio_format")
    parser = parse_output_format if output else parse_input_format
    try:
        fmt = parser(raw, param=param)
    except RealtimeProtocolError as exc:
        if exc.code == "unsupported_audio_format":
            raise fail(unsupported, param, exc.code) from None
        raise
    if allowed is not None and fmt.name not in allowed:
        raise fail(unsupported, param, "unsupported_audio_format")
    return fmt


def _read_format(
    session: Mapping[str, Any],
    flat: tuple[str, ...],
    nested: tuple[str, ...],
    *,
    output: bool,
    allowed: frozenset[str],
) -> AudioFormat | None:
    raw, param = first_present(session, flat, nested)
    if raw is None:
        return None
    fmt = parse_format(raw, param, output=output, allowed=allowed)
    if fmt.rate is None and param in flat:
        # Both spellings, as in our own session object: the flat name carries no rate, so
        # a GA object naming the same format supplies it.
        try:
            twin = parse_format(member(session, *nested), param, output=output)
        except RealtimeProtocolError:
            return fmt
        if twin.name == fmt.name and twin.rate is not None:
            return twin
    return fmt


def read_input_format(
    session: Mapping[str, Any], capabilities: RealtimeProtocolCapabilities | None = None
) -> AudioFormat | None:
    """``input_audio_format``, else ``audio.input.format``; rate only if the object states one."""
    caps = capabilities or PERMISSIVE_CAPABILITIES
    return _read_format(
        session,
        ("input_audio_format",),
        ("audio", "input", "format"),
        output=False,
        allowed=caps.input_audio_formats,
    )


def read_output_format(
    session: Mapping[str, Any], capabilities: RealtimeProtocolCapabilities | None = None
) -> AudioFormat | None:
    """``output_audio_format`` or ``response_format``, else ``audio.output.format``."""
    caps = capabilities or PERMISSIVE_CAPABILITIES
    return _read_format(
        session,
        ("output_audio_format", "response_format"),
        ("audio", "output", "format"),
        output=True,
        allowed=caps.output_audio_formats,
    )


def read_input_rate(session: Mapping[str, Any]) -> int | None:
    """An input rate stated beside the format: top level, else under ``audio.input``."""
    for path in (
        ("sample_rate_hz",),
        ("sample_rate",),
        ("audio", "input", "sample_rate_hz"),
        ("audio", "input", "sample_rate"),
    ):
        raw = member(session, *path)
        if raw is not None:
            return _rate(raw, ".".join(path))
    return None


def read_output_rate(session: Mapping[str, Any]) -> int | None:
    """An output rate stated beside the format, under ``audio.output``."""
    for key in ("sample_rate_hz", "sample_rate"):
        raw = member(session, "audio", "output", key)
        if raw is not None:
            return _rate(raw, f"audio.output.{key}")
    return None
