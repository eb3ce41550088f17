"""DuplexSessionAttachmentRegistry: credentials, generations, takeover, resume errors."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac

import orjson
import pytest

from omniduplex.entrypoints.duplex import session_attachment
from omniduplex.entrypoints.duplex.journal import InvalidEventAck, JournalAhead, JournalGap
from omniduplex.entrypoints.duplex.session_attachment import (
    DuplexSessionAttachmentRegistry,
    InvalidResumeToken,
    SessionAlreadyRegistered,
    SessionResumeConflict,
    SessionResumeExpired,
    UnsupportedSessionResume,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class Socket:
    """An opaque socket identity."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Socket({self.name})"


SID = "duplex-" + "ab" * 16


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry(clock: FakeClock) -> DuplexSessionAttachmentRegistry:
    return DuplexSessionAttachmentRegistry(
        replay_ttl_s=60.0, replay_max_bytes_per_session=1 << 20, clock=clock
    )


def _ev(n: int) -> dict:
    return {"type": "response.output_audio.delta", "event_id": f"event_{n:032x}"}


def _open(registry, socket=None, resumable=True):
    token, generation = registry.register(SID, resumable=resumable, socket=socket)
    return token, generation


# ---- registration and tokens ------------------------------------------------------------


def test_register_returns_a_fresh_token_and_generation_one(registry) -> None:
    token, generation = _open(registry)
    assert generation == 1
    assert isinstance(token, str) and len(token) == 43
    assert len(base64.urlsafe_b64decode(token + "=")) == 32
    other = DuplexSessionAttachmentRegistry().register("other", resumable=True)[0]
    assert other != token


def test_non_resumable_session_gets_no_token_and_keeps_no_journal(registry) -> None:
    token, generation = _open(registry, resumable=False)
    assert token is None and generation == 1
    assert orjson.loads(registry.journal(SID).append(_ev(1))[1])["server_event_seq"] == 1
    assert len(registry.journal(SID)) == 0
    with pytest.raises(UnsupportedSessionResume) as info:
        registry.authenticate_resume(SID, "anything", 0)
    assert info.value.code == "unsupported_session_resume"


def test_double_register_is_refused(registry) -> None:
    _open(registry)
    with pytest.raises(SessionAlreadyRegistered) as info:
        _open(registry)
    assert info.value.code == "session_exists"


