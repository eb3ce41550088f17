"""Where a link's batches go: each to its connection, in order.

One link (``link.py``) carries the batches of many connections: ``BatchRoutes`` hands each batch to
its connection's queue, in order, and a link that fails hands its failure to every
connection still open on it. ``QueuedConnection`` is a ``ReplicaConnection`` that reads
its queue; ``RefusedConnection`` is the tunnel of a replica known to be down.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from .frontend import ReplicaConnection, ReplicaUnavailable
from .tunnel import OutboundBatch

BatchQueue = asyncio.Queue[OutboundBatch | ReplicaUnavailable]


class BatchRoutes:
    """The open connections of one link, by id, each with its queue of batches."""

    def __init__(self) -> None:
        self.failure: ReplicaUnavailable | None = None
        self._queues: dict[str, BatchQueue] = {}

    def open(self, conn_id: str) -> BatchQueue:
        """The queue of a new connection (holding the failure, if the link has failed)."""
        queue: BatchQueue = asyncio.Queue()
        if self.failure is not None:
            queue.put_nowait(self.failure)
        else:
            self._queues[conn_id] = queue
        return queue

    def route(self, items: list[tuple[str, OutboundBatch]]) -> None:
        for conn_id, batch in items:
            queue = self._queues.get(conn_id)
            if queue is None:
                continue
            queue.put_nowait(batch)
            if batch.final:
                del self._queues[conn_id]

    def fail(self, failure: ReplicaUnavailable) -> None:
        self.failure = failure
        queues, self._queues = self._queues, {}
        for queue in queues.values():
            queue.put_nowait(failure)


class QueuedConnection(ReplicaConnection):
    """A connection whose batches arrive on its ``BatchRoutes`` queue."""

    def __init__(self, conn_id: str, queue: BatchQueue) -> None:
        self.conn_id = conn_id
        self.queue = queue

    async def batches(self) -> AsyncIterator[OutboundBatch]:
        while True:
            item = await self.queue.get()
            if isinstance(item, ReplicaUnavailable):
                raise item
            yield item
            if item.final:
                return


class RefusedConnection(ReplicaConnection):
    """The tunnel of a replica known to be down: every call raises its failure."""

    def __init__(self, failure: ReplicaUnavailable) -> None:
        self.failure = failure

    async def batches(self) -> AsyncIterator[OutboundBatch]:
        raise self.failure
        yield  # an async generator that fails on its first step

    async def send(self, frames: list[str | bytes], acked: int = 0) -> None:
        raise self.failure

    def ack(self, size: int) -> None:
        pass

    def disconnect(self, code: int) -> None:
        pass


__all__ = ["BatchQueue", "BatchRoutes", "QueuedConnection", "RefusedConnection"]
