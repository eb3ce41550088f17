"""``personaplex``: NVIDIA PersonaPlex / Kyutai Moshi as model-native duplex sessions.

80 ms lockstep at 24 kHz: each tick Mimi encodes every live session's input frame, the
LM samples its text stream and agent codebooks, Mimi decodes the agent frame; all live
sessions of a worker share one batched step (see ``stage.py``). ``personaplex-tiny``
builds a tiny random LM + Mimi from the ``moshi`` constructors for CPU tests.

Nothing is imported here: the plugin must load without torch, the stage model with it.
"""

__all__: list[str] = []
