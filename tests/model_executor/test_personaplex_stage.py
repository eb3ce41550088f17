"""The PersonaPlex stage model on the tiny random LM + Mimi: batching, isolation, pacing.

Needs torch and moshi (skipped without them). Every test drives the real stepping code
(Mimi encode, LM step, Mimi decode) through the ``StageModel`` API, with ``realtime``
off (ticks as inputs arrive), so nothing depends on wall time; real-time pacing is in
``test_personaplex_pacing.py``.
"""

from __future__ import annotations

import functools
import os
import wave
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("NO_TORCH_COMPILE", "1")  # before moshi is imported
pytest.importorskip("torch")
pytest.importorskip("moshi")

from omniduplex.engine.duplex.contracts import DuplexFence, stage_request_id
from omniduplex.engine.stage import AddRequest, StageInput, StageScheduler
from omniduplex.model_executor.models.personaplex.options import FRAME_SAMPLES
from omniduplex.model_executor.models.personaplex.stage import (
    PersonaPlexStageModel,
)


def make(**options: object) -> PersonaPlexStageModel:
    # One intra-op thread: tiny ops, and CI machines are small and shared.
    return PersonaPlexStageModel(torch_threads=1, **options)


def rid(session: str, epoch: int = 0) -> str:
    return stage_request_id(DuplexFence(session, epoch), "stage0")


def frames(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(FRAME_SAMPLES)).astype(np.float32) for _ in range(count)]


def unit(audio: np.ndarray, **config: object) -> StageInput:
    data: dict[str, object] = {"audio": audio}
    if config:
        data["config"] = config
    return StageInput(data)


def drain(model: PersonaPlexStageModel) -> list:
    outputs = []
    while ready := model.ready_request_ids():
        outputs += model.step(ready)
    return outputs


@pytest.fixture(scope="module")
def counted_model():
    """One tiny model whose temporal forward calls are counted (tests reuse its slots)."""
    model = make(slots=4, realtime=False, listen_hangover_frames=2)
    calls = {"n": 0, "rows": []}
    forward = model.models.lm.forward_text

    def counting(sequence, *args, **kwargs):
        calls["n"] += 1
        calls["rows"].append(sequence.shape[0])
        return forward(sequence, *args, **kwargs)

    model.models.lm.forward_text = counting
    model.calls = calls
    return model


def test_one_step_serves_every_live_session_with_one_forward_pass(counted_model) -> None:
    model = counted_model
    sessions = [f"batch-{i}" for i in range(3)]
    inputs = {s: frames(i, 12) for i, s in enumerate(sessions)}
    for s in sessions:
        model.add_request(rid(s), unit(inputs[s][0], seed=1))
    before_calls, before_steps = model.calls["n"], model.stats.forward_calls
    outputs = []
    for t in range(1, 12):
        outputs += drain(model)
        for s in sessions:
            model.update_request(rid(s), unit(inputs[s][t]))
    outputs += drain(model)
    steps = model.stats.forward_calls - before_steps
    # 12 prompt (silence) frames + 12 live frames per session, all in lockstep.
    assert steps == 24
    assert model.calls["n"] - before_calls == steps  # one forward pass per tick ...
    assert set(model.calls["rows"]) == {4}  # ... over the whole slot table
    assert model.stats.batch_sizes[3] >= steps
    assert {o.request_id for o in outputs} <= {rid(s) for s in sessions}
    for o in outputs:
        assert o.data["kind"] == "frame"
        assert o.data["audio"].shape == (FRAME_SAMPLES,)
        assert o.data["audio"].dtype == np.float32
    for s in sessions:
        model.abort(rid(s))
    assert model.live_request_ids == ()


@functools.cache
def _session_a(neighbour: bool) -> list:
    model = make(slots=4, realtime=False, listen_hangover_frames=2)
    a, b = rid("a"), rid("b")
    fa, fb = frames(1, 32), frames(2, 32)
    out = []
    for t in range(32):
        if t == 0:
            model.add_request(a, unit(fa[0], seed=7, temperature=0.9))
        else:
            model.update_request(a, unit(fa[t]))
        if neighbour and t == 9:
            model.add_request(b, unit(fb[0], seed=9, persona="hello"))
        elif neighbour and 9 < t < 24:
            model.update_request(b, unit(fb[t]))
        elif neighbour and t == 24:
            model.abort(b)
        out += [o for o in drain(model) if o.request_id == a]
    model.close()
    return out


