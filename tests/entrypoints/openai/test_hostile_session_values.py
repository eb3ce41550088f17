"""Any value in any field of the session object, at open and on update, is the client's
fault: it is answered with ``invalid_request_error`` naming the field (or accepted),
never ``server_error``, never a traceback in the log, and the session goes on."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_harness import TIMEOUT_S, run_server
from websockets.asyncio.client import connect

SESSION_FIELDS = [
    "type",
    "model",
    "instructions",
    "voice",
    "modalities",
    "output_modalities",
    "input_audio_format",
    "output_audio_format",
    "input_audio_transcription",
    "input_audio_noise_reduction",
    "turn_detection",
    "tools",
    "tool_choice",
    "temperature",
    "max_response_output_tokens",
    "max_output_tokens",
    "speed",
    "tracing",
    "truncation",
    "include",
    "prompt",
    "idle_timeout_s",
    "ref_audio",
    "overlap_policy",
    "output_audio_pacing",
    "output_audio_lead",
    "extra_body",
    "audio",
]
EXTRA_FIELDS = [
    "auto_response",
    "overlap_policy",
    "output_audio_pacing",
    "overlap_short_ack_ms",
    "overlap_barge_in_ms",
    "output_audio_lead_ms",
    "output_audio_lead",
    "overlap_silence_rms",
    "backchannel_policy",
    "backchannel_max_ms",
    "ref_audio",
]
AUDIO_FIELDS = ["format", "turn_detection", "transcription", "noise_reduction", "voice", "speed"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "inf", "server_vad", "semantic_vad", "audio", "text", "pcm16"])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=6,
)
audio_side = st.dictionaries(st.sampled_from(AUDIO_FIELDS), values, max_size=3)
special = {
    "extra_body": st.dictionaries(st.sampled_from(EXTRA_FIELDS), values, max_size=3) | values,
    "audio": st.fixed_dictionaries({}, optional={"input": audio_side, "output": audio_side})
    | values,
    "turn_detection": st.dictionaries(
        st.sampled_from(["type", "threshold", "silence_duration_ms", "eagerness"]), values
    )
    | values,
}
sessions = st.dictionaries(st.sampled_from(SESSION_FIELDS), values, min_size=1, max_size=4).flatmap(
    lambda chosen: st.fixed_dictionaries(
        {
            key: special.get(key, values) if key in special else st.just(v)
            for key, v in chosen.items()
        }
    )
)


@pytest.fixture(scope="module")
def server():
    with run_server("loopback-fast") as running:
        yield running


def _check(events: list[dict[str, Any]]) -> None:
    for event in events:
        if event["type"] == "error":
            error = event["error"]
            assert error["type"] == "invalid_request_error", event
            assert error["code"] not in ("realtime_input_failed", "internal_error"), event


async def _read_until(ws: Any, done: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(TIMEOUT_S):
        async for raw in ws:
            event = orjson.loads(raw)
            events.append(event)
            if done(event):
                break
    return events


async def _at_open(url: str, session: dict[str, Any]) -> None:
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        # Either the session opens (and any refused field gets an error after it), or the
        # open is refused with one error and the socket closes.
        events = await _read_until(ws, lambda e: e["type"] in ("session.created", "error"))
        _check(events)
        if events[-1]["type"] == "session.created":
            await _close(ws)


async def _on_update(url: str, session: dict[str, Any]) -> None:
    async with connect(url) as ws:
        await _read_until(ws, lambda e: e["type"] == "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        # A cancel with nothing active is refused after the update is done: a fence.
        await ws.send(orjson.dumps({"type": "response.cancel"}).decode())
        events = await _read_until(
            ws, lambda e: e.get("error", {}).get("code") == "response_cancel_not_active"
        )
        _check(events)
        await _close(ws)


async def _close(ws: Any) -> None:
    """Close the session (a dropped socket would hold its slot for the disconnect grace)."""
    await ws.send(orjson.dumps({"type": "session.close"}).decode())
    _check(await _read_until(ws, lambda e: e["type"] == "session.closed"))


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(session=sessions)
def test_no_session_value_is_a_server_error(server, caplog, session) -> None:
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        asyncio.run(_at_open(server.ws_url, {**session, "model": "loopback"}))
        asyncio.run(_on_update(server.ws_url + "?model=loopback", session))
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert not tracebacks, tracebacks[0].getMessage()
