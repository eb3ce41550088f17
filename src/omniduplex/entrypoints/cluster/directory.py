"""Which replica holds which session, and which replica has room (sans-I/O).

``SessionDirectory`` is the cluster's one record of placement; on Ray it runs as a named
detached actor (``ray_backend``) that every front end and replica reaches by name, so a
front end keeps nothing about a session beyond its socket.

* A new session: a front end asks ``place()`` and gets the replica with the most free slots
  (``max_sessions`` minus its sessions minus placements not yet settled) and a ticket; the
  replica reports ``opened(..., ticket=...)`` or ``settle``\\ s the ticket. When every live
  replica is full, ``place`` still names the least loaded one with ``full=True``: its engine
  then decides as in one process (take a long-detached session's slot or refuse with
  ``resource_exhausted``), so the cluster refuses only when every replica is full.
* A later resume: ``locate(session_id)`` names the replica that holds it.
* A replica that died: ``failed(name)`` takes its slots out of admission and forgets its
  sessions; when Ray has restarted it, it ``register``\\ s again with a new incarnation.

A replica numbers what it reports (``version``: +1 per session opened or ended), and its
``register`` snapshots carry the number they were taken at, so a snapshot older than a
report already applied (or a report older than a snapshot) changes nothing: the
directory converges on what the replica holds whatever order they arrive in.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

Clock = Callable[[], float]

#: A placement whose replica never reported back (its front end died before the
#: connection reached it) stops holding a slot after this long.
DEFAULT_PENDING_TTL_S = 30.0


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a new session goes. ``full``: every live replica was full."""

    replica: str
    ticket: str
    full: bool = False


