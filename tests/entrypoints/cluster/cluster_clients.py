"""A duplex client's session through a cluster front end, as every cluster test opens one."""

from __future__ import annotations

from typing import Any

from server_harness import wire


async def open_session(url: str) -> tuple[Any, Any, dict[str, Any]]:
    """A socket with the duplex extensions and a session the client takes turns on: the
    socket's context, the client, and its ``session.created``."""
    ctx = wire(url + "?duplex=1")
    client = await ctx.__aenter__()
    await client.send(
        {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}
    )
    created = await client.recv()
    assert created["type"] == "session.created", created
    return ctx, client, created


async def close_session(ctx: Any, client: Any) -> None:
    await client.send({"type": "session.close"})
    await client.until("session.closed")
    await ctx.__aexit__(None, None, None)
