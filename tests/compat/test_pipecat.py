"""Pipecat's ``OpenAIRealtimeLLMService`` in a pipeline without a transport (a source of
``InputAudioRawFrame`` s, a sink for what would be played) holds a whole spoken
conversation with loopback and the default cascade: the bot speaks first (``LLMRunFrame``
on an empty context: a bare ``response.create``), the user asks a question, the reply
plays, the user talks over it and that turn is answered, ``EndFrame`` closes it. With the
server's VAD (the service's default session properties, which leave turn detection to the
server's default; the realtime example's ``semantic_vad``; ``server_vad``) and with the
pipeline's own turn detection (``turn_detection=False`` + Silero VAD in the user
aggregator, whose first turn is an interruption with nothing playing). Pipecat ends the
session on any error but two OpenAI codes, so no ``ErrorFrame`` may appear.
"""

from __future__ import annotations

import pytest

from client_compat import pipecat
from client_compat.report import Target


@pytest.mark.parametrize("turn_detection", pipecat.FLOWS)
async def test_pipecat_conversation(target: Target, turn_detection: str) -> None:
    report = await pipecat.run_conversation(target, turn_detection=turn_detection)
    assert report.ok, report.summary()
