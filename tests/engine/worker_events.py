"""Collects a stage worker's events (delivered on the worker's thread) for a test."""

from __future__ import annotations

import threading
from collections.abc import Callable

from omniduplex.engine.stage import StageOutput, WorkerDied


class WorkerEvents:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.events: list[object] = []

    def __call__(self, event: object) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[list[object]], bool], timeout: float = 10.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self.events), timeout):
                raise AssertionError(f"timed out; events so far: {self.events}")

    def outputs(self, request_id: str | None = None) -> list[StageOutput]:
        with self._cond:
            return [
                e
                for e in self.events
                if isinstance(e, StageOutput) and request_id in (None, e.request_id)
            ]

    def finished(self, request_id: str) -> bool:
        return any(o.finished for o in self.outputs(request_id))

    def wait_finished(self, *request_ids: str, timeout: float = 10.0) -> None:
        self.wait_for(lambda _: all(self.finished(r) for r in request_ids), timeout)

    def deaths(self) -> list[WorkerDied]:
        with self._cond:
            return [e for e in self.events if isinstance(e, WorkerDied)]