@dataclass(frozen=True, slots=True)
class ReplicaView:
    name: str
    alive: bool
    max_sessions: int
    sessions: int
    pending: int
    incarnation: str

    @property
    def free(self) -> int:
        return max(0, self.max_sessions - self.sessions - self.pending) if self.alive else 0


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What ``/health`` and ``/v1/models`` report of the cluster."""

    replicas: tuple[ReplicaView, ...]
    # Which run of the directory answered (a restarted one rebuilds from the replicas).
    directory: str = ""

    @property
    def live(self) -> int:
        return sum(r.alive for r in self.replicas)

    @property
    def capacity(self) -> int:
        return sum(r.max_sessions for r in self.replicas if r.alive)

    @property
    def sessions(self) -> int:
        return sum(r.sessions for r in self.replicas if r.alive)

    def to_dict(self) -> dict[str, object]:
        return {
            "replicas": [
                {
                    "name": r.name,
                    "alive": r.alive,
                    "sessions": r.sessions,
                    "max_sessions": r.max_sessions,
                }
                for r in self.replicas
            ],
            "live_replicas": self.live,
            "sessions": self.sessions,
            "capacity": self.capacity,
        }


@dataclass(slots=True)
class _Replica:
    name: str
    max_sessions: int
    incarnation: str
    alive: bool = True
    sessions: set[str] = field(default_factory=set)
    pending: dict[str, float] = field(default_factory=dict)  # ticket -> placed at
    version: int = 0  # of the last report or snapshot applied

    @property
    def load(self) -> int:
        return len(self.sessions) + len(self.pending)


class SessionDirectory:
    """Session placement and location for every replica of one deployment."""

    def __init__(
        self, *, pending_ttl_s: float = DEFAULT_PENDING_TTL_S, clock: Clock | None = None
    ) -> None:
        self.pending_ttl_s = pending_ttl_s
        self._clock: Clock = clock or time.monotonic
        self._replicas: dict[str, _Replica] = {}
        self._where: dict[str, str] = {}
        # Ties between equally loaded replicas go round the ring.
        self._turn = itertools.count()

    # ---- replicas ---------------------------------------------------------------------

    def register(
        self,
        name: str,
        *,
        max_sessions: int,
        incarnation: str,
        sessions: Iterable[str] = (),
        version: int = 0,
    ) -> None:
        """A replica serves (again), holding ``sessions`` as of its report ``version``. A
        new incarnation (Ray restarted it) replaces the old one's record."""
        record = self._replicas.get(name)
        if record is None or record.incarnation != incarnation:
            if record is not None:
                self._forget_sessions(record)
            record = _Replica(name=name, max_sessions=max_sessions, incarnation=incarnation)
            self._replicas[name] = record
        record.alive = True
        record.max_sessions = max_sessions
        if version < record.version:
            return  # a report newer than this snapshot was applied already
        record.version = version
        live = set(sessions)
        for gone in record.sessions - live:
            self._unmap(gone, name)
        record.sessions = live
        for session_id in live:
            self._where[session_id] = name

    def failed(self, name: str, incarnation: str | None = None) -> bool:
        """The replica died: its sessions are gone and its slots leave admission. With
        ``incarnation``, only if that is still the one recorded (a late report of an
        earlier death must not take down its restarted successor). True if it changed."""
        record = self._replicas.get(name)
        if record is None or not record.alive:
            return False
        if incarnation is not None and record.incarnation != incarnation:
            return False
        record.alive = False
        self._forget_sessions(record)
        record.pending.clear()
        return True

    def incarnation(self, name: str) -> str | None:
        record = self._replicas.get(name)
        return None if record is None or not record.alive else record.incarnation

    # ---- sessions ---------------------------------------------------------------------

    def place(self) -> Placement | None:
        """The replica a new session goes to, or ``None`` when no replica is alive."""
        self._expire()
        live = [r for r in self._replicas.values() if r.alive]
        if not live:
            return None
        turn = next(self._turn)
        order = {r.name: (i - turn) % len(live) for i, r in enumerate(live)}
        best = max(live, key=lambda r: (r.max_sessions - r.load, -order[r.name]))
        ticket = uuid.uuid4().hex
        best.pending[ticket] = self._clock()
        return Placement(best.name, ticket, full=best.load > best.max_sessions)

    def opened(
        self, name: str, session_id: str, ticket: str | None = None, version: int | None = None
    ) -> None:
        record = self._replicas.get(name)
        if record is None or not record.alive:
            return
        if ticket is not None:
            record.pending.pop(ticket, None)
        if not self._fresh(record, version):
            return
        record.sessions.add(session_id)
        self._where[session_id] = name

    def settle(self, name: str, ticket: str) -> None:
        """The placement ended without opening a session (refused, or a resume)."""
        record = self._replicas.get(name)
        if record is not None:
            record.pending.pop(ticket, None)

    def ended(self, name: str, session_id: str, version: int | None = None) -> None:
        record = self._replicas.get(name)
        if record is None or not self._fresh(record, version):
            return
        record.sessions.discard(session_id)
        self._unmap(session_id, name)

    def locate(self, session_id: str) -> str | None:
        """The live replica holding ``session_id``, or ``None``."""
        name = self._where.get(session_id)
        record = self._replicas.get(name) if name is not None else None
        return name if record is not None and record.alive else None

    def view(self) -> ClusterView:
        self._expire()
        return ClusterView(
            tuple(
                ReplicaView(
                    name=r.name,
                    alive=r.alive,
                    max_sessions=r.max_sessions,
                    sessions=len(r.sessions),
                    pending=len(r.pending),
                    incarnation=r.incarnation,
                )
                for r in sorted(self._replicas.values(), key=lambda r: r.name)
            )
        )

    # ---- internals --------------------------------------------------------------------

    @staticmethod
    def _fresh(record: _Replica, version: int | None) -> bool:
        """Whether a report is newer than what was applied (and note it)."""
        if version is None:
            return True
        if version <= record.version:
            return False
        record.version = version
        return True

    def _expire(self) -> None:
        cutoff = self._clock() - self.pending_ttl_s
        for record in self._replicas.values():
            stale = [t for t, at in record.pending.items() if at <= cutoff]
            for ticket in stale:
                del record.pending[ticket]

    def _forget_sessions(self, record: _Replica) -> None:
        for session_id in record.sessions:
            self._unmap(session_id, record.name)
        record.sessions = set()

    def _unmap(self, session_id: str, name: str) -> None:
        if self._where.get(session_id) == name:
            del self._where[session_id]


__all__ = ["ClusterView", "Placement", "ReplicaView", "SessionDirectory"]
