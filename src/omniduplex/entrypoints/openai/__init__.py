"""The OpenAI-compatible HTTP and WebSocket server."""
