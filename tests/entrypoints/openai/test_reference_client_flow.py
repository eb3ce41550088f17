"""The reference implementation's own DuplexClient flow, over the wire (issue 12, 5-7).

It dials ``?duplex=1&model=M&autostart=0``, sends ``session.update`` with its payload (a
16 kHz input declared at the top level and under ``audio.input``, ``turn_detection: null``,
``extra_body.auto_response: true``), streams audio, and ends each turn with a commit whose
``response_create`` is false, waiting for the automatic ``response.created``.
"""

from __future__ import annotations

from typing import Any

import pytest
from server_harness import b64, run_server, sine_pcm16, wire

IN_RATE = 16_000
OUT_RATE = 24_000


@pytest.fixture(scope="module")
def server():
    with run_server("loopback-fast") as running:
        yield running


def reference_payload(**overrides: Any) -> dict[str, Any]:
    """``SessionConfig.to_session_payload`` of the reference client (serving.md 6.1)."""
    payload = {
        "model": "loopback",
        "modalities": ["audio", "text"],
        "input_audio_format": "pcm16",
        "output_audio_format": "pcm16",
        "sample_rate_hz": IN_RATE,
        "audio": {"input": {"sample_rate_hz": IN_RATE}, "output": {"sample_rate_hz": OUT_RATE}},
        "turn_detection": None,
        "extra_body": {"auto_response": True},
    }
    payload.update(overrides)
    return payload


async def _turn(client: Any, ms: int, *, rate: int | None = None, **commit: Any) -> list[dict]:
    """Stream ``ms`` of a tone at 16 kHz in appends that state no rate (or ``rate``)."""
    pcm = sine_pcm16(ms, rate=IN_RATE)
    step = IN_RATE * 2 // 10
    for i in range(0, len(pcm), step):
        append = {"type": "input_audio_buffer.append", "audio": b64(pcm[i : i + step])}
        if rate is not None:
            append["sample_rate_hz"] = rate
        await client.send(append)
    await client.send({"type": "input_audio_buffer.commit", "final": True, **commit})
    return await client.until(("response.done", "error"))


def _reply_ms(events: list[dict]) -> float:
    import base64

    samples = sum(
        len(base64.b64decode(e["delta"])) // 2
        for e in events
        if e["type"] == "response.output_audio.delta"
    )
    return samples * 1000 / OUT_RATE


async def test_autostart_0_opens_with_the_first_session_update(server) -> None:
    async with wire(server.ws_url + "?duplex=1&model=loopback&autostart=0") as client:
        await client.send({"type": "session.update", "session": reference_payload()})
        created = await client.recv()
        assert created["type"] == "session.created"
        assert created["resume_token"]  # a duplex session, resumable


@pytest.mark.parametrize(
    "declared",
    [
        {"sample_rate_hz": IN_RATE},
        {"audio": {"input": {"sample_rate_hz": IN_RATE}}, "sample_rate_hz": None},
        {
            "sample_rate_hz": None,
            "input_audio_format": None,
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": IN_RATE}}},
        },
    ],
    ids=["top-level", "audio.input", "ga-format-rate"],
)
async def test_declared_input_rate_applies_to_appends_without_a_rate(server, declared) -> None:
    payload = {k: v for k, v in reference_payload(**declared).items() if v is not None}
    async with wire(server.ws_url + "?duplex=1&model=loopback&autostart=0") as client:
        await client.send({"type": "session.update", "session": payload})
        created = await client.recv()
        session = created["session"]
        assert session["audio"]["input"]["sample_rate_hz"] == IN_RATE  # the rate in force
        events = await _turn(client, 1000)
        assert events[-1]["type"] == "response.done"
        # loopback answers with as much audio as it heard: 1 s read at 16 kHz, not 0.67 s
        assert _reply_ms(events) == pytest.approx(1000, abs=60)


async def test_an_append_that_states_its_rate_keeps_it(server) -> None:
    async with wire(server.ws_url + "?duplex=1&model=loopback&autostart=0") as client:
        await client.send({"type": "session.update", "session": reference_payload()})
        await client.recv()
        pcm = sine_pcm16(1000, rate=OUT_RATE)
        await client.send(
            {"type": "input_audio_buffer.append", "audio": b64(pcm), "sample_rate_hz": OUT_RATE}
        )
        await client.send({"type": "input_audio_buffer.commit", "response_create": False})
        events = await client.until(("response.done", "error"))
        assert _reply_ms(events) == pytest.approx(1000, abs=60)


async def test_auto_response_answers_a_commit_that_asks_for_no_response(server) -> None:
    """The reference barge-in example: ``auto_response: true`` wins over the commit's
    ``response_create: false``."""
    async with wire(server.ws_url + "?duplex=1&model=loopback&autostart=0") as client:
        await client.send({"type": "session.update", "session": reference_payload()})
        await client.recv()
        events = await _turn(client, 600, response_create=False)
        types = [e["type"] for e in events]
        assert "response.created" in types and types[-1] == "response.done"
        assert "error" not in types


async def test_a_commit_can_still_opt_out_of_auto_response(server) -> None:
    async with wire(server.ws_url + "?duplex=1&model=loopback&autostart=0") as client:
        await client.send({"type": "session.update", "session": reference_payload()})
        await client.recv()
        pcm = sine_pcm16(600, rate=IN_RATE)
        await client.send({"type": "input_audio_buffer.append", "audio": b64(pcm)})
        await client.send({"type": "input_audio_buffer.commit", "auto_response": False})
        committed = await client.until("input_audio_buffer.committed")
        await client.send({"type": "session.heartbeat"})
        rest = await client.until("session.heartbeat_ack")
        assert "response.created" not in [e["type"] for e in committed + rest]
        # the turn is kept: a later response.create answers it
        await client.send({"type": "response.create"})
        events = await client.until("response.done")
        assert _reply_ms(events) == pytest.approx(600, abs=60)


async def test_without_auto_response_a_stock_commit_waits_for_response_create(server) -> None:
    async with wire(server.ws_url + "?model=loopback") as client:
        await client.recv()
        update = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
        await client.send({"type": "session.update", "session": update})
        await client.until("session.updated")
        pcm = sine_pcm16(400, rate=24_000)
        await client.send({"type": "input_audio_buffer.append", "audio": b64(pcm)})
        await client.send({"type": "input_audio_buffer.commit"})
        committed = await client.until("input_audio_buffer.committed")
        assert "response.created" not in [e["type"] for e in committed]
        await client.send({"type": "response.create"})
        events = await client.until("response.done")
        assert [e["type"] for e in events].count("response.created") == 1
