"""The duplex stack of the engine: sessions, their runner, the plugin contract.

Nothing in the turn-based stack imports this package.
"""
