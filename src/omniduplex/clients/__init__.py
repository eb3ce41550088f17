"""Duplex clients: one API (``DuplexClientBase``) over every transport.

* ``InlineDuplexClient``: a ``DuplexOmni`` in this process (the engine runtime is
  imported only when a client is opened);
* ``DuplexClient``: a session over the Realtime WebSocket, with automatic resume
  (``ReconnectPolicy``, ``ConnectionResumed``), heartbeats and journal acks;
* ``ResponseHandle``: one response's audio, transcript, decision and status;
* ``EventCollector``: timing records and latency summaries for tests and benchmarks;
* ``presets``: the session objects our own clients open sessions with, built on
  ``session_base.duplex_session``;
* typed errors: ``DuplexClientError`` and its subclasses.

This package depends only on ``omniduplex.protocol`` (and, for the network client,
``websockets``); server code never imports it.
"""

from .base import DuplexClientBase, EventSubscription, ResponseHandle, ResponseSubscription
from .collector import EventCollector
from .duplex import ConnectionResumed, DuplexClient, DuplexResumeError, DuplexResyncRequiredError
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
from .presets import loopback_session
from .reconnect import ReconnectPolicy
from .session_base import duplex_session

__all__ = [
    "ConnectionResumed",
    "DuplexClient",
    "DuplexClientBase",
    "DuplexClientError",
    "DuplexConnectionError",
    "DuplexEventOverflowError",
    "DuplexProtocolError",
    "DuplexResumeError",
    "DuplexResyncRequiredError",
    "DuplexSessionClosedError",
    "EventCollector",
    "EventSubscription",
    "InlineDuplexClient",
    "ReconnectPolicy",
    "ResponseHandle",
    "ResponseSubscription",
    "UnparsedEvent",
    "decode_output_audio",
    "duplex_session",
    "loopback_session",
    "parse_server_event",
    "response_id_of",
]
