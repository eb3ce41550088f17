"""User-facing entry points: the in-process Python APIs, the server and the CLI."""
