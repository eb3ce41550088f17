"""A minimal WebSocket echo server (the ``--floor-echo`` transport floor).

``python -m omniduplex.bench.echo [PORT]`` prints ``PORT <n>`` once listening.
"""

from __future__ import annotations

import asyncio
import sys

from websockets.asyncio.server import ServerConnection, serve


async def _echo(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(message)


async def main(port: int = 0) -> None:
    async with serve(_echo, "127.0.0.1", port, max_size=None, compression=None) as server:
        bound = next(iter(server.sockets)).getsockname()[1]
        print(f"PORT {bound}", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
