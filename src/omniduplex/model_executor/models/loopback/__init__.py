"""``loopback``: the deterministic CPU reference model (see DESIGN.md, "Models").

It answers a committed utterance with the utterance reversed and pitch-shifted, in units
of ``unit_ms`` at real-time pace or as fast as possible. Tests and benchmarks use it to
exercise listen/speak, barge-in, resume and chat completions without a real model.
"""

# The plugin (plugin.py) is not imported here: a turn-based deployment loads the stage
# model through this package and must not pull in the duplex stack.
from .options import LoopbackOptions
from .stage import LoopbackStageModel, LoopbackStats

__all__ = ["LoopbackOptions", "LoopbackStageModel", "LoopbackStats"]
