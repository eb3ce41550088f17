"""Stage worker events reach the orchestrator loop in bursts: events posted while the loop
is busy wait for one wake-up and are handled in the order they were posted.

The loop is held busy by a callback that waits on an event the test sets, so the order of
what happens does not depend on timing. The delivery is observed, not replaced.
"""

from __future__ import annotations

import threading
from typing import Any

from duplex_helpers import deployment

from omniduplex.entrypoints.duplex_omni import DuplexOmni


async def test_events_posted_while_the_loop_is_busy_take_one_wake_up_in_order() -> None:
    async with DuplexOmni(deployment()) as omni:
        engine = omni.engine
        delivered: list[Any] = []
        wake_ups: list[int] = []
        done = threading.Event()
        deliver_one, deliver_burst = engine._deliver_worker_event, engine._deliver_worker_events

        def one(event: Any) -> None:
            if isinstance(event, str):
                delivered.append(event)
                if len(delivered) == 3:
                    done.set()
            else:
                deliver_one(event)

        def burst() -> None:
            wake_ups.append(len(engine._worker_events))
            deliver_burst()

        engine._deliver_worker_event, engine._deliver_worker_events = one, burst
        release = threading.Event()
        engine._loop.call_soon_threadsafe(release.wait, 10.0)  # the loop is busy until set
        for name in ("first", "second", "third"):
            engine._on_worker_event(name)
        release.set()
        assert done.wait(10.0)
    assert delivered == ["first", "second", "third"]
    assert wake_ups[0] == 3  # one wake-up carried all three
