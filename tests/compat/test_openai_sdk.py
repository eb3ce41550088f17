"""The ``openai`` SDK's Realtime client (GA and beta) holds a whole spoken conversation
with loopback and the default cascade and never sees an error event.

Both dialects and both ways of taking turns (server VAD, and manual commits with
``response.create`` / ``response.cancel``) are covered, one pairing each here; the
compatibility table (``benchmarks/client_compat.py``) runs all four.
"""

from __future__ import annotations

import pytest

from client_compat import openai_sdk
from client_compat.report import Target


@pytest.mark.parametrize(
    ("dialect", "turns"), [("ga", "server_vad"), ("beta", "manual")], ids=["ga-vad", "beta-manual"]
)
async def test_openai_sdk_conversation(target: Target, dialect: str, turns: str) -> None:
    report = await openai_sdk.run_conversation(target, dialect=dialect, turns=turns)  # type: ignore[arg-type]
    assert report.ok, report.summary()
