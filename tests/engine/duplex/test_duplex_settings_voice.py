"""The voice is read from the flat (beta) and the nested GA spelling."""

from __future__ import annotations

from omniduplex.engine.duplex.settings import SessionSettings


def test_ga_nested_voice_is_read() -> None:
    settings = SessionSettings.from_realtime(
        {"type": "realtime", "audio": {"output": {"voice": "marin"}}}, served_model="m"
    )
    assert settings.voice == "marin"


def test_flat_voice_wins_over_nested() -> None:
    settings = SessionSettings.from_realtime(
        {"voice": "alloy", "audio": {"output": {"voice": "marin"}}}, served_model="m"
    )
    assert settings.voice == "alloy"
    assert settings.updated({"audio": {"output": {"voice": "cedar"}}}).voice == "cedar"
