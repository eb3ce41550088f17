"""The one rule by which a cancel overtakes media still on its way to a client.

A cancelled response's ``response.done`` drops that response's audio and audio
transcript deltas that still wait in an outbox: the client asked it to stop, and what it
has not yet been sent it never hears. Every outbox between the engine and a client (the
in-process handle's, which holds typed events, and a socket's, which holds rendered wire
dicts in either dialect) asks these two functions, so the rule is written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .response_events import (
    ResponseDone,
    ResponseOutputAudioDelta,
    ResponseOutputAudioTranscriptDelta,
)

_MEDIA_TYPES: Final = frozenset(
    name
    for event in (ResponseOutputAudioDelta, ResponseOutputAudioTranscriptDelta)
    for name in (event.type, event.beta_type)
    if name is not None
)


def _event_field(event: Any, name: str) -> Any:
    return event.get(name) if isinstance(event, Mapping) else getattr(event, name, None)


def media_response_id(event: Any) -> str | None:
    """The response whose media ``event`` carries, or None for anything else."""
    if _event_field(event, "type") not in _MEDIA_TYPES:
        return None
    response_id = _event_field(event, "response_id")
    return response_id if isinstance(response_id, str) else None


def cancelled_response_id(event: Any) -> str | None:
    """The response ``event`` ends cancelled (its ``response.done``), or None."""
    if _event_field(event, "type") != ResponseDone.type:
        return None
    response = _event_field(event, "response")
    if not isinstance(response, Mapping) or response.get("status") != "cancelled":
        return None
    response_id = response.get("id")
    return response_id if isinstance(response_id, str) else None
