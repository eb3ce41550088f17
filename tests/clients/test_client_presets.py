"""Session presets: shape, overrides, and what the engine makes of them."""

from __future__ import annotations

from omniduplex.clients import InlineDuplexClient, duplex_session, loopback_session
from omniduplex.entrypoints.duplex_omni import DuplexOmni


def test_loopback_session_shape() -> None:
    s = loopback_session()
    assert s["extra_body"] == {"auto_response": True}
    assert s["playback_commit_policy"] == "ack_only"
    assert s["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 16_000}
    assert s["audio"]["input"]["turn_detection"] is None
    assert s["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24_000}


def test_overrides_merge_into_nested_objects_and_presets_are_fresh() -> None:
    s = loopback_session(extra_body={"pitch": 1}, playback_commit_policy="commit_all_on_done")
    assert s["extra_body"] == {"auto_response": True, "pitch": 1}
    assert s["playback_commit_policy"] == "commit_all_on_done"
    s["audio"]["input"]["format"]["rate"] = 8_000
    assert loopback_session()["audio"]["input"]["format"]["rate"] == 16_000
    assert duplex_session(input_rate_hz=24_000)["audio"]["input"]["format"]["rate"] == 24_000


async def test_the_engine_accepts_the_preset() -> None:
    async with (
        DuplexOmni("loopback-fast") as omni,
        await InlineDuplexClient.open(omni, loopback_session()) as client,
    ):
        info = client.session_info
        assert info is not None
        assert info["auto_response"] is True
        assert info["playback_commit_policy"] == "ack_only"
        assert info["audio"]["input"]["turn_detection"] is None
        assert info["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24_000}