def _walk(value, seen=None):
    """Every object reachable through the registry's own state."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    yield value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(k, seen)
            yield from _walk(v, seen)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            yield from _walk(v, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _walk(getattr(value, f.name), seen)
    elif hasattr(value, "__dict__"):
        yield from _walk(vars(value), seen)


def test_registry_never_stores_the_plaintext_token(registry) -> None:
    token, _ = _open(registry, socket=Socket("a"))
    grant = registry.resume(SID, token, 0, Socket("b"))
    for plaintext in (token, grant.new_token):
        raw = plaintext.encode()
        for obj in _walk(registry):
            assert obj != plaintext
            if isinstance(obj, bytes | str):
                assert raw not in (obj.encode() if isinstance(obj, str) else obj)
        assert plaintext not in repr(registry) and plaintext not in repr(registry.get(SID))
        assert plaintext not in repr(grant)
    record = registry.get(SID)
    assert any(obj is record.pending_digest for obj in _walk(registry))  # the walk reaches it
    digests = {record.token_digest, record.pending_digest}
    assert hashlib.sha256(grant.new_token.encode()).digest() in digests
    assert hashlib.sha256(token.encode()).digest() in digests


def test_tokens_are_compared_in_constant_time(registry, monkeypatch) -> None:
    token, _ = _open(registry)
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(session_attachment.hmac, "compare_digest", spy)
    with pytest.raises(InvalidResumeToken):
        registry.authenticate_resume(SID, "x" * 43, 0)
    assert calls and all(len(a) == len(b) == 32 for a, b in calls)
    calls.clear()
    registry.authenticate_resume(SID, token, 0)
    assert hashlib.sha256(token.encode()).digest() in {b for _, b in calls}


# ---- resume: rotation and generations ---------------------------------------------------


def test_resume_rotates_the_token_and_bumps_the_generation(registry) -> None:
    a, b, c = Socket("a"), Socket("b"), Socket("c")
    token1, _ = _open(registry, socket=a)
    registry.detach(SID, a)
    grant = registry.resume(SID, token1, 0, b)
    assert grant.generation == 2 and registry.generation(SID) == 2
    assert grant.new_token != token1
    assert registry.confirm_resume(SID, 2)
    # The token that resume presented: whoever shows it now lost the race to it.
    with pytest.raises(SessionResumeConflict) as info:
        registry.authenticate_resume(SID, token1, 0)
    assert info.value.code == "session_resume_conflict"
    assert "another connection" in str(info.value)
    with pytest.raises(InvalidResumeToken) as info:
        registry.authenticate_resume(SID, "a-token-never-issued", 0)
    assert info.value.code == "invalid_resume_token"
    grant3 = registry.resume(SID, grant.new_token, 0, c)
    assert grant3.generation == 3
    assert grant3.previous_socket is b and grant3.previous_generation == 2


def test_presenting_the_new_token_confirms_it(registry) -> None:
    token1, _ = _open(registry, socket=Socket("a"))
    grant2 = registry.resume(SID, token1, 0, Socket("b"))
    registry.resume(SID, grant2.new_token, 0, Socket("c"))  # no confirm_resume call
    with pytest.raises(InvalidResumeToken):
        registry.authenticate_resume(SID, token1, 0)


def test_failed_activation_keeps_the_old_token(registry) -> None:
    a, b = Socket("a"), Socket("b")
    token1, _ = _open(registry, socket=a)
    registry.detach(SID, a)
    # The engine refuses between authentication and activation: nothing changed.
    grant = registry.authenticate_resume(SID, token1, 0)
    assert registry.generation(SID) == 2 - 1 and registry.socket_of(SID) is None
    # Activation happens, but the socket dies before session.resumed got out.
    grant = registry.activate(grant, b)
    assert registry.detach(SID, b)
    # The client never saw the new token: its old one still works, once more rotated.
    retry = registry.resume(SID, token1, 0, Socket("c"))
    assert retry.generation == 3
    assert registry.confirm_resume(SID, 3)
    with pytest.raises(SessionResumeConflict):  # the retry presented it
        registry.authenticate_resume(SID, token1, 0)
    with pytest.raises(InvalidResumeToken):
        registry.authenticate_resume(SID, grant.new_token, 0)
    registry.authenticate_resume(SID, retry.new_token, 0)


def test_a_resume_racing_one_not_yet_confirmed_loses(registry) -> None:
    token1, _ = _open(registry, socket=Socket("a"))
    registry.resume(SID, token1, 0, Socket("b"))  # session.resumed not sent yet
    with pytest.raises(SessionResumeConflict):
        registry.authenticate_resume(SID, token1, 0)
    # Had that socket died first, its client's old token would still work.
    registry.detach(SID, registry.socket_of(SID))
    assert registry.authenticate_resume(SID, token1, 0).generation == 3


def test_confirm_of_a_superseded_resume_is_refused(registry) -> None:
    token1, _ = _open(registry)
    g2 = registry.resume(SID, token1, 0, Socket("b"))
    registry.resume(SID, g2.new_token, 0, Socket("c"))
    assert not registry.confirm_resume(SID, 2)
    assert registry.confirm_resume(SID, 3)
    assert not registry.confirm_resume(SID, 3)


def test_concurrent_resumes_with_one_token_have_one_winner(registry) -> None:
    token1, _ = _open(registry)
    first = registry.authenticate_resume(SID, token1, 0)
    second = registry.authenticate_resume(SID, token1, 0)
    registry.activate(first, Socket("b"))
    with pytest.raises(SessionResumeConflict) as info:
        registry.activate(second, Socket("c"))
    assert info.value.code == "session_resume_conflict"
    assert registry.generation(SID) == 2


def test_lease_generation_only_moves_forward(registry) -> None:
    token, _ = _open(registry)
    grant = registry.resume(SID, token, 0, Socket("b"), lease_generation=4)
    assert grant.lease_generation == 4 and registry.lease_generation(SID) == 4
    grant = registry.resume(SID, grant.new_token, 0, Socket("c"), lease_generation=2)
    assert registry.lease_generation(SID) == 4
    assert registry.set_lease_generation(SID, 7) == 7


# ---- resume: errors ---------------------------------------------------------------------


def test_unknown_or_forgotten_session_is_expired(registry) -> None:
    with pytest.raises(SessionResumeExpired) as info:
        registry.authenticate_resume("duplex-nope", "t", 0)
    assert info.value.code == "session_resume_expired"
    token, _ = _open(registry)
    grant = registry.authenticate_resume(SID, token, 0)
    registry.forget(SID)
    with pytest.raises(SessionResumeExpired):
        registry.authenticate_resume(SID, token, 0)
    with pytest.raises(SessionResumeExpired):
        registry.activate(grant, Socket("b"))


@pytest.mark.parametrize("bad", ["", None, 42, "x" * 43, "\ud800"])
def test_bad_tokens_are_refused(registry, bad) -> None:
    _open(registry)
    with pytest.raises(InvalidResumeToken):
        registry.authenticate_resume(SID, bad, 0)


def test_seq_ahead_is_a_conflict_and_a_gap_is_a_gap(registry, clock) -> None:
    token, _ = _open(registry)
    for n in range(1, 6):
        registry.journal(SID).append(_ev(n))[1]
    with pytest.raises(JournalAhead) as info:
        registry.authenticate_resume(SID, token, 6)
    assert info.value.code == "session_resume_conflict"
    registry.journal(SID).ack(3)
    with pytest.raises(JournalGap):
        registry.authenticate_resume(SID, token, 2)
    assert len(registry.authenticate_resume(SID, token, 3).replay) == 2


def test_gap_that_opens_during_the_engine_step_fails_activation(registry, clock) -> None:
    token, _ = _open(registry)
    registry.journal(SID).append(_ev(1))[1]
    grant = registry.authenticate_resume(SID, token, 0)
    clock.now += 61  # the engine RPC took longer than the TTL
    with pytest.raises(JournalGap):
        registry.activate(grant, Socket("b"))
    assert registry.generation(SID) == 1
    registry.authenticate_resume(SID, token, 1)  # old token still valid


def test_activation_replays_events_sequenced_after_authentication(registry) -> None:
    token, _ = _open(registry)
    early = registry.journal(SID).append(_ev(1))[1]
    grant = registry.authenticate_resume(SID, token, 0)
    late = registry.journal(SID).append(_ev(2))[1]
    final = registry.activate(grant, Socket("b"))
    assert final.replay == [early, late]


def test_ack_errors_carry_invalid_event_ack(registry) -> None:
    _open(registry)
    registry.journal(SID).append(_ev(1))[1]
    with pytest.raises(InvalidEventAck) as info:
        registry.journal(SID).ack(2)
    assert info.value.code == "invalid_event_ack"
    assert registry.journal(SID).ack(1) == 1


# ---- sockets ----------------------------------------------------------------------------


def test_takeover_returns_the_previous_socket(registry) -> None:
    a, b = Socket("a"), Socket("b")
    token, _ = _open(registry, socket=a)
    grant = registry.resume(SID, token, 0, b)
    assert grant.previous_socket is a and grant.previous_generation == 1
    assert registry.is_current(SID, b) and not registry.is_current(SID, a)
    assert registry.attach(SID, a) is b
    assert registry.attach(SID, a) is None  # same socket again: nothing replaced


def test_stale_socket_detach_is_a_noop(registry) -> None:
    a, b = Socket("a"), Socket("b")
    token, _ = _open(registry, socket=a)
    registry.resume(SID, token, 0, b)
    assert registry.detach(SID, a) is False
    assert registry.socket_of(SID) is b
    assert registry.detach(SID, b) is True
    assert registry.detach(SID, b) is False  # a second report of the same disconnect
    assert registry.detach("duplex-nope", b) is False


def test_detached_session_still_sequences(registry) -> None:
    a = Socket("a")
    token, _ = _open(registry, socket=a)
    registry.detach(SID, a)
    sent = [registry.journal(SID).append(_ev(n))[1] for n in range(1, 4)]
    assert registry.resume(SID, token, 1, Socket("b")).replay == sent[1:]


def test_forget_returns_the_socket_and_drops_the_journal(registry) -> None:
    a = Socket("a")
    _open(registry, socket=a)
    assert SID in registry and len(registry) == 1
    assert registry.forget(SID) is a
    assert SID not in registry and registry.forget(SID) is None
    with pytest.raises(KeyError):
        registry.journal(SID).append(_ev(1))[1]
    assert SID not in repr(registry)


def test_forget_empties_the_journal_even_while_something_still_holds_it(registry) -> None:
    # A socket's protocol may keep the journal alive in a reference cycle: its events
    # must not live on with it.
    _open(registry, socket=Socket("a"))
    journal = registry.journal(SID)
    for n in range(1, 6):
        journal.append(_ev(n))
    registry.forget(SID)
    assert len(journal) == 0 and journal.retained_bytes == 0
    assert journal.head == 5  # numbering is untouched


def test_constructor_validates_limits() -> None:
    with pytest.raises(ValueError):
        DuplexSessionAttachmentRegistry(replay_ttl_s=0)
    with pytest.raises(ValueError):
        DuplexSessionAttachmentRegistry(replay_max_bytes_per_session=0)
