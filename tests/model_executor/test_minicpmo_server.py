"""``minicpmo-4.5`` through the real engine and the real WebSocket route, its upstream
``MiniCPMODuplex`` replaced by ``MiniCPMODuplexDouble`` (which raises on any breach of
the upstream contract). Each test feeds input one unit at a time and waits for the stage
to have stepped it, so what the double answers is deterministic; waits are hang guards.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from minicpmo_server import (
    URL_QUERY,
    check_lifecycles,
    data_url,
    double_of,
    f32,
    factory_of,
    pipeline_with_double,
    send_unit,
    serve,
    stage_model,
    voice_wav,
    wait_for,
)
from PIL import Image
from server_harness import wire

from omniduplex.clients.minicpmo_4_5 import create_duplex_session_config
from omniduplex.model_executor.models.minicpmo_4_5 import stage as stage_module

UNIT_TAIL = 16_000  # the client's own second of a unit (the first has 35 ms of pad first)
SPEAK_THEN_LISTEN = ["L", "L", "S:Hello", "S: there,", "E: friend."]


async def open_session(client, *, opens: bool = False, **overrides) -> dict:
    """``opens``: the connection autostarts nothing, so this update opens the session
    (what ``ref_audio`` needs: it is set only when the session opens)."""
    session = create_duplex_session_config(**overrides)
    if opens:
        await client.send({"type": "session.update", "session": session})
        created = await client.recv()
        assert created["type"] == "session.created", created
        return created
    created = await client.recv()
    assert created["type"] == "session.created"
    await client.send({"type": "session.update", "session": session})
    assert (await client.recv())["type"] == "session.updated"
    return created


async def feed_units(
    client, factory, count: int, *, level: float = 0.05, double_index: int = -1
) -> None:
    """Send ``count`` units, each once the model has answered the one before
    (``double_index``: which conversation of the factory's answers them)."""

    def answered() -> int:
        if len(factory.opened) <= max(double_index, 0):
            return 0
        return double_of(factory, double_index).generates

    for _ in range(count):
        wanted = answered() + 1
        await send_unit(client, level)
        await wait_for(
            lambda wanted=wanted: answered() == wanted, factory, "the unit's streaming_generate"
        )


async def listen_then_speak(server) -> list[dict]:
    """A session listens for two units, then speaks one three-unit turn; returns its events."""
    factory = factory_of(server)
    async with wire(server.ws_url + URL_QUERY) as client:
        await open_session(client, instructions="Be brief.")
        await feed_units(client, factory, 2)
        double = double_of(factory)
        assert double.prefills == 2 and double.generates == 2
        await feed_units(client, factory, 3)
        events = await client.until("response.done")
        await client.send({"type": "session.close"})
        await client.until("session.closed")
    assert not factory.violations
    return events


@pytest.fixture
def server(tmp_path):
    with serve(pipeline_with_double(tmp_path, SPEAK_THEN_LISTEN)) as running:
        yield running


async def test_a_session_listens_then_speaks_with_well_formed_lifecycles(server) -> None:
    events = await listen_then_speak(server)
    (response,) = check_lifecycles(events)
    # While the model listened nothing of a response reached the wire.
    first = next(i for i, e in enumerate(events) if e["type"].startswith("response."))
    assert events[first]["type"] == "response.created"
    kinds = [e["type"] for e in response]
    assert kinds[-1] == "response.done" and "response.listen" in kinds
    assert response[-1]["response"]["status"] == "completed"
    transcript = "".join(
        e["delta"] for e in response if e["type"] == "response.output_audio_transcript.delta"
    )
    assert transcript == "Hello there, friend."
    audio = b"".join(
        base64.b64decode(e["delta"]) for e in response if e["type"] == "response.output_audio.delta"
    )
    assert len(audio) == 3 * 24_000 * 2  # three 1 s units of 24 kHz PCM16, nothing more
    # Nothing reached the wire while the model listened: the first event of a response
    # came after the double's third unit.
    factory = factory_of(server)
    double = double_of(factory)
    assert [c.method for c in double.calls[:1]] == ["prepare"]
    assert "Be brief." in double.prepared["prefix"]
    assert double.prepared["prompt_wav_path"].endswith("house.wav")
    # 1035 ms first, then 1000 ms, the first second of input behind 35 ms of silence.
    sizes = [a.size for a in double.prefill_audio]
    assert sizes == [16_560] + [16_000] * 4
    assert np.all(double.prefill_audio[0][:560] == 0)
    assert np.allclose(double.prefill_audio[0][560:], 0.05)
    # The deployment's sampling defaults (upstream's, but top_k 20 as OpenBMB's demo
    # runs it), and the model stepped off the event loop.
    assert double.generate_kwargs[0] == {
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
        "listen_prob_scale": 1.0,
        "max_new_speak_tokens_per_chunk": 20,
    }
    assert double.settings["force_listen_count"] == 0
    # session.close stopped the model session and handed the conversation back.
    assert double.is_session_stop_set()
    assert factory.released == [double]
    assert stage_model(server).live_request_ids == ()


async def test_the_double_catches_a_plugin_that_breaks_the_upstream_contract(
    server, monkeypatch
) -> None:
    # The deliberate violation: the first unit without upstream's 35 ms (1000 ms, not 1035).
    monkeypatch.setattr(stage_module, "FIRST_UNIT_PAD_SAMPLES", 0)
    with pytest.raises(AssertionError, match="upstream contract violated"):
        await listen_then_speak(server)
    assert factory_of(server).violations == [
        "unit 0 has 16000 samples; upstream needs 16560 (1035 ms first, then 1000 ms)"
    ]


async def test_barge_in_sets_the_break_event_within_one_unit_and_fences_the_old_response(
    tmp_path,
) -> None:
    script = ["L", "S:one", "S: two", "S: three", "E: four.", "L", "S:again", "E: done."]
    with serve(pipeline_with_double(tmp_path, script)) as server:
        factory = factory_of(server)
        async with wire(server.ws_url + URL_QUERY) as client:
            await open_session(client)
            await feed_units(client, factory, 3)  # listen, "one", " two": speaking
            events = await client.until("response.output_audio.delta")
            first = next(e for e in events if e["type"] == "response.created")["response"]["id"]
            double = double_of(factory)
            assert double.break_set_at == []
            await client.send({"type": "barge_in", "event_id": "evt_barge"})
            events += await client.until("response.done")
            assert events[-1]["response"]["id"] == first
            assert events[-1]["response"]["status"] == "cancelled"
            # The next unit after the barge-in: the break event was set before it was
            # prefilled (and cleared again, or the double would have raised).
            await feed_units(client, factory, 1)
            assert double.break_set_at == [3]
            methods = [c.method for c in double.calls]
            brk = methods.index("set_break_event")
            assert methods[brk : brk + 3] == [
                "set_break_event",
                "clear_break_event",
                "streaming_prefill",
            ]
            # The rest of the interrupted turn (" three", " four.") is muted; the model's
            # next turn is a new response.
            await feed_units(client, factory, 4)
            events += await client.until("response.done")
            await client.send({"type": "session.close"})
            events += await client.until("session.closed")
    assert not factory.violations
    old, new = check_lifecycles(events)  # nothing of the old response after its done
    assert old[0]["response"]["id"] == first
    assert old[-1]["response"]["status"] == "cancelled"
    assert new[0]["response"]["id"] != first
    transcript = "".join(
        e["delta"] for e in new if e["type"] == "response.output_audio_transcript.delta"
    )
    assert transcript == "again done."
    assert len(factory.opened) == 1  # one conversation across the epochs


async def test_two_sessions_never_share_an_upstream_instance(tmp_path) -> None:
    with serve(pipeline_with_double(tmp_path, SPEAK_THEN_LISTEN)) as server:
        factory = factory_of(server)
        async with (
            wire(server.ws_url + URL_QUERY) as alice,
            wire(server.ws_url + URL_QUERY + "&autostart=0") as bob,
        ):
            await open_session(alice, instructions="You are Alice's.")
            await open_session(
                bob, opens=True, instructions="You are Bob's.", ref_audio=data_url(voice_wav(2.0))
            )
            await feed_units(alice, factory, 1, level=0.1, double_index=0)
            await feed_units(bob, factory, 1, level=0.2, double_index=1)
            for _ in range(3):  # interleaved
                await feed_units(alice, factory, 1, level=0.1, double_index=0)
                await feed_units(bob, factory, 1, level=0.2, double_index=1)
            for client in (alice, bob):
                await client.send({"type": "session.close"})
                await client.until("session.closed")
    assert not factory.violations
    (slot_a, a), (slot_b, b) = factory.opened
    assert a is not b and slot_a != slot_b
    assert "Alice" in a.prepared["prefix"] and "Bob" not in a.prepared["prefix"]
    assert "Bob" in b.prepared["prefix"] and "Alice" not in b.prepared["prefix"]
    assert all(np.allclose(unit[-UNIT_TAIL:], 0.1) for unit in a.prefill_audio)
    assert all(np.allclose(unit[-UNIT_TAIL:], 0.2) for unit in b.prefill_audio)
    assert a.prefills == b.prefills == 4
    # Bob's own voice: 2 s resampled to 16 kHz, and a WAV of it for token2wav.
    assert b.prepared["ref_audio_samples"] == 32_000
    assert not b.prepared["prompt_wav_path"].endswith("house.wav")
    assert factory.released == [a, b] or factory.released == [b, a]


async def test_per_session_sampling_reaches_the_model(server) -> None:
    factory = factory_of(server)
    async with wire(server.ws_url + URL_QUERY) as client:
        await open_session(
            client,
            temperature=0.5,
            extra_body={
                "top_k": 5,
                "top_p": 0.9,
                "listen_prob_scale": 1.5,
                "force_listen_count": 3,
            },
        )
        await feed_units(client, factory, 4)
        await client.send({"type": "session.close"})
        await client.until("session.closed")
    double = double_of(factory)
    assert double.settings["force_listen_count"] == 3
    assert double.generate_kwargs[-1] == {
        "temperature": 0.5,
        "top_k": 5,
        "top_p": 0.9,
        "listen_prob_scale": 1.5,
        "max_new_speak_tokens_per_chunk": 20,
    }
    assert not factory.violations


async def test_bad_sampling_voice_and_video_frames_get_typed_errors(server) -> None:
    async with wire(server.ws_url + URL_QUERY) as client:
        await client.recv()
        for session, param in (
            ({"extra_body": {"top_p": 1.5}}, "top_p"),
            ({"extra_body": {"force_listen_count": -1}}, "force_listen_count"),
            ({"voice": "../etc/passwd"}, "voice"),
        ):
            await client.send({"type": "session.update", "session": session})
            error = await client.recv()
            assert error["type"] == "error", error
            assert error["error"]["type"] == "invalid_request_error", error
            assert error["error"]["param"] == param
        frame = base64.b64encode(b"\xff\xd8\xff\xe0 not really a jpeg").decode()
        await client.send(
            {
                "type": "input_audio_buffer.append",
                "audio": "AAAAAA==",
                "video_frames": [frame],
            }
        )
        error = await client.recv()
        assert error["type"] == "error"
        # A JPEG signature with no image behind it: the model decodes frames on arrival.
        assert error["error"]["code"] == "invalid_video_frames"
        assert error["error"]["param"] == "video_frames"
        assert error["error"]["type"] == "invalid_request_error"
        await client.send({"type": "session.close"})


def image_bytes(fmt: str, color: tuple[int, int, int], size: tuple[int, int] = (6, 4)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, fmt)
    return buffer.getvalue()


async def test_images_reach_upstream_as_pil_frames_of_the_next_unit_in_order(server) -> None:
    factory = factory_of(server)
    png = base64.b64encode(image_bytes("PNG", (250, 0, 0))).decode()
    jpeg = base64.b64encode(image_bytes("JPEG", (0, 0, 250), (8, 8))).decode()
    async with wire(server.ws_url + URL_QUERY) as client:
        created = await open_session(client)
        assert created["session"]["capabilities"]["supports_image_input"] is True
        await feed_units(client, factory, 1)
        await client.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_image", "image_url": f"data:image/png;base64,{png}"}
                    ],
                },
            }
        )
        done = (await client.until(("conversation.item.done", "error")))[-1]
        assert done["type"] == "conversation.item.done", done
        # The echo keeps the part as the client sent it, as OpenAI's does.
        assert done["item"]["content"][0]["type"] == "input_image"
        await feed_units(client, factory, 1)
        # A camera frame rides its own append (bare base64, wire.md 5.7).
        await client.send(
            {
                "type": "input_audio_buffer.append",
                "audio": f32(np.full(UNIT_TAIL, 0.05, np.float32)),
                "video_frames": [jpeg],
            }
        )
        double = double_of(factory)
        await wait_for(lambda: double.generates == 3, factory, "the frame's unit")
        await feed_units(client, factory, 1)
        frames = double.prefill_frames
        await client.send({"type": "session.close"})
    # Each image came with the unit after it, before that unit's audio (upstream feeds
    # frame_list first), and only there.
    assert [len(unit) for unit in frames] == [0, 1, 1, 0]
    shown, seen = frames[1][0], frames[2][0]
    assert (shown.mode, shown.size, shown.getpixel((0, 0))) == ("RGB", (6, 4), (250, 0, 0))
    assert (seen.mode, seen.size) == ("RGB", (8, 8))
    assert seen.getpixel((4, 4))[2] > 200  # JPEG is lossy: still blue
    assert not factory.violations


