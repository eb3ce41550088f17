"""Admission, bad input, authentication, slow clients and shutdown over real sockets."""

from __future__ import annotations

import asyncio
import base64

import httpx
import pytest
from server_harness import TIMEOUT_S, run_server, wire
from websockets.exceptions import ConnectionClosed


@pytest.fixture(scope="module")
def server():
    with run_server("loopback-fast", max_pending_input_bytes_per_session=64 * 1024) as running:
        yield running


async def test_admission_refuses_the_extra_session_and_a_slot_frees_after_close() -> None:
    with run_server("loopback-fast", max_sessions=2) as small:
        await _admission(small)


async def _admission(server) -> None:
    async with (
        wire(server.ws_url + "?model=loopback") as one,
        wire(server.ws_url + "?model=loopback") as two,
    ):
        assert (await one.recv())["type"] == "session.created"
        assert (await two.recv())["type"] == "session.created"
        async with wire(server.ws_url + "?model=loopback") as three:
            refused = await three.recv()
            assert refused["type"] == "error"
            assert refused["error"]["code"] == "resource_exhausted"
            assert refused["error"]["type"] == "rate_limit_error"
        await two.send({"type": "session.close"})
        await two.until("session.closed")
    for _ in range(100):  # the slot frees once the close has finished its cleanup
        async with wire(server.ws_url + "?model=loopback") as four:
            first = await four.recv()
            if first["type"] == "session.created":
                break
        await asyncio.sleep(0.05)
    assert first["type"] == "session.created"


async def test_bad_input_gets_typed_errors_and_the_socket_keeps_working(server) -> None:
    async with (
        wire(server.ws_url + "?model=loopback") as client,
        wire(server.ws_url + "?model=loopback") as neighbour,
    ):
        await client.recv()
        await neighbour.recv()
        await client.ws.send("{not json")
        assert (await client.recv())["error"]["code"] == "invalid_json"
        await client.ws.send(b"\x00\x01binary")
        assert (await client.recv())["error"]["code"] == "binary_frame_unsupported"
        await client.send({"type": "no.such.event", "event_id": "evt_1"})
        error = await client.recv()
        assert error["error"]["code"] == "unknown_event"
        assert error["error"]["event_id"] == "evt_1"
        await client.send(
            {"type": "input_audio_buffer.append", "audio": "%%%", "event_id": "evt_2"}
        )
        error = await client.recv()
        assert (error["error"]["code"], error["error"]["event_id"]) == ("bad_audio", "evt_2")
        await client.send({"type": "response.cancel", "event_id": "evt_3"})
        error = await client.until("error")
        assert error[-1]["error"]["code"] == "response_cancel_not_active"
        # a flood of appends: backpressure, nothing accepted is lost, the socket lives on
        chunk = base64.b64encode(bytes(48_000)).decode()
        for i in range(20):
            await client.send(
                {"type": "input_audio_buffer.append", "audio": chunk, "event_id": f"f{i}"}
            )
        codes = set()
        await client.send({"type": "session.heartbeat", "event_id": "hb"})
        while True:
            event = await client.recv()
            if event["type"] == "error":
                codes.add(event["error"]["code"])
            if event["type"] == "session.heartbeat_ack":
                break
        assert "input_backpressure" in codes
        # the neighbour never saw any of it
        await neighbour.send({"type": "session.heartbeat"})
        assert (await neighbour.recv())["type"] == "session.heartbeat_ack"
        # every event carried a sequence number and they only went up
        seqs = [e["server_event_seq"] for e in client.received if "server_event_seq" in e]
        assert seqs == sorted(seqs) and len(seqs) == len(client.received)


async def test_resume_only_connections_refuse_other_first_messages(server) -> None:
    async with wire(server.ws_url + "?resume=1&autostart=0") as client:
        await client.send({"type": "input_audio_buffer.append", "audio": "AAAA", "event_id": "e1"})
        error = await client.recv()
        assert error["error"]["code"] == "session_required"
        assert error["error"]["event_id"] == "e1"


async def test_commands_after_close_are_refused(server) -> None:
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        await client.send({"type": "session.close"})
        closed = await client.until("session.closed")
        assert closed[-1]["reason"] == "client_close"
        with pytest.raises(ConnectionClosed):
            await client.send({"type": "session.heartbeat"})
            await client.recv()


async def test_http_routes(server) -> None:
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        assert (await http.get("/health")).json() == {"status": "ok"}
        models = (await http.get("/v1/models")).json()
        assert models["data"][0]["id"] == "loopback"
        missing = await http.get("/v1/audio/voices")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "route_not_available"


async def test_api_key_protects_http_and_websocket() -> None:
    with run_server("loopback-fast", api_key="sekrit") as locked:
        async with httpx.AsyncClient(base_url=locked.http_url) as http:
            assert (await http.get("/v1/models")).status_code == 401
            ok = await http.get("/v1/models", headers={"Authorization": "Bearer sekrit"})
            assert ok.status_code == 200
        async with wire(locked.ws_url + "?model=loopback") as anonymous:
            assert (await anonymous.recv())["error"]["code"] == "unauthorized"
        headers = {"Authorization": "Bearer sekrit"}
        async with wire(locked.ws_url + "?model=loopback", additional_headers=headers) as bearer:
            assert (await bearer.recv())["type"] == "session.created"
        protocols = ["realtime", "openai-insecure-api-key.sekrit"]
        async with wire(locked.ws_url + "?model=loopback", subprotocols=protocols) as browser:
            assert (await browser.recv())["type"] == "session.created"


async def test_shutdown_closes_every_session_with_reason_shutdown() -> None:
    with run_server("loopback-fast") as doomed:
        async with (
            wire(doomed.ws_url + "?model=loopback&duplex=1") as client,
            wire(doomed.ws_url + "?model=loopback") as stock,
        ):
            await client.recv()
            await stock.recv()
            loop = doomed.app.state.loop  # the server's own event loop
            future = asyncio.run_coroutine_threadsafe(doomed.handler.shutdown(), loop)
            closed = await client.until("session.closed")
            assert closed[-1]["reason"] == "shutdown"
            # A stock client gets no event type of ours, only the close with the reason.
            with pytest.raises(ConnectionClosed) as ended:
                while True:
                    assert (await stock.recv())["type"] != "session.closed"
            assert ended.value.rcvd is not None and ended.value.rcvd.reason == "shutdown"
            future.result(TIMEOUT_S)


async def test_metrics_count_what_the_server_did(server) -> None:
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        await client.speak(300)
        await client.send({"type": "input_audio_buffer.commit"})
        await client.send({"type": "response.create"})
        await client.until("response.done")
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        text = (await http.get("/metrics")).text
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples["omniduplex_sessions_admitted_total"] >= 1
    assert samples["omniduplex_appends_total"] >= 3
    assert samples['omniduplex_events_sent_total{type="response.done"}'] >= 1
    assert samples["omniduplex_reply_latency_seconds_count"] >= 1
