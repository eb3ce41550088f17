"""The one transition of a session's turn state and active response, and its admission."""

from __future__ import annotations

import pytest
from duplex_helpers import append, commit

from omniduplex.engine.duplex.session.context import Admission, AdmissionLimits
from omniduplex.engine.duplex.session.lease import DuplexLeaseState, LeaseConfig
from omniduplex.engine.duplex.session.state import (
    SIGNAL_STEPS,
    ActiveResponse,
    DuplexEngineSession,
    IllegalTurnTransition,
    TurnState,
    TurnStep,
)


def new_session() -> DuplexEngineSession:
    return DuplexEngineSession(
        session_id="duplex-test",
        settings=None,
        capabilities=None,  # type: ignore[arg-type]  # the transitions never read them
        lease=DuplexLeaseState(LeaseConfig(), last_activity=0.0),
        model_state=None,
    )


def new_response(response_id: str = "resp_1") -> ActiveResponse:
    return ActiveResponse(
        response_id=response_id,
        item_id=f"item_{response_id}",
        input_commit_seq=0,
        modalities=("audio",),
    )


def test_a_response_runs_from_start_through_audio_to_its_end() -> None:
    session = new_session()
    assert (session.turn_state, session.response) == (TurnState.IDLE, None)
    response = new_response()
    session.advance(TurnStep.RESPONSE_START, response)
    assert (session.turn_state, session.response) == (TurnState.ASSISTANT_GENERATING, response)
    session.advance(TurnStep.RESPONSE_AUDIO)
    assert session.turn_state is TurnState.ASSISTANT_PLAYING
    session.advance(TurnStep.RESPONSE_END)
    assert (session.turn_state, session.response) == (TurnState.IDLE, None)


def test_the_user_may_speak_and_commit_while_a_response_is_active() -> None:
    session = new_session()
    response = new_response()
    session.advance(TurnStep.RESPONSE_START, response)
    session.advance(TurnStep.USER_SPEECH)
    assert (session.turn_state, session.response) == (TurnState.USER_SPEAKING, response)
    session.advance(TurnStep.USER_COMMIT)
    assert (session.turn_state, session.response) == (TurnState.USER_COMMITTED, response)
    # More audio of the same response still plays.
    session.advance(TurnStep.RESPONSE_AUDIO)
    assert session.turn_state is TurnState.ASSISTANT_PLAYING


def test_a_cancel_advances_the_epoch_and_reports_barge_in_until_the_response_ends() -> None:
    session = new_session()
    session.advance(TurnStep.RESPONSE_START, new_response())
    assert session.advance_epoch() == 1
    assert session.turn_state is TurnState.BARGE_IN and session.response is not None
    session.advance(TurnStep.RESPONSE_END)
    assert (session.turn_state, session.response, session.epoch) == (TurnState.IDLE, None, 1)
    # A barge-in with nothing active only advances the epoch.
    session.advance_epoch()
    assert (session.turn_state, session.epoch) == (TurnState.BARGE_IN, 2)


def test_abandoning_drops_the_response_and_keeps_the_turn_state() -> None:
    session = new_session()
    session.advance(TurnStep.RESPONSE_START, new_response())
    session.advance(TurnStep.RESPONSE_AUDIO)
    session.advance(TurnStep.RESPONSE_ABANDON)
    assert (session.turn_state, session.response) == (TurnState.ASSISTANT_PLAYING, None)
    session.advance(TurnStep.RESPONSE_ABANDON)  # nothing active: still allowed (closing)
    assert session.response is None


@pytest.mark.parametrize(
    ("event", "state"),
    [
        ("user_started", TurnState.USER_SPEAKING),
        ("user_committed", TurnState.USER_COMMITTED),
        ("assistant_started", TurnState.ASSISTANT_GENERATING),
        ("assistant_done", TurnState.IDLE),
    ],
)
def test_a_client_signal_relabels_the_turn_state_and_never_touches_the_response(
    event: str, state: TurnState
) -> None:
    session = new_session()
    session.advance(SIGNAL_STEPS[event])
    assert (session.turn_state, session.response) == (state, None)
    response = new_response()
    session.advance(TurnStep.RESPONSE_START, response)
    session.advance(SIGNAL_STEPS[event])
    assert (session.turn_state, session.response) == (state, response)


def test_only_the_four_relabelling_signals_have_steps() -> None:
    assert set(SIGNAL_STEPS) == {
        "user_started",
        "user_committed",
        "assistant_started",
        "assistant_done",
    }


def test_a_second_response_cannot_start_while_one_is_active() -> None:
    session = new_session()
    first = new_response("resp_1")
    session.advance(TurnStep.RESPONSE_START, first)
    with pytest.raises(IllegalTurnTransition, match="response resp_1 active"):
        session.advance(TurnStep.RESPONSE_START, new_response("resp_2"))
    assert (session.turn_state, session.response) == (TurnState.ASSISTANT_GENERATING, first)


@pytest.mark.parametrize("step", [TurnStep.RESPONSE_AUDIO, TurnStep.RESPONSE_END])
def test_response_steps_need_an_active_response(step: TurnStep) -> None:
    session = new_session()
    with pytest.raises(IllegalTurnTransition, match="no response active") as raised:
        session.advance(step)
    assert (raised.value.step, raised.value.state) == (step, TurnState.IDLE)
    assert session.turn_state is TurnState.IDLE


def test_only_a_start_carries_a_response() -> None:
    session = new_session()
    with pytest.raises(IllegalTurnTransition):
        session.advance(TurnStep.RESPONSE_START)
    with pytest.raises(IllegalTurnTransition):
        session.advance(TurnStep.USER_SPEECH, new_response())
    assert (session.turn_state, session.response) == (TurnState.IDLE, None)


def test_admission_reserves_up_to_its_limits_and_releases_once_per_command() -> None:
    session = new_session()
    admission = Admission(session, AdmissionLimits(max_pending_input_bytes=10, max_pending_turns=1))
    six = append(b"\x00" * 6)
    assert admission.reserve(six) is None
    assert admission.reserve(append(b"\x00" * 6)) == (
        "Duplex session has too many pending input bytes"
    )
    assert session.reserved_input_bytes == 6
    first = commit()
    assert admission.reserve(first) is None
    assert admission.reserve(commit()) == "Duplex session has too many pending input turns"
    assert session.pending_turns == 1
    admission.release(six)
    admission.release(first)
    assert (session.reserved_input_bytes, session.pending_turns) == (0, 0)
    admission.release(first)  # never below zero
    assert session.pending_turns == 0
