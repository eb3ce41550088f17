"""User-facing entry points: the in-process Python APIs, the server and the CLI.

The in-process API (``omni_base``, ``async_omni_base``, ``async_omni``, ``duplex_omni``,
``turn_responses``) is the engine's public face. Everything else here (the routes, the
Realtime connection, the CLI) only transports: it imports the engine through those
modules (``duplex_omni`` re-exports ``DuplexSessionError`` and ``OpenResult``), plus
``omniduplex.engine.errors``, and never model code
(``tests/entrypoints/test_import_boundary_serving.py``).
"""
