"""The session object our clients open MiniCPM-o 4.5 sessions with.

MiniCPM-o 4.5 listens and speaks on its own (model-native duplex, 1 s units, 16 kHz in,
24 kHz out): no turn detection, no commits, no ``response.create``. Its voice is a
reference clip: the deployment's ``voice`` by name, or the session's own ``ref_audio``
(a ``data:audio/wav;base64,...`` URL, set when the session opens). The instructions are
its system prompt, fixed once the first second of audio has reached the model.
"""

from __future__ import annotations

from typing import Any

from .session_base import duplex_session, merge_overrides

__all__ = ["MINICPMO_INPUT_RATE_HZ", "MINICPMO_OUTPUT_RATE_HZ", "create_duplex_session_config"]

#: The model hears 16 kHz; streaming at that rate skips resampling.
MINICPMO_INPUT_RATE_HZ = 16_000
#: Its speech is 24 kHz.
MINICPMO_OUTPUT_RATE_HZ = 24_000


def create_duplex_session_config(
    *,
    ref_audio: str | None = None,
    voice: str | None = None,
    instructions: str = "",
    **overrides: Any,
) -> dict[str, Any]:
    """``pcm_f32le`` in at 16 kHz, PCM16 out at 24 kHz, the voice and instructions set.

    ``extra_body`` carries the model's sampling: ``force_listen_count`` (0 here; the
    official demo uses 3), and, when given as overrides, ``top_k``, ``top_p`` and
    ``listen_prob_scale`` (the session-level ``temperature`` is the LLM's).
    ``overlap_policy: listen_only``: speech over the model's never cancels it on the
    server's initiative; the model hears it and decides (a client may still barge in).
    """
    base: dict[str, Any] = {
        "audio": {
            "input": {"format": {"type": "pcm_f32le", "rate": MINICPMO_INPUT_RATE_HZ}},
        },
        "voice": voice,
        "instructions": instructions,
        "overlap_policy": "listen_only",
        # The model opens its own responses; a commit never asks for one.
        "extra_body": {"auto_response": False, "force_listen_count": 0},
    }
    if ref_audio is not None:
        base["ref_audio"] = ref_audio
    session = duplex_session(
        input_rate_hz=MINICPMO_INPUT_RATE_HZ, output_rate_hz=MINICPMO_OUTPUT_RATE_HZ, **base
    )
    return merge_overrides(session, overrides)
