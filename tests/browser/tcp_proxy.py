"""A TCP relay between the browser and the server, so a test can drop live sockets."""

from __future__ import annotations

import asyncio
import contextlib


class DroppableProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_port``; ``drop()`` kills every connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.server: asyncio.Server | None = None
        self.port = 0
        self.writers: set[asyncio.StreamWriter] = set()
        self.connections = 0
        self.dropped = 0

    async def __aenter__(self) -> DroppableProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.drop()
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self.writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self.writers -= {writer, up_writer}

    def drop(self) -> int:
        """Abort every relayed connection (both ends see a reset); how many were cut."""
        cut = 0
        for writer in list(self.writers):
            writer.transport.abort()
            cut += 1
        self.writers.clear()
        self.dropped += cut
        return cut
