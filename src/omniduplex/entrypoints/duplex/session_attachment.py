"""Which socket serves which session, resume credentials and replay (sans-I/O).

One record per session the serving layer has open (the session itself lives in the
engine), holding everything serving keeps for it:

* the session's engine handle, and the protocol of the connection that opened or last
  resumed it (it renders and numbers the session's events, into the journal alone once
  that connection is gone); whether the session ``ended`` and why (``terminal_reason``,
  for the close frame every client gets);
* the resume credential (decision 15): ``secrets.token_urlsafe(32)``, kept only as its
  SHA-256 digest and compared with ``hmac.compare_digest``; rotated on every resume;
* ``attachment_generation``: 1 at open, +1 per successful resume;
* the ``ReplayJournal`` that numbers every event of the session's stream (decision 2);
* the current socket: an opaque object compared by identity, ``None`` while detached;
* ``lease_generation``: the engine lease the current socket serves, for the route's fenced
  ``detach_session(..., expected_lease_generation=...)`` (serving.md 3.5).

Resume is two steps so that nothing changes until the engine agreed:

1. ``authenticate_resume`` checks everything and changes nothing. It returns a
   ``ResumeGrant`` proposal (a fresh token, the next generation, a replay preview).
2. After the engine lease CAS succeeded, ``activate(grant, socket, lease_generation=...)``
   commits in one synchronous step: re-checks the grant, rebuilds the replay from the
   journal as it is now, rotates the token, bumps the generation and swaps the socket.
   It returns the final grant; the caller sends ``session.resumed`` (new token and
   generation), then ``grant.replay``, then live events, and ``session.replaced`` +
   close to ``grant.previous_socket`` if there was one. Put the resumed event and the
   replay on the new socket's outbound path before yielding to the loop, so no live event
   overtakes them.

Credential rotation and failed activations. The token presented to a resume stays valid
until the client has shown it holds the new one: ``activate`` issues the new token as
*pending*; ``confirm_resume`` (the route calls it once ``session.resumed`` was handed to
the socket) or a later resume presenting the pending token makes it the only valid one.
So a resume that fails anywhere (engine CAS, a lost race, a socket that dies before
``session.resumed`` got out) never locks the client out: its previous token still works,
with no one-shot recovery rule. A failed step before ``activate`` changes nothing at all.

All methods are synchronous and the registry is confined to one event loop; there is no
lock because no method awaits.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from .journal import (
    DEFAULT_REPLAY_MAX_BYTES,
    DEFAULT_REPLAY_TTL_S,
    Clock,
    DuplexTransportError,
    InvalidEventAck,
    JournalAhead,
    JournalGap,
    ReplayJournal,
)

# ---- errors (each names the wire code the route answers with) ---------------------------


class ResumeError(DuplexTransportError):
    """A refused ``session.resume``."""

    code: ClassVar[str] = "invalid_session_resume"


class SessionResumeExpired(ResumeError):
    code: ClassVar[str] = "session_resume_expired"


class UnsupportedSessionResume(ResumeError):
    code: ClassVar[str] = "unsupported_session_resume"


class InvalidResumeToken(ResumeError):
    code: ClassVar[str] = "invalid_resume_token"


class SessionResumeConflict(ResumeError):
    code: ClassVar[str] = "session_resume_conflict"


class SessionAlreadyRegistered(DuplexTransportError):
    code: ClassVar[str] = "session_exists"


# ---- credentials ------------------------------------------------------------------------


def new_resume_token() -> str:
    """32 random bytes, URL-safe base64 without padding (43 characters)."""
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> bytes:
    """What the registry stores instead of the token: its SHA-256 digest."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


_RESUMED_ELSEWHERE = "session {} was resumed by another connection first"


def _matches(digest: bytes | None, presented: bytes) -> bool:
    # Always run the comparison, even against a missing digest, so timing says nothing.
    return hmac.compare_digest(digest or b"\x00" * len(presented), presented) and bool(digest)


