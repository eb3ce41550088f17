"""``personaplex-tiny`` behind the real server: streaming, model-driven turns, batching.

Needs torch and moshi (skipped without them). The tiny random model says noise, but the
stepping code is the real one: 80 ms ticks of Mimi encode -> LM -> Mimi decode over every
live session of the worker. Assertions are on structure (units, lifecycles, ordering,
counts), never on what the random model says or on wall-clock latency.

``server`` is the deployment as shipped (the stage in a process of its own); the tests
that read the stage model's own state use ``thread_server``, the same deployment with
``worker: thread`` so the model lives in this process.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

os.environ.setdefault("NO_TORCH_COMPILE", "1")  # before moshi is imported
pytest.importorskip("torch")
pytest.importorskip("moshi")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoints" / "openai"))

import httpx
from server_harness import TIMEOUT_S, WireClient, run_app, run_server, wire
from websockets.asyncio.client import connect

from omniduplex.clients.personaplex import create_duplex_session_config
from omniduplex.config import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.entrypoints.openai.api_server import build_app

FRAME = 1920  # 80 ms at 24 kHz
URL_QUERY = "?model=personaplex-tiny&duplex=1"  # reads the listen/speak decisions


@pytest.fixture(scope="module")
def server():
    with run_server("personaplex-tiny") as running:
        yield running


@pytest.fixture(scope="module")
def thread_server():
    pipeline = load_deploy_config("personaplex-tiny")
    stage = dataclasses.replace(pipeline.stages[0], worker="thread")
    pipeline = dataclasses.replace(pipeline, stages=(stage,))
    app = build_app(DuplexOmni(pipeline), model_name="personaplex-tiny")
    with run_app(app) as running:
        yield running


def stage_model(server) -> Any:
    return server.app.state.omni.engine.stages[0].worker.model


def f32(frame: np.ndarray) -> str:
    return base64.b64encode(frame.astype("<f4").tobytes()).decode()


async def open_session(client, *, seed: int, **overrides: Any) -> dict[str, Any]:
    created = await client.recv()
    assert created["type"] == "session.created"
    config = create_duplex_session_config(persona="", extra_body={"seed": seed}, **overrides)
    await client.send({"type": "session.update", "session": config})
    assert (await client.recv())["type"] == "session.updated"
    return created


async def stream(client, frames: int, *, seed: int, every_s: float = 0.08, silent=False) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(frames):
        frame = np.zeros(FRAME, np.float32) if silent else 0.1 * rng.standard_normal(FRAME)
        await client.send({"type": "input_audio_buffer.append", "audio": f32(frame)})
        await asyncio.sleep(every_s)


async def collect(client, seconds: float, *, until_done: int = 0) -> list[dict[str, Any]]:
    """Events for ``seconds`` (or until ``until_done`` response.done events)."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            event = await asyncio.wait_for(client.ws.recv(), deadline - time.monotonic())
        except TimeoutError:
            break
        events.append(orjson.loads(event))
        if until_done and sum(e["type"] == "response.done" for e in events) >= until_done:
            break
    return events