async def test_an_unreadable_image_is_refused_and_never_reaches_the_model(server) -> None:
    factory = factory_of(server)
    broken = base64.b64encode(image_bytes("PNG", (1, 2, 3))[:40]).decode()  # cut short
    async with wire(server.ws_url + URL_QUERY) as client:
        await open_session(client)
        await client.send(
            {
                "type": "conversation.item.create",
                "event_id": "evt_broken",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_image", "image_url": f"data:image/png;base64,{broken}"}
                    ],
                },
            }
        )
        error = await client.recv()
        assert error["type"] == "error", error
        assert error["error"]["code"] == "invalid_image"
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["param"] == "item.content[0].image_url"
        assert error["error"]["event_id"] == "evt_broken"
        await feed_units(client, factory, 2)
        assert double_of(factory).prefill_frames == [[], []]
        await client.send({"type": "session.close"})
    assert not factory.violations


async def test_history_holds_at_most_eight_images(server) -> None:
    png = base64.b64encode(image_bytes("PNG", (5, 5, 5))).decode()

    def item() -> dict:
        part = {"type": "input_image", "image_url": f"data:image/png;base64,{png}"}
        return {"type": "message", "role": "user", "content": [part]}

    async with wire(server.ws_url + URL_QUERY) as client:
        await open_session(client)
        for _ in range(8):
            await client.send({"type": "conversation.item.create", "item": item()})
            done = (await client.until(("conversation.item.done", "error")))[-1]
            assert done["type"] == "conversation.item.done", done
        await client.send({"type": "conversation.item.create", "item": item()})
        error = await client.recv()
        assert error["type"] == "error", error
        assert error["error"]["code"] == "input_backpressure"
        assert error["error"]["type"] == "rate_limit_error"
        assert error["error"]["param"] == "item.content[0]"
        # Deleting an image item makes room again.
        await client.send({"type": "conversation.item.delete", "item_id": done["item"]["id"]})
        assert (await client.recv())["type"] == "conversation.item.deleted"
        await client.send({"type": "conversation.item.create", "item": item()})
        done = (await client.until(("conversation.item.done", "error")))[-1]
        assert done["type"] == "conversation.item.done", done
        await client.send({"type": "session.close"})
