"""LoopbackStageModel driven directly: replies, listening, pacing, batching, abort."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from omniduplex.engine.stage import StageInput, StageOutput
from omniduplex.model_executor.models.loopback import LoopbackOptions, LoopbackStageModel

IN_RATE = 16_000
OUT_RATE = 24_000


def tone(seconds: float, hz: float = 300.0, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(round(seconds * IN_RATE)) / IN_RATE
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


@dataclass
class FakeClock:
    """Time that moves only when told (or when the model sleeps)."""

    now: float = 1000.0
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def fast_model(**settings: object) -> LoopbackStageModel:
    return LoopbackStageModel(realtime=False, **settings)


def respond(model: LoopbackStageModel, request_id: str, **data: object) -> None:
    model.add_request(request_id, StageInput(data={"response_id": f"resp-{request_id}", **data}))


def drain(model: LoopbackStageModel) -> list[StageOutput]:
    """Step until no request is left; every step gets every ready request."""
    outputs: list[StageOutput] = []
    for _ in range(10_000):
        ready = model.ready_request_ids()
        if not ready:
            break
        outputs.extend(model.step(ready))
    assert not model.ready_request_ids()
    return outputs


def test_speech_is_answered_in_units_with_one_end_of_turn() -> None:
    model = fast_model()
    model.stage_index = 2
    respond(model, "a", audio=tone(1.25))
    outputs = drain(model)

    # 1.25 s at 24 kHz is 30000 samples: 12 full 100 ms units and a half one.
    assert [len(o.data["audio"]) for o in outputs] == [2400] * 12 + [1200]
    assert all(o.data["kind"] == "audio" and o.data["audio"].dtype == np.float32 for o in outputs)
    assert [o.data["end_of_turn"] for o in outputs] == [False] * 12 + [True]
    assert [o.finished for o in outputs] == [False] * 12 + [True]
    assert {o.data["response_id"] for o in outputs} == {"resp-a"}
    assert {o.stage_index for o in outputs} == {2}
    assert [o.data["text"] for o in outputs[:4]] == ["loop ", "back ", "unit-3 ", "unit-4 "]
    assert outputs[-1].data["text"] == "unit-13"
    assert model.request_ids == ()


def test_reply_is_the_utterance_reversed_and_lower() -> None:
    model = fast_model(max_reply_ms=20_000)
    # Rising loudness: reversed, the reply must get quieter.
    utterance = tone(2.0) * np.linspace(0.1, 1.0, 2 * IN_RATE, dtype=np.float32)
    respond(model, "a", audio=utterance)
    reply = np.concatenate([o.data["audio"] for o in drain(model)])

    assert reply.size == 2 * OUT_RATE
    first, last = reply[: OUT_RATE // 2], reply[-OUT_RATE // 2 :]
    assert np.sqrt(np.mean(first**2)) > 2 * np.sqrt(np.mean(last**2))
    spectrum = np.abs(np.fft.rfft(reply[: OUT_RATE // 2]))
    peak_hz = np.argmax(spectrum) * OUT_RATE / (OUT_RATE // 2)
    assert peak_hz == pytest.approx(300 * 0.8, abs=4)  # default pitch_ratio 0.8


def test_same_input_gives_the_same_bytes() -> None:
    rng = np.random.default_rng(7)
    utterance = (0.2 * rng.standard_normal(IN_RATE)).astype(np.float32)
    replies = []
    for _ in range(2):
        model = fast_model()
        respond(model, "a", audio=utterance.tolist(), text=None)
        replies.append([(o.data["audio"].tobytes(), o.data["text"]) for o in drain(model)])
    assert replies[0] == replies[1]


@pytest.mark.parametrize(
    "audio",
    [np.zeros(IN_RATE, np.float32), 0.001 * tone(1.0), np.zeros(0, np.float32), None, []],
    ids=["zeros", "quiet", "empty", "none", "empty-list"],
)
def test_silence_without_text_listens(audio: object) -> None:
    model = fast_model()
    respond(model, "a", audio=audio)
    outputs = drain(model)
    assert len(outputs) == 1
    assert outputs[0].data == {
        "response_id": "resp-a",
        "kind": "listen",
        "reason": "silence_or_noise",
    }
    assert outputs[0].finished and outputs[0].error is None


def test_silence_rms_threshold_is_an_option() -> None:
    model = fast_model(silence_rms=0.5)
    respond(model, "a", audio=tone(1.0, amplitude=0.3))
    assert [o.data["kind"] for o in drain(model)] == ["listen"]


def test_reply_is_capped_at_max_reply_ms() -> None:
    model = fast_model(max_reply_ms=1_000)
    respond(model, "a", audio=tone(5.0))
    outputs = drain(model)
    assert len(outputs) == 10
    assert sum(len(o.data["audio"]) for o in outputs) == OUT_RATE


def test_unit_ms_sets_the_unit_size() -> None:
    model = fast_model(unit_ms=40)
    respond(model, "a", audio=tone(0.2))
    assert [len(o.data["audio"]) for o in drain(model)] == [960] * 5


def test_text_only_turn_echoes_the_text_one_word_per_unit() -> None:
    model = fast_model()
    respond(model, "a", text="hello there world")
    outputs = drain(model)
    assert [o.data["text"] for o in outputs] == ["hello ", "there ", "world"]
    assert all(o.data["kind"] == "audio" and len(o.data["audio"]) == 2400 for o in outputs)
    assert np.abs(outputs[0].data["audio"]).max() > 0.1  # audible, not silence
    assert outputs[-1].data["end_of_turn"] and outputs[-1].finished


def test_text_with_speech_spreads_the_words_over_the_audio() -> None:
    model = fast_model()
    respond(model, "a", audio=tone(1.0), text="one two three")
    outputs = drain(model)
    assert len(outputs) == 10
    assert "".join(o.data["text"] for o in outputs) == "one two three"
    assert outputs[0].data["text"] == "one "


def test_text_modality_only_yields_text_units() -> None:
    model = fast_model()
    respond(model, "a", text="just text", with_audio=False)
    outputs = drain(model)
    assert [o.data["kind"] for o in outputs] == ["text", "text"]
    assert all("audio" not in o.data for o in outputs)
    assert "".join(o.data["text"] for o in outputs) == "just text"


def test_audio_may_arrive_in_pieces_before_the_response() -> None:
    whole, pieces = fast_model(), fast_model()
    utterance = tone(0.6)
    respond(whole, "a", audio=utterance)
    pieces.add_request("a", StageInput(data={"audio": utterance[:4000]}))
    assert pieces.ready_request_ids() == []  # no response asked for yet
    pieces.update_request("a", StageInput(data={"audio": utterance[4000:]}, final=True))
    expected = [o.data["audio"].tobytes() for o in drain(whole)]
    assert [o.data["audio"].tobytes() for o in drain(pieces)] == expected


def test_one_request_is_one_response() -> None:
    model = fast_model()
    respond(model, "a", audio=tone(0.3))
    with pytest.raises(ValueError, match="already answering"):
        model.update_request("a", StageInput(data={"response_id": "again"}))
    with pytest.raises(KeyError):
        model.update_request("nobody", StageInput(data={}))


def test_bad_audio_becomes_an_error_output() -> None:
    model = fast_model()
    respond(model, "a", audio=np.zeros((2, 100), np.float32))
    respond(model, "b", audio=[0.1, float("nan")])
    outputs = drain(model)
    assert [(o.request_id, o.data["kind"], o.data["code"]) for o in outputs] == [
        ("a", "error", "loopback_bad_input"),
        ("b", "error", "loopback_bad_input"),
    ]
    assert all(o.finished and o.error for o in outputs)


def test_requests_are_stepped_together() -> None:
    model = fast_model()
    for rid, seconds in (("a", 0.5), ("b", 0.3), ("c", 0.3)):
        respond(model, rid, audio=tone(seconds))
    first = model.step(model.ready_request_ids())
    assert [o.request_id for o in first] == ["a", "b", "c"]
    drain(model)
    # Steps 1-3 carry all three requests, steps 4-5 only "a".
    assert model.stats.forward_calls == 5
    assert model.stats.batch_sizes == {3: 3, 1: 2}
    assert model.stats.max_batch_size == 3
    assert model.stats.units_emitted == 11


def test_step_advances_only_the_given_requests() -> None:
    model = fast_model()
    respond(model, "a", audio=tone(0.3))
    respond(model, "b", audio=tone(0.3))
    outputs = model.step(["b", "unknown"])
    assert [(o.request_id, o.data["unit_index"]) for o in outputs] == [("b", 0)]
    assert model.step(["a"])[0].data["unit_index"] == 0


def test_abort_drops_a_request_at_once() -> None:
    model = fast_model()
    respond(model, "a", audio=tone(0.5))
    respond(model, "b", audio=tone(0.5))
    model.step(model.ready_request_ids())
    model.abort("a")
    model.abort("never-added")  # unknown ids are ignored
    assert model.ready_request_ids() == ["b"]
    assert model.step(["a"]) == []
    assert {o.request_id for o in drain(model)} == {"b"}


def test_close_drops_everything() -> None:
    model = fast_model()
    respond(model, "a", audio=tone(0.5))
    model.close()
    assert model.ready_request_ids() == [] and model.wake_after_s() is None


def test_realtime_units_become_ready_one_unit_apart() -> None:
    clock = FakeClock()
    # 125 ms and its halves are exact binary fractions: no rounding at the deadlines.
    model = LoopbackStageModel(
        unit_ms=125, realtime=True, clock=clock, sleep=clock.sleep, pace_in_step=False
    )
    assert model.wake_after_s() is None
    respond(model, "a", audio=tone(0.375))
    clock.now += 0.0625
    respond(model, "b", audio=tone(0.375))

    assert model.ready_request_ids() == ["a", "b"]  # first units are due at once
    assert len(model.step(["a", "b"])) == 2
    assert model.ready_request_ids() == []
    assert model.wake_after_s() == 0.0625  # "a" at its start + 125 ms
    clock.now += 0.0625
    assert model.ready_request_ids() == ["a"]
    assert model.step(["a", "b"])[0].request_id == "a"  # "b" not due: not advanced
    clock.now += 0.25  # a late scheduler: units stay anchored to the start, no drift
    assert model.ready_request_ids() == ["a", "b"]
    assert [o.data["unit_index"] for o in model.step(["a", "b"])] == [2, 1]
    assert model.ready_request_ids() == ["b"]  # "b" owes unit 2, already due too
    assert clock.slept == []


def test_realtime_paces_inside_step_when_the_scheduler_cannot_wait() -> None:
    clock = FakeClock()
    model = LoopbackStageModel(realtime=True, clock=clock, sleep=clock.sleep, pace_in_step=True)
    respond(model, "a", audio=tone(0.3))
    outputs = drain(model)
    assert [o.data["unit_index"] for o in outputs] == [0, 1, 2]
    assert clock.slept == pytest.approx([0.1, 0.1])


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown loopback option"):
        LoopbackStageModel(unit_mss=100)
    with pytest.raises(ValueError, match="unit_ms"):
        LoopbackStageModel(unit_ms=0)
    with pytest.raises(ValueError, match="whole number"):
        LoopbackStageModel(unit_ms=1, output_rate_hz=22_050)
    with pytest.raises(ValueError, match="realtime"):
        LoopbackStageModel(realtime="yes")
    assert LoopbackStageModel(LoopbackOptions(unit_ms=20)).options.unit_samples == 480
