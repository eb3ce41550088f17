"""The session object our clients open PersonaPlex sessions with.

PersonaPlex listens and speaks on its own (model-native duplex, 80 ms frames at 24 kHz):
no turn detection, no commits, no ``response.create``. The persona is the session's
``instructions`` and the voice names a voice prompt of the deployment.
"""

from __future__ import annotations

from typing import Any

from .session_base import duplex_session, merge_overrides

__all__ = ["PERSONAPLEX_RATE_HZ", "create_duplex_session_config"]

#: PersonaPlex consumes and produces 24 kHz audio; streaming at that rate skips resampling.
PERSONAPLEX_RATE_HZ = 24_000


def create_duplex_session_config(
    *, voice: str | None = None, persona: str = "", **overrides: Any
) -> dict[str, Any]:
    """``pcm_f32le`` in at 24 kHz, PCM16 out at 24 kHz, ``voice`` and persona set.

    ``voice`` names a voice prompt of the deployment (``NATF2`` for ``NATF2.wav`` in its
    ``voice_prompt_dir``); ``None`` uses the deployment's ``default_voice``.

    Sampling knobs go in ``extra_body`` overrides: ``temperature_text``, ``top_k``,
    ``top_k_text`` and ``seed`` (the session-level ``temperature`` is the audio one).
    """
    base: dict[str, Any] = {
        "audio": {
            "input": {"format": {"type": "pcm_f32le", "rate": PERSONAPLEX_RATE_HZ}},
        },
        "voice": voice,
        "instructions": persona,
        # The model opens its own responses; a commit never asks for one.
        "extra_body": {"auto_response": False},
    }
    session = duplex_session(
        input_rate_hz=PERSONAPLEX_RATE_HZ, output_rate_hz=PERSONAPLEX_RATE_HZ, **base
    )
    return merge_overrides(session, overrides)
