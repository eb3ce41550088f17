"""The duplex WebSocket transport's sans-I/O building blocks.

* ``realtime_input``: one connection's envelope (dialect, handshake rules, frame decoding,
  error frames);
* ``journal``: the per-session replay journal that numbers every event
  (``server_event_seq``);
* ``session_attachment``: which socket serves which session, resume credentials, takeover.

How the route answers what these raise: ``JournalGap`` -> ``session.resync_required``
(``reason`` ``journal_gap``); any other ``DuplexTransportError`` or ``DuplexCommandError``
-> an ``error`` whose ``code`` is the exception's (``RealtimeEnvelope.error_frame_for``).
"""

from .journal import (
    DuplexTransportError,
    InvalidEventAck,
    JournalAhead,
    JournalGap,
    ReplayJournal,
)
from .realtime_input import FirstMessage, RealtimeEnvelope, encode_frame
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
    "DuplexSessionAttachmentRegistry",
    "DuplexTransportError",
    "FirstMessage",
    "InvalidEventAck",
    "InvalidResumeToken",
    "JournalAhead",
    "JournalGap",
    "RealtimeEnvelope",
    "ReplayJournal",
    "ResumeError",
    "ResumeGrant",
    "SessionAlreadyRegistered",
    "SessionAttachment",
    "SessionResumeConflict",
    "SessionResumeExpired",
    "UnsupportedSessionResume",
    "encode_frame",
]
