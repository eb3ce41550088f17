"""LiveKit Agents' OpenAI Realtime plugin (``livekit-plugins-openai``), driven through
``RealtimeModel(base_url=...).session()`` without a room, holds a whole spoken conversation
with loopback and the default cascade: its default session (semantic VAD), the agent
speaking first (``generate_reply(instructions=...)``), a spoken question, the reply's audio
and transcript, ``interrupt`` + ``truncate`` at the played position, ``aclose``. Also with
``turn_detection=ServerVad(...)``, and the session ``AgentSession`` opens when it runs its
own turn detector (turn detection off, ``commit_audio`` + ``generate_reply``). The plugin
must surface no error.
"""

from __future__ import annotations

import pytest

from client_compat import livekit
from client_compat.report import Target


@pytest.mark.parametrize("turn_detection", livekit.FLOWS)
async def test_livekit_conversation(target: Target, turn_detection: str) -> None:
    report = await livekit.run_conversation(target, turn_detection=turn_detection)
    assert report.ok, report.summary()
