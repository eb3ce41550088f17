"""The session object every preset starts from, and how overrides merge into it.

A session object is a plain dict (the session object of ``session.update`` /
``open_session``), so it works with every client. Overrides are merged recursively into
its nested objects (``extra_body``, ``audio``); a ``None`` override value replaces, it
does not delete.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["INPUT_RATE_HZ", "OUTPUT_RATE_HZ", "duplex_session", "merge_overrides"]

#: The rate our presets stream microphone audio at.
INPUT_RATE_HZ: Final = 16_000
#: The rate our presets ask audio back at (OpenAI's PCM rate).
OUTPUT_RATE_HZ: Final = 24_000


def merge_overrides(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in, in place: into nested dicts key by key, any
    other value deep-copied over what was there."""
    for key, value in overrides.items():
        current = base.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            base[key] = merge_overrides(current, value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def duplex_session(
    *,
    input_rate_hz: int = INPUT_RATE_HZ,
    output_rate_hz: int = OUTPUT_RATE_HZ,
    **overrides: Any,
) -> dict[str, Any]:
    """A session for a duplex client that commits its own turns and reports playback.

    * ``audio.input.format``: PCM16 at ``input_rate_hz`` (appends also state their
      format and rate, so nothing depends on the server echoing it);
    * ``audio.output.format``: PCM16 at ``output_rate_hz``;
    * ``turn_detection: null``: the client commits;
    * ``extra_body.auto_response: true``: a commit is answered without a separate
      ``response.create`` (DESIGN decision 16);
    * ``playback_commit_policy: "ack_only"``: history keeps what the client says it
      played (``playback.ack``), so a barge-in leaves only the heard part.
    """
    session: dict[str, Any] = {
        "output_modalities": ["audio"],
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": input_rate_hz},
                "turn_detection": None,
            },
            "output": {"format": {"type": "audio/pcm", "rate": output_rate_hz}},
        },
        "playback_commit_policy": "ack_only",
        "extra_body": {"auto_response": True},
    }
    return merge_overrides(session, overrides)
