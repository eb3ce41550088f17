"""OpenAI's Realtime API as a sans-I/O codec (Tier 1).

Consumers outside ``omniduplex.protocol`` import ``omniduplex.protocol.duplex`` instead,
which re-exports what they need from here.
"""
