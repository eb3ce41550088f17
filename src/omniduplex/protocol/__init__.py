"""Sans-I/O wire codec: typed Realtime events and commands, audio formats, item rules.

``protocol.realtime`` is OpenAI's Realtime API (Tier 1). ``protocol.duplex`` adds our
extensions (Tier 2 twins and Tier 3 events/commands) and is the only door the engine,
the serving layer and the clients use. Nothing here imports the engine, the entrypoints,
the model executor or the clients.
"""
