"""Sans-I/O wire codec: typed Realtime events and commands, audio formats, item rules.

``protocol.realtime`` is OpenAI's Realtime API (Tier 1). ``protocol.duplex`` adds our
extensions (Tier 2 twins and Tier 3 events/commands) and is the only door to it the
engine, the serving layer and the clients use. ``protocol.chat_completions`` is OpenAI's
chat completions format as a duplex deployment serves it, for the chat route. Nothing
here imports the engine, the entrypoints, the model executor or the clients.
"""
