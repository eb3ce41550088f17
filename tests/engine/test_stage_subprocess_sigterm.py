"""A stage's worker process and SIGTERM: one sent to the whole process group (systemd's
stop, a container stop) is the server's to act on, so the worker waits for its parent's
stop; one sent by the parent itself still ends it at once."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from worker_events import WorkerEvents

from omniduplex.engine.stage import AddRequest, StageInput, StageModelSpec, SubprocessStageWorker

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "sigwaitinfo"), reason="the child tells who sent a SIGTERM by sigwaitinfo"
)


def _worker(events: WorkerEvents) -> SubprocessStageWorker:
    spec = StageModelSpec("stage_models:StepRecorder", {})
    return SubprocessStageWorker(1, spec, max_batch=4, on_event=events, name="p")


def _round_trip(worker: SubprocessStageWorker, events: WorkerEvents, request_id: str) -> None:
    worker.submit(AddRequest(request_id, StageInput({"text": request_id}, final=True)))
    events.wait_finished(request_id)


def test_a_sigterm_from_another_process_waits_for_the_parents_stop() -> None:
    events = WorkerEvents()
    worker = _worker(events)
    worker.start()
    try:
        worker.wait_ready(30)
        _round_trip(worker, events, "before")
        # Sent by a process that is not the worker's parent, as killpg from systemd is.
        subprocess.run(
            [sys.executable, "-c", f"import os, signal; os.kill({worker.pid}, signal.SIGTERM)"],
            check=True,
        )
        _round_trip(worker, events, "after")  # still serving
        assert worker.alive and not events.deaths()
    finally:
        worker.stop()
    assert not events.deaths()  # stopped by its parent: an expected exit, not a death


def test_the_parents_own_sigterm_ends_the_worker() -> None:
    events = WorkerEvents()
    worker = _worker(events)
    worker.start()
    try:
        worker.wait_ready(30)
        assert worker.pid is not None
        # What stop() does to a child that will not stop, and multiprocessing at exit.
        worker._process.terminate()
        events.wait_for(lambda _: bool(events.deaths()), timeout=30)
        (death,) = events.deaths()
        assert "killed by SIGTERM" in death.reason
    finally:
        worker.stop()
