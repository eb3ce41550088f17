"""The engine: stage workers, the orchestrator and the engine facades.

Kept empty on purpose: importing ``omniduplex.engine`` must stay cheap and must not pull
in any duplex module (the turn-based stack is importable on its own).
"""
