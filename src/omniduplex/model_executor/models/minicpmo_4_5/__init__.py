"""``minicpmo_4_5``: OpenBMB MiniCPM-o 4.5 served through its own duplex API.

Upstream's transformers remote code (``trust_remote_code=True`` from a local checkpoint)
ships ``MiniCPMO.as_duplex() -> MiniCPMODuplex``: one instance holds one conversation and
is driven one 1 s unit at a time (``streaming_prefill`` then ``streaming_generate``), with
a break event to interrupt it and a stop event to end it. ``stage.py`` drives those calls
on the stage worker; ``plugin.py`` maps their results onto the session's responses;
``upstream.py`` is the one place that touches torch, CUDA and the remote code.

Nothing is imported here: the plugin must load without torch, the stage model with it.
"""

__all__: list[str] = []
