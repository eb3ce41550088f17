"""A stage model that fails on one input fails that response only; the session goes on."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from duplex_helpers import (
    EventReader,
    append,
    command,
    commit,
    deployment,
    response_done,
    sine_pcm16,
)

from omniduplex.config.pipeline import PipelineConfig, StageConfig
from omniduplex.engine.duplex_orchestrator import SessionRequestOwner
from omniduplex.engine.stage import StageOutput
from omniduplex.engine.stage.spec import StageModelSpec
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.model_executor.models.loopback import LoopbackStageModel

POISON = "POISON"


class PoisonSensitiveLoopback(LoopbackStageModel):
    """The real loopback model, except that its forward pass raises for a request whose
    text contains ``POISON`` (like a model that hits a bad token). No other change."""

    def step(self, request_ids: Sequence[str]) -> list[StageOutput]:
        for rid in request_ids:
            request = self._requests.get(rid)
            if request is not None and any(POISON in text for text in request.text):
                raise ValueError(f"poisoned input in {rid}")
        return super().step(request_ids)


def poison_deployment() -> PipelineConfig:
    base = deployment("loopback-fast", reaper_interval_s=3600)
    stage = base.stages[0]
    model = StageModelSpec(
        factory=f"{__name__}:PoisonSensitiveLoopback", kwargs=dict(stage.model.kwargs)
    )
    poisoned: StageConfig = dataclasses.replace(stage, model=model)
    return dataclasses.replace(base, name="loopback-poison", stages=(poisoned,))


def user_text(text: str) -> Any:
    return command(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            },
        }
    )


async def test_a_stage_fault_fails_the_response_and_the_same_session_serves_the_next_turn():
    async with DuplexOmni(poison_deployment()) as omni:
        victim = await omni.open_session()
        bystander = await omni.open_session()
        reader = EventReader(victim)
        side = EventReader(bystander)

        # The bystander's response may share a batch with the poisoned one.
        bystander.submit(append(sine_pcm16(1000)))
        bystander.submit(commit())
        victim.submit(user_text(f"say {POISON} now"))
        victim.submit(command({"type": "response.create"}))

        events = await reader.until(response_done())
        failed = events[-1]
        # Catches a fault that is swallowed (the response would hang, never done) or one
        # that ends it as "completed".
        assert failed.response["status"] == "failed", failed.response
        details = failed.response["status_details"]
        assert details["type"] == "failed"
        assert details["error"]["code"] == "model_backend_failed"
        assert "poisoned input" in details["error"]["message"]
        errors = [e for e in events if e.type == "error"]
        assert [e.code for e in errors] == ["model_backend_failed"]
        assert events.index(errors[0]) < len(events) - 1  # the error precedes the done
        created = next(e for e in events if e.type == "response.created")
        assert created.response_id == failed.response_id

        def held(orchestrator: Any, session_id: str) -> tuple[list[str], bool]:
            runner = orchestrator.manager.runners[session_id]
            owned = [
                rid
                for rid, state in orchestrator._requests.items()
                if isinstance(state.owner, SessionRequestOwner)
                and state.owner.session_id == session_id
            ]
            return owned, runner.session.response is None

        # The failed stage request is released and nothing is left active.
        assert await omni.engine.call(lambda o: held(o, victim.session_id)) == ([], True)

        # The SAME session completes a normal next turn. Catches a session left wedged by
        # the fault (a response still marked active, or the mailbox worker dead).
        victim.submit(append(sine_pcm16(400)))
        victim.submit(commit())
        events = await reader.until(response_done())
        done = events[-1]
        assert done.response["status"] == "completed"
        assert done.response_id != failed.response_id
        assert any(e.type == "response.output_audio.delta" for e in events)
        assert not [e for e in events if e.type == "error"]

        # A text turn without poison works too (the same stage path that failed).
        victim.submit(user_text("hello there"))
        victim.submit(command({"type": "response.create"}))
        done = (await reader.until(response_done()))[-1]
        assert done.response["status"] == "completed"

        # The bystander was never affected by the poisoned request.
        side_events = await side.until(response_done())
        assert side_events[-1].response["status"] == "completed"
        assert not [e for e in side_events if e.type == "error"]

        await victim.close()
        rest = await reader.rest()
        assert rest[-1].type == "session.closed"
        assert [e.epoch for e in reader.seen] == sorted(e.epoch for e in reader.seen)