def _refuse_a_raced_resume(record: SessionAttachment, presented: bytes) -> None:
    """A resume with the token the last resume presented, while that resume is attached and
    its client has yet to show it got the new token, lost a race to it: the old token
    stays valid only for the client whose resumed socket died before the new one got
    out."""
    if (
        record.socket is not None
        and record.pending_digest is not None
        and _matches(record.superseded_digest, presented)
    ):
        raise SessionResumeConflict(_RESUMED_ELSEWHERE.format(record.session_id))


def _accepts(record: SessionAttachment, presented: bytes) -> bool:
    # Both comparisons always run (``|``, not ``or``).
    return _matches(record.token_digest, presented) | _matches(record.pending_digest, presented)


# ---- records ----------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class SessionAttachment:
    """The serving layer's record of one session. No plaintext token lives here."""

    session_id: str
    resumable: bool
    journal: ReplayJournal = field(repr=False)
    handle: Any = field(default=None, repr=False)
    protocol: Any = field(default=None, repr=False)
    ended: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    terminal_reason: str = "session_closed"
    attachment_generation: int = 1
    lease_generation: int = 0
    socket: Any = field(default=None, repr=False)
    # The confirmed credential, and one issued by a resume the client has not yet shown
    # it holds (see the module docstring). Both are SHA-256 digests.
    token_digest: bytes | None = field(default=None, repr=False)
    pending_digest: bytes | None = field(default=None, repr=False)
    # The token the last resume presented: a second connection presenting it lost a race
    # to that resume (``session_resume_conflict``), it did not guess a token.
    superseded_digest: bytes | None = field(default=None, repr=False)

    @property
    def attached(self) -> bool:
        return self.socket is not None


@dataclass(frozen=True, slots=True)
class ResumeGrant:
    """A resume proposal (from ``authenticate_resume``) or its result (from ``activate``).

    ``new_token``: the rotated credential for ``session.resumed``. ``generation``: the new
    socket's ``attachment_generation``. ``replay``: the journaled bytes after
    ``last_seq``, in order. ``previous_socket`` / ``previous_generation``: the attachment
    being superseded (send it ``session.replaced`` with ``previous_generation``).
    """

    session_id: str
    new_token: str = field(repr=False)
    generation: int
    replay: list[bytes] = field(repr=False)
    previous_socket: Any = field(repr=False)
    previous_generation: int
    last_seq: int
    lease_generation: int
    # The digest the client proved it holds; ``activate`` re-checks it.
    presented_digest: bytes = field(repr=False, compare=False)


# ---- the registry -----------------------------------------------------------------------