def check_lifecycles(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Every response: created, speak, deltas, listen, done(completed); nothing outside.

    Only the last response may be open (cut by the window); its events keep that order.
    """
    responses: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] | None = None
    for event in events:
        kind = event["type"]
        if kind == "response.created":
            assert current is None, "a response opened inside another"
            current = [event]
            responses.append(current)
        elif kind in ("response.output_audio.delta", "response.speak", "response.done"):
            assert current is not None, f"{kind} outside a response"
            current.append(event)
            if kind == "response.done":
                current = None
        elif kind == "response.listen":
            assert current is not None
            current.append(event)
    for response in responses:
        kinds = [e["type"] for e in response]
        rid = response[0]["response"]["id"]
        # The collecting window may close anywhere in the last response, even between
        # its first events, so what it holds of that one is checked as a prefix.
        if len(kinds) > 1:
            assert kinds[1] == "response.speak"  # the model decided to speak, first
        if "response.output_audio.delta" in kinds:
            assert kinds.index("response.speak") < kinds.index("response.output_audio.delta")
        if "response.done" in kinds:
            done = response[-1]
            assert done["response"]["status"] == "completed"
            assert kinds[-2] == "response.listen"  # ... and decided to listen, last
            assert response[-2]["response_id"] == rid
        for e in response[1:]:
            assert e.get("response_id", e.get("response", {}).get("id")) == rid
    return responses


async def test_a_session_hears_the_model_in_80ms_units_with_model_driven_turns(server) -> None:
    async with wire(server.ws_url + URL_QUERY) as client:
        await open_session(client, seed=11)
        sender = asyncio.create_task(stream(client, 60, seed=1))
        events = await collect(client, 12.0, until_done=2)
        sender.cancel()
        await client.send({"type": "session.close"})
    responses = check_lifecycles(events)
    assert sum("response.done" in [e["type"] for e in r] for r in responses) >= 1
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    assert deltas
    for delta in deltas:  # PCM16 at 24 kHz, one 80 ms model frame per delta
        assert len(base64.b64decode(delta["delta"])) == FRAME * 2
    transcript = [e for e in events if e["type"] == "response.output_audio_transcript.delta"]
    words = "".join(e["delta"] for e in transcript).split()
    assert all(w.startswith("w") for w in words)  # the tiny model's synthetic text stream


async def test_barge_in_and_resume_get_their_documented_refusals(server) -> None:
    async with wire(server.ws_url + URL_QUERY) as client:
        created = await open_session(client, seed=3)
        caps = created["session"]["capabilities"]
        assert caps["supports_barge_in"] is False
        assert caps["supports_session_resume"] is False
        assert caps["implementation_level"] == "model_native_duplex"
        assert caps["chunk_period_ms"] == 80
        assert "resume_token" not in created["session"]
        await client.send({"type": "barge_in", "event_id": "evt_b"})
        error = await client.recv()
        assert error["type"] == "error"
        assert error["error"]["code"] == "barge_in_unsupported"
        await client.send({"type": "session.resume", "event_id": "evt_r"})
        error = await client.recv()
        assert error["error"]["code"] == "unsupported_session_resume"
        session_id = created["session"]["id"]
        async with wire(server.ws_url + "?resume=1") as other:
            await other.send(
                {
                    "type": "session.resume",
                    "session_id": session_id,
                    "resume_token": "not-a-token",
                    "last_received_server_event_seq": 0,
                }
            )
            refused = await asyncio.wait_for(other.recv(), TIMEOUT_S)
            assert refused["type"] == "error"
            assert refused["error"]["code"] == "unsupported_session_resume"
        await client.send({"type": "session.close"})


async def test_slow_vanished_and_silent_clients_never_stall_the_tick(thread_server) -> None:
    server = thread_server
    model = stage_model(server)
    stats = model.stats
    async with (
        wire(server.ws_url + URL_QUERY) as good,
        wire(server.ws_url + URL_QUERY) as slow,
        wire(server.ws_url + URL_QUERY) as silent,
    ):
        for seed, client in enumerate((good, slow, silent)):
            await open_session(client, seed=seed)
        vanished = WireClient(await connect(server.ws_url + URL_QUERY, max_size=None))
        await open_session(vanished, seed=9)
        await stream(vanished, 3, seed=9, every_s=0.0)
        vanished.ws.transport.abort()  # gone: no close frame, no session.close
        calls_before = stats.forward_calls
        starved_before = stats.starved_frames
        started = time.monotonic()
        tasks = [
            asyncio.create_task(stream(good, 30, seed=1)),
            asyncio.create_task(stream(slow, 6, seed=2, every_s=0.4)),
            asyncio.create_task(stream(silent, 30, seed=3, silent=True)),
        ]
        good_events = await collect(good, 3.0)
        for task in tasks:
            task.cancel()
        # A tick paced by the slow client would stop at its 12 prompt and 6 slow frames;
        # one that goes on gets past them, later on a loaded machine (so no fixed window).
        for _ in range(400):
            if stats.forward_calls - calls_before > 12 + 6:
                break
            await asyncio.sleep(0.05)
        elapsed = time.monotonic() - started
        for client in (good, slow, silent):
            await client.send({"type": "session.close"})
            await client.until("session.closed")
    ticks = stats.forward_calls - calls_before
    assert elapsed > 0
    # The tick went on without the slow client's input (it got silence instead), more
    # often than its 12 prompt frames and 6 slow frames could have paced it, while the
    # vanished client sent nothing at all.
    assert stats.starved_frames > starved_before
    assert ticks > 12 + 6
    assert stats.max_batch_size >= 3  # one step served the sessions together
    check_lifecycles(good_events)
    for _ in range(100):  # every slot frees, the vanished client's too
        if not model.live_request_ids:
            break
        await asyncio.sleep(0.05)
    assert model.live_request_ids == ()


async def test_a_cancelled_response_keeps_the_conversation_and_its_slot(thread_server) -> None:
    server = thread_server
    model = stage_model(server)
    async with wire(server.ws_url + URL_QUERY) as client:
        await open_session(client, seed=21)
        sender = asyncio.create_task(stream(client, 120, seed=4))
        await client.until("response.output_audio.delta")
        await client.send({"type": "response.cancel"})
        done = (await client.until("response.done"))[-1]
        assert done["response"]["status"] == "cancelled"
        # The model goes on talking in the same slot; its next stretch is a new response.
        events = await collect(client, 10.0, until_done=1)
        sender.cancel()
        assert any(e["type"] == "response.created" for e in events)
        assert len(model.live_request_ids) == 1  # the new epoch took the slot over
        await client.send({"type": "session.close"})
        await client.until("session.closed")
    check_lifecycles(events)
    for _ in range(100):  # the slot frees once the close has finished its cleanup
        if not model.live_request_ids:
            break
        await asyncio.sleep(0.05)
    assert model.live_request_ids == ()


async def test_the_shipped_stage_steps_in_its_own_process_and_exports_its_counters(
    server,
) -> None:
    worker = server.app.state.omni.engine.stages[0].worker
    assert worker.pid is not None and worker.pid != os.getpid()
    async with wire(server.ws_url + URL_QUERY) as client:
        await open_session(client, seed=5)
        # Streams from its first frame: what it sends during the prompt is dropped.
        sender = asyncio.create_task(stream(client, 40, seed=5))
        await collect(client, 2.5)
        sender.cancel()
        await client.send({"type": "session.close"})
        await client.until("session.closed")
    counters: dict[str, float] = {}
    async with httpx.AsyncClient() as http:
        for _ in range(100):  # the worker reports at most every 0.5 s
            text = (await http.get(server.http_url + "/metrics")).text
            counters = {
                line.split("{")[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("omniduplex_stage_") and 'stage="personaplex"' in line
            }
            if counters.get("omniduplex_stage_input_frames_total", 0) >= 10:
                break
            await asyncio.sleep(0.05)
    assert counters["omniduplex_stage_ticks_total"] >= 12 + 10
    assert counters["omniduplex_stage_input_frames_total"] >= 10
    for name in (
        "catchup_ticks",
        "input_stale_frames",
        "input_starved_frames",
        "prompt_input_dropped_frames",
        "input_late_dropped_frames",
        "step_seconds",
    ):
        assert f"omniduplex_stage_{name}_total" in counters
