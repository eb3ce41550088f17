"""The latest counters each stage worker reported, kept monotonic across restarts."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from .messages import StageCounters


@dataclass(slots=True)
class _StageBook:
    generation: int = -1
    latest: dict[str, float] = field(default_factory=dict)
    # What earlier generations had counted when they were replaced.
    carried: dict[str, float] = field(default_factory=dict)


class StageCounterBook:
    """Written from worker threads, read by ``/metrics``; one lock keeps them apart.

    A restarted worker's model counts from zero: the totals add what the generations
    before it had reached, so an exported counter never goes down.
    """

    def __init__(self) -> None:
        self._books: dict[int, _StageBook] = {}
        self._lock = threading.Lock()

    def record(self, report: StageCounters) -> None:
        with self._lock:
            book = self._books.setdefault(report.stage_index, _StageBook())
            if report.worker_generation < book.generation:
                return  # a late report from a worker already replaced
            if report.worker_generation > book.generation:
                for name, value in book.latest.items():
                    book.carried[name] = book.carried.get(name, 0.0) + value
                book.generation = report.worker_generation
            book.latest = dict(report.counters)

    def totals(self, names: Mapping[int, str]) -> dict[str, dict[str, float]]:
        with self._lock:
            return {
                names.get(index, str(index)): {
                    name: book.carried.get(name, 0.0) + book.latest.get(name, 0.0)
                    for name in book.carried.keys() | book.latest.keys()
                }
                for index, book in self._books.items()
            }
