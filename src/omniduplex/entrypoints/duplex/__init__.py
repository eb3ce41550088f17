"""The duplex WebSocket transport: sans-I/O building blocks, and the route that pumps them.

* ``realtime_protocol``: one socket's whole rules (``RealtimeProtocol``): frames in,
  requests for the engine and frames out; it composes the two below and the journal;
* ``realtime_input``: one connection's envelope (dialect, handshake rules, frame decoding,
  error frames);
* ``outbound``: what one socket still owes its client, bounded, numbered as it leaves;
* ``journal``: the per-session replay journal that numbers every event
  (``server_event_seq``);
* ``session_attachment``: which socket serves which session, resume credentials, takeover;
* ``connection`` and ``serving``: the asyncio side, which only moves frames between the
  socket, the protocol and the engine.

How the route answers what these raise: ``JournalGap`` -> ``session.resync_required``
(``reason`` ``journal_gap``); any other ``DuplexTransportError`` or ``DuplexCommandError``
-> an ``error`` whose ``code`` is the exception's (``RealtimeProtocol.error_for``).
"""

from .journal import (
    DuplexTransportError,
    InvalidEventAck,
    JournalAhead,
    JournalGap,
    ReplayJournal,
)
from .realtime_input import FirstMessage, RealtimeEnvelope, encode_frame
from .realtime_protocol import ClientCommand, OpenRequest, RealtimeProtocol, ResumeRequest
from .session_attachment import (
    DuplexSessionAttachmentRegistry,
    InvalidResumeToken,
    ResumeError,
    ResumeGrant,
    SessionAlreadyRegistered,
    SessionAttachment,
    SessionResumeConflict,
    SessionResumeExpired,
    UnsupportedSessionResume,
)

__all__ = [
    "ClientCommand",
    "DuplexSessionAttachmentRegistry",
    "DuplexTransportError",
    "FirstMessage",
    "InvalidEventAck",
    "InvalidResumeToken",
    "JournalAhead",
    "JournalGap",
    "OpenRequest",
    "RealtimeEnvelope",
    "RealtimeProtocol",
    "ReplayJournal",
    "ResumeError",
    "ResumeGrant",
    "ResumeRequest",
    "SessionAlreadyRegistered",
    "SessionAttachment",
    "SessionResumeConflict",
    "SessionResumeExpired",
    "UnsupportedSessionResume",
    "encode_frame",
]