def test_a_neighbour_joining_and_leaving_mid_stream_changes_nothing_for_a_session() -> None:
    alone, with_neighbour = _session_a(False), _session_a(True)
    assert alone, "the tiny model said nothing in 32 frames"
    assert [o.data["phase"] for o in alone] == [o.data["phase"] for o in with_neighbour]
    for x, y in zip(alone, with_neighbour, strict=True):
        assert x.data["text"] == y.data["text"]
        assert np.array_equal(x.data["audio"], y.data["audio"])


def test_a_recycled_slot_behaves_like_a_fresh_table() -> None:
    def run(model: PersonaPlexStageModel, session: str) -> list:
        fs = frames(3, 20)
        model.add_request(rid(session), unit(fs[0], seed=3))
        out = []
        for t in range(1, 20):
            out += drain(model)
            model.update_request(rid(session), unit(fs[t]))
        out += drain(model)
        model.abort(rid(session))
        return [(o.data["phase"], o.data["text"], o.data["audio"].tobytes()) for o in out]

    fresh = make(slots=2, realtime=False)
    reference = run(fresh, "first")
    assert run(fresh, "second") == reference  # same slot, previous occupant gone


def test_turn_state_yields_well_formed_speak_listen_stretches() -> None:
    phases = [o.data["phase"] for o in _session_a(False)]
    assert phases[0] == "speak"
    speaking = False
    for phase in phases:
        if phase == "speak":
            assert not speaking
            speaking = True
        else:
            assert speaking
            speaking = phase != "listen"
    assert "listen" in phases


def test_a_queue_past_its_bound_drops_the_oldest_frames() -> None:
    model = make(slots=1, realtime=False, max_queued_frames=3)
    model.add_request(rid("q"), unit(frames(1, 1)[0]))
    for f in frames(2, 5):
        model.update_request(rid("q"), unit(f))
    assert model.stats.dropped_frames == 3
    model.close()


def test_a_new_epoch_takes_the_slot_over_and_finishes_the_old_request() -> None:
    model = make(slots=1, realtime=False)
    old, new = rid("e", 0), rid("e", 1)
    model.add_request(old, unit(frames(1, 1)[0], seed=1))
    drain(model)
    model.add_request(new, unit(frames(2, 1)[0], seed=1))  # no second slot needed
    outputs = drain(model)
    superseded = [o for o in outputs if o.request_id == old]
    assert len(superseded) == 1 and superseded[0].finished
    assert superseded[0].data == {"kind": "superseded"}
    assert model.live_request_ids == (new,)
    model.abort(old)  # late abort of the superseded id: a no-op
    assert model.live_request_ids == (new,)
    model.close()


def test_a_full_table_refuses_a_session_through_the_scheduler() -> None:
    model = make(slots=1, realtime=False)
    emitted = []
    scheduler = StageScheduler(model, stage_index=0, max_batch=1, emit=emitted.extend)
    scheduler.handle(AddRequest(rid("one"), unit(frames(1, 1)[0])))
    scheduler.handle(AddRequest(rid("two"), unit(frames(2, 1)[0])))
    assert [o.request_id for o in emitted] == [rid("two")]
    assert "slots are busy" in emitted[0].error
    assert scheduler.in_flight == (rid("one"),)
    model.close()


def test_greedy_sampling_ignores_the_seed_and_prompts_delay_live_output(tmp_path: Path) -> None:
    voice = tmp_path / "TESTV.wav"
    t = np.arange(FRAME_SAMPLES * 5) / 24_000
    pcm = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2")
    with wave.open(str(voice), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24_000)
        w.writeframes(pcm.tobytes())

    def first_live_step(seed: int) -> tuple[int, list]:
        model = make(
            slots=1, realtime=False, voice_prompt_dir=str(tmp_path), prompt_silence_frames=2
        )
        config = {"seed": seed, "temperature": 0.0, "temperature_text": 0.0, "voice": "TESTV"}
        model.add_request(rid("g"), unit(np.zeros(FRAME_SAMPLES, np.float32), **config))
        steps_to_first = None
        out = []
        for _ in range(30):
            got = drain(model)
            out += got
            if got and steps_to_first is None:
                steps_to_first = model.stats.forward_calls
            model.update_request(rid("g"), unit(np.zeros(FRAME_SAMPLES, np.float32)))
        model.close()
        return steps_to_first or 0, [(o.data["text"], o.data["audio"].tobytes()) for o in out]

    steps, greedy_one = first_live_step(1)
    _, greedy_two = first_live_step(2)
    assert greedy_one == greedy_two  # temperature 0: argmax, whatever the seed
    if greedy_one:
        # 5 voice frames + 2 silence + 2 silence, then the acoustic delay of one frame.
        assert steps >= 5 + 2 + 2 + 1
