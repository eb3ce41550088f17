"""A stage worker that dies ends the sessions whose requests it held; others go on."""

from __future__ import annotations

import dataclasses
import os
import signal

from duplex_helpers import EventReader, append, commit, is_type, response_done, sine_pcm16

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni


def paced_subprocess_deployment():
    pipeline = load_deploy_config("loopback")
    stage = dataclasses.replace(pipeline.stages[0], worker="process")
    return dataclasses.replace(pipeline, stages=(stage,))


async def test_worker_death_closes_the_sessions_it_served():
    async with DuplexOmni(paced_subprocess_deployment()) as omni:
        busy = await omni.open_session()
        idle = await omni.open_session()
        busy_events = EventReader(busy)
        idle_events = EventReader(idle)
        await idle_events.next()

        busy.submit(append(sine_pcm16(3000)))
        busy.submit(commit())
        await busy_events.until(is_type("response.output_audio.delta"))
        pid = omni.engine.stages[0].worker.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

        rest = await busy_events.rest()
        types = [e.type for e in rest]
        assert types[-1] == "session.closed"
        assert rest[-1].reason == "stage_worker_died"
        errors = [e for e in rest if e.type == "error"]
        assert errors and errors[0].code == "stage_worker_died"

        # The idle session held nothing on the dead worker: it is served by the new one.
        idle.submit(append(sine_pcm16(300)))
        idle.submit(commit())
        done = (await idle_events.until(response_done()))[-1]
        assert done.response["status"] == "completed"
