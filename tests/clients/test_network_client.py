"""DuplexClient against a real server (run_server) over real sockets.

No assertion depends on how long anything takes; TIMEOUT_S only guards against hangs.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))

from server_harness import run_server

from omniduplex.clients import (
    DuplexConnectionError,
    DuplexProtocolError,
    DuplexSessionClosedError,
    decode_output_audio,
    loopback_session,
    response_id_of,
)
from omniduplex.clients.duplex import (
    ConnectionResumed,
    DuplexClient,
    DuplexResumeError,
    DuplexResyncRequiredError,
    ReconnectPolicy,
    realtime_url,
)

TIMEOUT_S = 30.0
RATE = 16_000
FAST_RETRY = ReconnectPolicy(max_attempts=5, min_backoff_s=0.01, max_backoff_s=0.05)


def tone(ms: int, *, freq: float = 440.0) -> bytes:
    t = np.arange(RATE * ms // 1000) / RATE
    return (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2").tobytes()


class Recorder:
    """Every event the client dispatched, with the seq it was delivered with."""

    def __init__(self, client: DuplexClient) -> None:
        self.client = client
        self.events: list[tuple[int | None, object]] = []
        self.hooks: list = []
        client.add_listener(self._on)

    def _on(self, kind: str, obj: object, _at: float) -> None:
        if kind != "event":
            return
        self.events.append((self.client.seq_of(obj), obj))
        for hook in list(self.hooks):
            hook(obj)

    @property
    def seqs(self) -> list[int]:
        return [seq for seq, _ in self.events if seq is not None]

    def types(self) -> list[str]:
        return [event.type for _, event in self.events]

    def of_type(self, kind: type) -> list:
        return [event for _, event in self.events if isinstance(event, kind)]


def assert_contiguous(seqs: list[int], first: int = 1) -> None:
    assert seqs == list(range(first, first + len(seqs))), "every seq once, in order"


async def until(predicate, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.005)


@pytest.fixture(scope="module")
def fast_server():
    with run_server("loopback-fast", resume_replay_max_bytes_per_session=64 * 1024 * 1024) as srv:
        yield srv


@pytest.fixture(scope="module")
def paced_server():
    with run_server("loopback") as srv:
        yield srv


# ---- a conversation -----------------------------------------------------------------------


async def test_conversation_with_barge_in_then_a_second_turn(paced_server) -> None:
    client = await DuplexClient.connect(
        paced_server.ws_url, session=loopback_session(), model="loopback"
    )
    recorder = Recorder(client)
    async with client:
        assert client.session_id and client.session_id.startswith("duplex-")
        assert client.resume_token and client.attachment_generation == 1
        assert client.last_seq == 1  # session.created is seq 1
        assert client.session_info is not None and client.session_info["model"] == "loopback"
        responses = client.responses()

        await client.stream_pcm(tone(1000), sample_rate_hz=RATE)
        await client.commit()
        first = await responses.next(timeout=TIMEOUT_S)
        async for _chunk in first.audio():
            break  # the answer is under way: interrupt it
        await client.barge_in()
        assert await first.wait(TIMEOUT_S) == "cancelled"
        assert 0 < first.received_ms < 1000
        assert first.transcript
        await client.ack_playback(first.response_id, first.received_ms, truncate=True)

        await client.stream_pcm(tone(400, freq=300.0), sample_rate_hz=RATE)
        await client.commit()
        second = await responses.next(timeout=TIMEOUT_S)
        assert await second.wait(TIMEOUT_S) == "completed"
        assert second.received_ms == pytest.approx(400.0)
        assert second.decision == "speak" and second.transcript
        assert second.sample_rate_hz == 24_000
    assert client.closed and client.closed_reason == "client_close"
    types = recorder.types()
    assert types[-1] == "session.closed"
    assert_contiguous(recorder.seqs, first=2)  # session.created (seq 1) came before
    assert client.resumes == 0 and client.duplicates_dropped == 0


async def test_commands_answered_with_errors_raise_typed(fast_server) -> None:
    async with await DuplexClient.connect(fast_server.ws_url, session=loopback_session()) as client:
        mark = client.mark()
        await client.cancel_response()  # nothing is active (decision 6)
        with pytest.raises(DuplexProtocolError) as info:
            await client.wait_for("response.done", TIMEOUT_S, since=mark)
        assert info.value.code and info.value.event_id
    assert client.closed_reason == "client_close"
    with pytest.raises(DuplexSessionClosedError):
        await client.commit()


# ---- automatic resume -----------------------------------------------------------------------


async def drop_at_random_points(url: str, seed: int, turns: int = 20):
    """``turns`` answers, each with its socket killed (abruptly or cleanly) at a random
    event between the commit and the answer's ``response.done``. Returns the client, its
    recorder, the number of kills and ``{response_id: ms of audio expected}``."""
    rng = random.Random(seed)
    client = await DuplexClient.connect(
        url, session=loopback_session(), reconnect=FAST_RETRY, ack_every=16
    )
    recorder = Recorder(client)
    kills = 0
    expected: dict[str, float] = {}
    responses = client.responses()
    turn: dict = {}

    def maybe_kill(event: object) -> None:
        nonlocal kills
        if event.type == "input_audio_buffer.committed":
            turn["armed"] = True
        if not turn.get("armed"):
            return
        turn["count"] = turn.get("count", 0) + 1
        if event.type == "response.done":
            # Nothing is killed after the answer: the test's next commands must not be
            # lost in a dead socket's buffers (commands are not replayed).
            turn["armed"] = False
        if turn["count"] != turn["kill_at"] or not client.connected:
            return
        kills += 1
        turn["armed"] = False
        if rng.random() < 0.5:
            client.drop_connection()  # an abrupt loss: no close frame
        else:
            asyncio.get_running_loop().create_task(client._ws.close())  # a clean close

    recorder.hooks.append(maybe_kill)
    async with client:
        for i in range(turns):
            # Every answer of the loopback echoes as much audio as it heard.
            ms = rng.choice([300, 600, 900])
            turn.clear()
            turn["kill_at"] = rng.randint(1, 2 * ms // 100 + 10)
            await until(lambda: client.resumes == kills, "the previous resume")
            await client.stream_pcm(tone(ms, freq=200.0 + 20 * i), sample_rate_hz=RATE)
            await client.commit()
            response = await responses.next(timeout=TIMEOUT_S)
            assert await response.wait(TIMEOUT_S) == "completed"
            expected[response.response_id] = float(ms)
        await until(lambda: client.resumes == kills, "the last resume")
    return client, recorder, kills, expected


def audio_ms_by_response(recorder: Recorder) -> dict[str, float]:
    out: dict[str, float] = {}
    for _, event in recorder.events:
        if event.type == "response.output_audio.delta":
            pcm, rate = decode_output_audio(event)
            out[event.response_id] = out.get(event.response_id, 0.0) + len(pcm) * 500 / rate
    return out


async def test_random_drops_deliver_every_seq_exactly_once(fast_server) -> None:
    client, recorder, kills, expected = await drop_at_random_points(fast_server.ws_url, 20261129)
    assert client.closed_reason == "client_close"
    assert kills >= 10
    assert_contiguous(recorder.seqs, first=2)
    ids = [event.event_id for seq, event in recorder.events if seq is not None]
    assert len(set(ids)) == len(ids)
    # every audio delta of every answer arrived once: nothing lost, nothing doubled
    assert audio_ms_by_response(recorder) == pytest.approx(expected)
    notices = recorder.of_type(ConnectionResumed)
    assert len(notices) == kills == client.resumes
    types = recorder.types()
    for index, kind in enumerate(types):
        if kind == "connection.resumed":
            assert types[index + 1] == "session.resumed"
    assert client.attachment_generation == 1 + kills
    assert types.count("response.done") == 20


# Caught a real bug: events pushed after the socket died were numbered before the ones
# still queued, so a resumed stream could carry audio after its response.done.
async def test_after_drops_no_answer_event_follows_its_response_done(fast_server) -> None:
    _, recorder, _, _ = await drop_at_random_points(fast_server.ws_url, 7, turns=30)
    finished: set[str] = set()
    for _, event in recorder.events:
        rid = response_id_of(event)
        assert rid not in finished, f"{event.type} of {rid} after its response.done"
        if event.type == "response.done":
            finished.add(rid)


async def test_commands_sent_while_reconnecting_wait_for_the_new_socket(fast_server) -> None:
    client = await DuplexClient.connect(
        fast_server.ws_url, session=loopback_session(), reconnect=FAST_RETRY
    )
    recorder = Recorder(client)
    async with client:
        token = client.resume_token
        client.drop_connection()
        # From the drop on, sends wait for the resumed socket.
        assert not client.connected
        responses = client.responses()
        await client.stream_pcm(tone(500), sample_rate_hz=RATE)
        await client.commit()
        response = await responses.next(timeout=TIMEOUT_S)
        assert await response.wait(TIMEOUT_S) == "completed"
        assert response.received_ms == pytest.approx(500.0)
        assert client.resumes == 1 and client.resume_token != token  # rotated
        notice = recorder.of_type(ConnectionResumed)[0]
        assert notice.session_id == client.session_id and notice.attempt >= 1
    assert_contiguous(recorder.seqs, first=2)


async def test_without_a_reconnect_policy_a_drop_fails_the_client(fast_server) -> None:
    client = await DuplexClient.connect(
        fast_server.ws_url, session=loopback_session(), reconnect=None
    )
    async with client:
        events = client.events()
        client.drop_connection()
        with pytest.raises(DuplexConnectionError):
            async for _event in events:
                pass
        with pytest.raises(DuplexConnectionError):
            await client.commit()
    # the server keeps the session for its disconnect grace; resume it to close it
    again = await DuplexClient.resume(
        fast_server.ws_url, client.session_id, client.resume_token, client.last_seq
    )
    await again.close()
    assert again.closed_reason == "client_close"


# ---- resume from another client -------------------------------------------------------------


async def test_resume_from_a_new_client_after_the_first_was_abandoned(paced_server) -> None:
    first = await DuplexClient.connect(paced_server.ws_url, session=loopback_session())
    seen_first = Recorder(first)
    responses = first.responses()
    await first.stream_pcm(tone(300), sample_rate_hz=RATE)
    await first.commit()
    assert await (await responses.next(timeout=TIMEOUT_S)).wait(TIMEOUT_S) == "completed"
    # A second answer starts; the process "dies" after its first audio delta.
    await first.stream_pcm(tone(800), sample_rate_hz=RATE)
    await first.commit()
    await first.wait_for("response.output_audio.delta", TIMEOUT_S)
    session_id, token, last_seq = first.session_id, first.resume_token, first.last_seq
    await first.aclose()
    assert first.closed_reason == "client_released"

    second = await DuplexClient.resume(paced_server.ws_url, session_id, token, last_seq)
    seen_second = Recorder(second)
    assert second.session_id == session_id
    assert second.resume_token not in (None, token)
    assert second.attachment_generation == 2
    # the rest of the interrupted answer: replayed, then live
    done = await second.wait_for("response.done", TIMEOUT_S, since=0)
    assert done.response["status"] == "completed"
    responses = second.responses()
    await second.stream_pcm(tone(300), sample_rate_hz=RATE)
    await second.commit()
    third = await responses.next(timeout=TIMEOUT_S)
    assert await third.wait(TIMEOUT_S) == "completed"
    # ... and is abandoned in turn (see test_a_refused_resume_leaves_the_attached_socket_alone
    # for why the stale token is not tried while a socket is attached).
    await second.aclose()
    with pytest.raises(DuplexResumeError) as info:
        await DuplexClient.resume(paced_server.ws_url, session_id, token, last_seq)
    # The superseded token no longer works: whoever shows it lost to the resume that did.
    assert info.value.code == "session_resume_conflict"
    last = await DuplexClient.resume(
        paced_server.ws_url, session_id, second.resume_token, second.last_seq
    )
    seen_last = Recorder(last)
    async with last:
        assert last.attachment_generation == 3
    assert seen_last.types()[-1] == "session.closed"
    types = seen_second.types()
    assert types[0] == "session.resumed"
    assert seen_second.of_type(ConnectionResumed) == []
    # together the clients saw the whole stream, each seq exactly once
    assert_contiguous([1, *seen_first.seqs, *seen_second.seqs, *seen_last.seqs])
    assert seen_second.seqs[0] == last_seq + 1


async def test_wrong_token_and_unknown_session_are_typed_errors(fast_server) -> None:
    client = await DuplexClient.connect(fast_server.ws_url, session=loopback_session())
    session_id, token, last_seq = client.session_id, client.resume_token, client.last_seq
    await client.aclose()  # detached: the session waits for a resume
    with pytest.raises(DuplexResumeError) as info:
        await DuplexClient.resume(fast_server.ws_url, session_id, "not-the-token")
    assert info.value.code == "invalid_resume_token"
    assert isinstance(info.value, DuplexProtocolError)
    assert isinstance(info.value, DuplexConnectionError)
    with pytest.raises(DuplexResumeError) as info:
        await DuplexClient.resume(fast_server.ws_url, "duplex-" + "0" * 32, token)
    assert info.value.code == "session_resume_expired"
    with pytest.raises(DuplexResumeError) as info:  # a seq the session never sent
        await DuplexClient.resume(fast_server.ws_url, session_id, token, last_seq + 5)
    assert info.value.code == "session_resume_conflict"
    # the refused attempts did not disturb the session
    async with await DuplexClient.resume(fast_server.ws_url, session_id, token, last_seq) as again:
        await again.send({"type": "session.heartbeat"})
        await again.wait_for("session.heartbeat_ack", TIMEOUT_S)


# Caught a real bug: a refused session.resume used to silence the attached socket.
async def test_a_refused_resume_leaves_the_attached_socket_alone(fast_server) -> None:
    client = await DuplexClient.connect(fast_server.ws_url, session=loopback_session())
    try:
        with pytest.raises(DuplexResumeError):
            await DuplexClient.resume(fast_server.ws_url, client.session_id, "not-the-token")
        await client.send({"type": "session.heartbeat"})
        # a hang guard: the ack is immediate on a healthy server
        await client.wait_for("session.heartbeat_ack", 2.0)
        await client.close()
    finally:
        await client.aclose()


async def test_takeover_ends_the_first_client_with_session_replaced(fast_server) -> None:
    first = await DuplexClient.connect(fast_server.ws_url, session=loopback_session())
    second = await DuplexClient.resume(
        fast_server.ws_url, first.session_id, first.resume_token, first.last_seq
    )
    async with second:
        assert await first.wait_closed(TIMEOUT_S) == "session_replaced"
        assert first.closed_event.type == "session.replaced"
        assert first.resumes == 0  # a takeover is never answered with a resume
        with pytest.raises(DuplexSessionClosedError):
            await first.commit()
        await second.send({"type": "session.heartbeat"})
        await second.wait_for("session.heartbeat_ack", TIMEOUT_S)
    await first.aclose()
    assert second.closed_reason == "client_close"


async def test_a_replay_gap_fails_with_resync_required() -> None:
    with run_server("loopback-fast", resume_replay_max_bytes_per_session=2048) as small:
        client = await DuplexClient.connect(
            small.ws_url, session=loopback_session(), reconnect=FAST_RETRY, ack_every=None
        )
        async with client:
            events = client.events()
            responses = client.responses()
            await client.stream_pcm(tone(600), sample_rate_hz=RATE)
            await client.commit()
            await (await responses.next(timeout=TIMEOUT_S)).wait(TIMEOUT_S)
            # Replay from an early seq: the small journal no longer holds it.
            client._last_seq = 1
            client.drop_connection()
            with pytest.raises(DuplexResyncRequiredError) as info:
                async for _event in events:
                    pass
            assert info.value.reason == "journal_gap"
            assert client.resume_token is None


async def test_admission_refusal_is_a_protocol_error() -> None:
    with run_server("loopback-fast", max_sessions=1) as one:
        async with await DuplexClient.connect(one.ws_url, session=loopback_session()):
            with pytest.raises(DuplexProtocolError) as info:
                await DuplexClient.connect(one.ws_url, session=loopback_session())
            assert info.value.code == "resource_exhausted"


async def test_beta_dialect_and_api_key() -> None:
    with run_server("loopback-fast", api_key="sekret") as guarded:
        with pytest.raises(DuplexProtocolError) as info:
            await DuplexClient.connect(guarded.ws_url, session=loopback_session())
        assert info.value.code == "unauthorized"
        client = await DuplexClient.connect(
            guarded.ws_url, session=loopback_session(), api_key="sekret", dialect="beta"
        )
        recorder = Recorder(client)
        responses = client.responses()
        await client.stream_pcm(tone(300), sample_rate_hz=RATE)
        await client.commit()
        answer = await responses.next(timeout=TIMEOUT_S)
        assert await answer.wait(TIMEOUT_S) == "completed"
        assert answer.received_ms == pytest.approx(300.0) and answer.transcript
        # the resume carries the key too
        client.drop_connection()
        await client.send({"type": "session.heartbeat"})
        await client.wait_for("session.heartbeat_ack", TIMEOUT_S)
        assert client.resumes == 1
        await client.close()
        assert client.closed_reason == "client_close"
        assert_contiguous(recorder.seqs, first=2)


# ---- heartbeat and acks --------------------------------------------------------------------


async def test_heartbeats_are_acknowledged_and_acks_trim_the_journal(fast_server) -> None:
    client = await DuplexClient.connect(
        fast_server.ws_url, session=loopback_session(), heartbeat_s=0.05, ack_every=8
    )
    async with client:
        first = await client.wait_for("session.heartbeat_ack", TIMEOUT_S)
        mark = client.mark()
        second = await client.wait_for("session.heartbeat_ack", TIMEOUT_S, since=mark)
        assert client.seq_of(second) > client.seq_of(first)
        assert client.heartbeats_sent >= 2
        responses = client.responses()
        await client.stream_pcm(tone(500), sample_rate_hz=RATE)
        await client.commit()
        await (await responses.next(timeout=TIMEOUT_S)).wait(TIMEOUT_S)
        journal = fast_server.handler.registry.journal(client.session_id)
        await until(lambda: journal.floor >= client.last_seq - 8, "the server to trim")
        assert client.resumes == 0


# ---- pure helpers --------------------------------------------------------------------------


def test_reconnect_policy_backoff() -> None:
    policy = ReconnectPolicy(max_attempts=5, min_backoff_s=0.25, max_backoff_s=4.0, jitter=False)
    assert [policy.delay(k) for k in range(7)] == [0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 4.0]
    jittered = ReconnectPolicy()
    rng = random.Random(1)
    for attempt in range(1, 8):
        assert 0.25 <= jittered.delay(attempt, rng) <= 4.0
    with pytest.raises(ValueError):
        ReconnectPolicy(max_attempts=0)


def test_realtime_url() -> None:
    assert realtime_url("http://h:8000") == "ws://h:8000/v1/realtime?duplex=1"
    assert realtime_url("https://h/v1/realtime?x=1") == "wss://h/v1/realtime?x=1&duplex=1"
    resumed = realtime_url("ws://h/v1/realtime?autostart=0", resume=True, dialect="beta")
    assert resumed == "ws://h/v1/realtime?resume=1&dialect=beta&duplex=1"
    assert realtime_url("ws://h/v1/realtime?duplex=0") == "ws://h/v1/realtime?duplex=0"
    assert realtime_url("ws://h", extensions=False) == "ws://h/v1/realtime"
    with pytest.raises(ValueError):
        realtime_url("ftp://h")


def test_importing_the_network_client_loads_no_server_code() -> None:
    code = (
        "import sys, omniduplex.clients.duplex\n"
        "bad = sorted(m for m in sys.modules if m.startswith(("
        "'omniduplex.engine', 'omniduplex.entrypoints', 'omniduplex.model_executor',"
        "'fastapi', 'starlette', 'uvicorn')))\n"
        "print(bad)\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
