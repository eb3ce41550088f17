"""Session objects our own clients open sessions with, one per model.

A preset is a plain dict built on ``session_base.duplex_session``, so it works with every
client; its keywords are overrides, merged as ``session_base.merge_overrides`` says.
"""

from __future__ import annotations

from typing import Any

from .minicpmo_4_5 import create_duplex_session_config
from .session_base import duplex_session

__all__ = ["loopback_session", "minicpmo_4_5_session"]


def loopback_session(**overrides: Any) -> dict[str, Any]:
    """The session our clients, tests and examples open on the ``loopback`` model."""
    return duplex_session(**overrides)


def minicpmo_4_5_session(**overrides: Any) -> dict[str, Any]:
    """The session our clients open on the ``minicpmo-4.5`` model: see
    ``omniduplex.clients.minicpmo_4_5.create_duplex_session_config`` (its keywords)."""
    return create_duplex_session_config(**overrides)
