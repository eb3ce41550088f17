"""A test double of the turn-completion model (Smart Turn), for the end-of-turn rule.

A neural score on synthesized audio moves with the CPU, the onnxruntime version and the
voice's sampling noise (Smart Turn scored one piper question 0.05 here and 0.76 on a
fresh machine), so tests of what ``semantic_vad`` does *given* a score inject the score
through the ``TurnCompletionModel`` seam; the real model's part is tested on its own,
with margins, over several renderings.
"""

from __future__ import annotations

import numpy as np

from omniduplex.engine.duplex.vad import TurnCompletionModel

SOUNDS_FINISHED = 0.9  # well above the completion threshold (0.5)
SOUNDS_UNFINISHED = 0.1  # well below it


class ScriptedTurnModelDouble(TurnCompletionModel):
    """Test double of Smart Turn: the k-th candidate pause scores ``scores[k]`` (the last
    score repeats), and each call's audio length is recorded (``heard_ms``)."""

    name = "scripted-turn-double"

    def __init__(self, *scores: float) -> None:
        if not scores:
            raise ValueError("give at least one score")
        self.scores = scores
        self.heard_ms: list[int] = []

    def completion_probability(self, audio: np.ndarray, rate_hz: int) -> float:
        self.heard_ms.append(int(np.asarray(audio).size * 1000 // rate_hz))
        return self.scores[min(len(self.heard_ms), len(self.scores)) - 1]
