"""omniduplex: serve full-duplex speech models over the OpenAI Realtime API."""

__version__ = "0.1.0"