class DuplexSessionAttachmentRegistry:
    """Attachment, credential and journal bookkeeping for every open session."""

    def __init__(
        self,
        replay_ttl_s: float = DEFAULT_REPLAY_TTL_S,
        replay_max_bytes_per_session: int = DEFAULT_REPLAY_MAX_BYTES,
        clock: Clock | None = None,
    ) -> None:
        if not replay_ttl_s > 0:
            raise ValueError("replay_ttl_s must be positive")
        if not isinstance(replay_max_bytes_per_session, int) or replay_max_bytes_per_session <= 0:
            raise ValueError("replay_max_bytes_per_session must be a positive int")
        self.replay_ttl_s = float(replay_ttl_s)
        self.replay_max_bytes_per_session = replay_max_bytes_per_session
        self._clock: Clock = clock or time.monotonic
        self._sessions: dict[str, SessionAttachment] = {}

    # ---- lifecycle ------------------------------------------------------------------

    def register(
        self,
        session_id: str,
        *,
        resumable: bool,
        socket: Any = None,
        lease_generation: int = 0,
        handle: Any = None,
        protocol: Any = None,
    ) -> tuple[str | None, int]:
        """Start bookkeeping for a newly opened session: ``(resume_token | None, 1)``.

        A resumable session gets a token (for ``session.created``) and a journal of
        ``replay_max_bytes_per_session``; a non-resumable one gets no token and a journal
        that numbers events without keeping them.
        """
        if session_id in self._sessions:
            raise SessionAlreadyRegistered(f"session {session_id} is already registered")
        token = new_resume_token() if resumable else None
        journal = ReplayJournal(
            self.replay_max_bytes_per_session if resumable else 0, self.replay_ttl_s, self._clock
        )
        record = SessionAttachment(
            session_id=session_id,
            resumable=resumable,
            journal=journal,
            lease_generation=lease_generation,
            socket=socket,
            token_digest=token_digest(token) if token is not None else None,
            handle=handle,
            protocol=protocol,
        )
        self._sessions[session_id] = record
        return token, record.attachment_generation

    def forget(self, session_id: str) -> Any:
        """The session ended: drop its record and empty its journal. Returns the socket it
        had."""
        record = self._sessions.pop(session_id, None)
        if record is None:
            return None
        # Emptied now, not when the journal object goes: the socket objects that still
        # point at it form reference cycles, which only a full garbage collection frees,
        # so its megabytes of events would outlive the session (issue 17, defect 4).
        record.journal.ack(record.journal.head)
        return record.socket

    # ---- sockets --------------------------------------------------------------------

    def attach(self, session_id: str, socket: Any) -> Any:
        """Make ``socket`` the session's socket; returns the one it replaces, or ``None``.

        The caller sends ``session.replaced`` to a returned previous socket and closes it.
        Resumes go through ``activate``, which also rotates the credential.
        """
        record = self._record(session_id)
        previous = record.socket
        record.socket = socket
        return None if previous is socket else previous

    def detach(self, session_id: str, socket: Any) -> bool:
        """``socket`` went away. False (and nothing changes) unless it is the current one,
        so a superseded socket's late disconnect can never detach the socket that
        replaced it, and a second report of the same disconnect is a no-op. After a True,
        ``lease_generation(session_id)`` is the lease to detach fenced in the engine (read
        it before the next await)."""
        record = self._sessions.get(session_id)
        if record is None or record.socket is None or record.socket is not socket:
            return False
        record.socket = None
        return True

    def is_current(self, session_id: str, socket: Any) -> bool:
        record = self._sessions.get(session_id)
        return record is not None and record.socket is not None and record.socket is socket

    def socket_of(self, session_id: str) -> Any:
        """The socket serving the session now, or ``None`` (detached or unknown)."""
        record = self._sessions.get(session_id)
        return None if record is None else record.socket

    # ---- resume ---------------------------------------------------------------------

    def authenticate_resume(self, session_id: str, token: Any, last_seq: Any) -> ResumeGrant:
        """Check a ``session.resume`` without changing anything; a proposal to ``activate``.

        Raises, in this order: ``SessionResumeExpired`` (unknown or forgotten session),
        ``UnsupportedSessionResume`` (the session is not resumable),
        ``InvalidResumeToken``, ``JournalAhead`` (code ``session_resume_conflict``: seq
        beyond the last event sent), ``JournalGap`` (answer ``session.resync_required``).
        """
        record = self._sessions.get(session_id)
        if record is None:
            raise SessionResumeExpired(f"Unknown or expired duplex session: {session_id}")
        if not record.resumable:
            raise UnsupportedSessionResume(f"Session does not support resume: {session_id}")
        presented = self._verify(record, token)
        _refuse_a_raced_resume(record, presented)
        replay = record.journal.replay_after(last_seq)
        return ResumeGrant(
            session_id=session_id,
            new_token=new_resume_token(),
            generation=record.attachment_generation + 1,
            replay=replay,
            previous_socket=record.socket,
            previous_generation=record.attachment_generation,
            last_seq=last_seq,
            lease_generation=record.lease_generation,
            presented_digest=presented,
        )

    def activate(
        self, grant: ResumeGrant, socket: Any, *, lease_generation: int | None = None
    ) -> ResumeGrant:
        """Commit an authenticated resume for ``socket``; the final grant.

        Fails without changing anything if the session is gone
        (``SessionResumeExpired``), another resume won since ``grant`` was issued
        (``SessionResumeConflict``), the presented token is no longer valid
        (``InvalidResumeToken``), or events after ``grant.last_seq`` were trimmed
        meanwhile (``JournalGap``). ``lease_generation``: the engine lease the resumed
        socket now serves; generations only move forward.
        """
        record = self._sessions.get(grant.session_id)
        if record is None:
            raise SessionResumeExpired(f"Unknown or expired duplex session: {grant.session_id}")
        if record.attachment_generation + 1 != grant.generation:
            raise SessionResumeConflict(_RESUMED_ELSEWHERE.format(grant.session_id))
        presented = grant.presented_digest
        if not _accepts(record, presented):
            raise InvalidResumeToken("Invalid duplex session resume token")
        _refuse_a_raced_resume(record, presented)
        replay = record.journal.replay_after(grant.last_seq)
        # Commit. Presenting the pending token proves the client got it: it becomes the
        # confirmed one; otherwise the confirmed token stays valid until confirmation.
        if _matches(record.pending_digest, presented):
            record.token_digest = record.pending_digest
        record.pending_digest = token_digest(grant.new_token)
        record.superseded_digest = presented
        previous_generation = record.attachment_generation
        record.attachment_generation = grant.generation
        if lease_generation is not None:
            record.lease_generation = max(record.lease_generation, lease_generation)
        previous = record.socket
        record.socket = socket
        return replace(
            grant,
            replay=replay,
            previous_socket=None if previous is socket else previous,
            previous_generation=previous_generation,
            lease_generation=record.lease_generation,
        )

    def resume(
        self,
        session_id: str,
        token: Any,
        last_seq: Any,
        socket: Any,
        *,
        lease_generation: int | None = None,
    ) -> ResumeGrant:
        """``authenticate_resume`` then ``activate``, for a caller with no engine step
        between them."""
        grant = self.authenticate_resume(session_id, token, last_seq)
        return self.activate(grant, socket, lease_generation=lease_generation)

    def confirm_resume(self, session_id: str, generation: int) -> bool:
        """``session.resumed`` of ``generation`` reached its socket: the token it carried
        becomes the only valid one. False if that resume is no longer current."""
        record = self._sessions.get(session_id)
        if (
            record is None
            or record.attachment_generation != generation
            or record.pending_digest is None
        ):
            return False
        record.token_digest = record.pending_digest
        record.pending_digest = None
        return True

    # ---- accessors ------------------------------------------------------------------

    def get(self, session_id: str) -> SessionAttachment | None:
        return self._sessions.get(session_id)

    def journal(self, session_id: str) -> ReplayJournal:
        return self._record(session_id).journal

    def generation(self, session_id: str) -> int:
        return self._record(session_id).attachment_generation

    def lease_generation(self, session_id: str) -> int:
        return self._record(session_id).lease_generation

    def set_lease_generation(self, session_id: str, generation: int) -> int:
        """Raise the lease generation the current socket serves (never lowers it)."""
        record = self._record(session_id)
        record.lease_generation = max(record.lease_generation, generation)
        return record.lease_generation

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._sessions))

    def __repr__(self) -> str:
        return f"DuplexSessionAttachmentRegistry(sessions={sorted(self._sessions)!r})"

    # ---- internals ------------------------------------------------------------------

    def _record(self, session_id: str) -> SessionAttachment:
        record = self._sessions.get(session_id)
        if record is None:
            raise KeyError(session_id)
        return record

    @staticmethod
    def _verify(record: SessionAttachment, token: Any) -> bytes:
        if not isinstance(token, str) or not token:
            raise InvalidResumeToken("Invalid duplex session resume token")
        presented = token_digest(token)
        if not _accepts(record, presented):
            if _matches(record.superseded_digest, presented):
                raise SessionResumeConflict(_RESUMED_ELSEWHERE.format(record.session_id))
            raise InvalidResumeToken("Invalid duplex session resume token")
        return presented


__all__ = [
    "DuplexSessionAttachmentRegistry",
    "InvalidEventAck",
    "InvalidResumeToken",
    "JournalAhead",
    "JournalGap",
    "ResumeError",
    "ResumeGrant",
    "SessionAlreadyRegistered",
    "SessionAttachment",
    "SessionResumeConflict",
    "SessionResumeExpired",
    "UnsupportedSessionResume",
    "new_resume_token",
    "token_digest",
]
