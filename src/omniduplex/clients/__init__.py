"""Duplex clients: one API (``DuplexClientBase``) over every transport.

* ``InlineDuplexClient``: a ``DuplexOmni`` in this process (the engine runtime is
  imported only when a client is opened);
* ``ResponseHandle``: one response's audio, transcript, decision and status;
* ``EventCollector``: timing records and latency summaries for tests and benchmarks;
* ``presets``: the session objects our own clients open sessions with;
* typed errors: ``DuplexClientError`` and its subclasses.

This package depends only on ``omniduplex.protocol`` (and, for the network client,
``websockets``); server code never imports it.
"""

from .base import DuplexClientBase, EventSubscription, ResponseHandle, ResponseSubscription
from .collector import EventCollector
from .events import (
    DuplexClientError,
    DuplexConnectionError,
    DuplexEventOverflowError,
    DuplexProtocolError,
    DuplexSessionClosedError,
    UnparsedEvent,
    decode_output_audio,
    parse_server_event,
    response_id_of,
)
from .inline_duplex import InlineDuplexClient
from .presets import duplex_session, loopback_session

__all__ = [
    "DuplexClientBase",
    "DuplexClientError",
    "DuplexConnectionError",
    "DuplexEventOverflowError",
    "DuplexProtocolError",
    "DuplexSessionClosedError",
    "EventCollector",
    "EventSubscription",
    "InlineDuplexClient",
    "ResponseHandle",
    "ResponseSubscription",
    "UnparsedEvent",
    "decode_output_audio",
    "duplex_session",
    "loopback_session",
    "parse_server_event",
    "response_id_of",
]
