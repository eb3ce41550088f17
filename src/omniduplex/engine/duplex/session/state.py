"""The state of one session: identity, input turn, active response, playback, ledgers.

Mutated only by the session's runner (and the parts it hands a ``SessionContext``) on
the orchestrator loop (single writer). The turn state and the active response change
together, through one transition function (``DuplexEngineSession.advance``).
"""

from __future__ import annotations

import enum
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..capabilities import DuplexCapabilities
from ..contracts import DuplexFence
from .arrival_jitter import ArrivalJitter
from .conversation import ConversationStore
from .idle_timeout import IdleWatch
from .lease import DuplexLeaseState

# ``response.usage`` counts one audio token per started stretch of this many ms.
AUDIO_TOKEN_MS = 100


class SessionState(enum.StrEnum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class TurnState(enum.StrEnum):
    """What the conversation did last, as the session object's ``turn_state`` and the
    ``turn.event`` echo report it. The user may speak while a response is active (overlap),
    so a user state does not say that no response is active: ``session.response`` does."""

    IDLE = "idle"
    USER_SPEAKING = "user_speaking"
    USER_COMMITTED = "user_committed"
    ASSISTANT_GENERATING = "assistant_generating"
    ASSISTANT_PLAYING = "assistant_playing"
    BARGE_IN = "barge_in"


class TurnStep(enum.Enum):
    """What happened, as the one transition function ``DuplexEngineSession.advance`` takes
    it. The ``SIGNAL_*`` steps are a client's ``turn.signal``: they relabel the turn state
    and never touch the response."""

    USER_SPEECH = "user_speech"
    USER_COMMIT = "user_commit"
    RESPONSE_START = "response_start"
    RESPONSE_AUDIO = "response_audio"
    RESPONSE_END = "response_end"
    # The session is closing: the response is dropped without terminal events.
    RESPONSE_ABANDON = "response_abandon"
    EPOCH_ADVANCED = "epoch_advanced"
    SIGNAL_USER_STARTED = "user_started"
    SIGNAL_USER_COMMITTED = "user_committed"
    SIGNAL_ASSISTANT_STARTED = "assistant_started"
    SIGNAL_ASSISTANT_DONE = "assistant_done"


class IllegalTurnTransition(RuntimeError):
    """A step that the session's response state does not allow (a bug in the runner)."""

    def __init__(self, step: TurnStep, state: TurnState, active: str | None) -> None:
        where = f"response {active} active" if active else "no response active"
        super().__init__(f"illegal turn step {step.value} in {state.value} with {where}")
        self.step = step
        self.state = state


class _Needs(enum.Enum):
    """What a step requires of the active response."""

    NONE_ACTIVE = "none_active"
    ACTIVE = "active"
    ANY = "any"


# step -> (what it requires of the active response, the turn state after it; None: kept)
_STEPS: dict[TurnStep, tuple[_Needs, TurnState | None]] = {
    TurnStep.USER_SPEECH: (_Needs.ANY, TurnState.USER_SPEAKING),
    TurnStep.USER_COMMIT: (_Needs.ANY, TurnState.USER_COMMITTED),
    TurnStep.RESPONSE_START: (_Needs.NONE_ACTIVE, TurnState.ASSISTANT_GENERATING),
    TurnStep.RESPONSE_AUDIO: (_Needs.ACTIVE, TurnState.ASSISTANT_PLAYING),
    TurnStep.RESPONSE_END: (_Needs.ACTIVE, TurnState.IDLE),
    TurnStep.RESPONSE_ABANDON: (_Needs.ANY, None),
    TurnStep.EPOCH_ADVANCED: (_Needs.ANY, TurnState.BARGE_IN),
    TurnStep.SIGNAL_USER_STARTED: (_Needs.ANY, TurnState.USER_SPEAKING),
    TurnStep.SIGNAL_USER_COMMITTED: (_Needs.ANY, TurnState.USER_COMMITTED),
    TurnStep.SIGNAL_ASSISTANT_STARTED: (_Needs.ANY, TurnState.ASSISTANT_GENERATING),
    TurnStep.SIGNAL_ASSISTANT_DONE: (_Needs.ANY, TurnState.IDLE),
}

# ``turn.signal`` events that move the turn state (others are echoed with it unchanged;
# ``barge_in`` is a barge-in command, not a relabel).
SIGNAL_STEPS: dict[str, TurnStep] = {
    step.value: step for step in _STEPS if step.name.startswith("SIGNAL_")
}


def new_item_id() -> str:
    return "item_" + os.urandom(12).hex()


def new_response_id() -> str:
    return "resp_" + os.urandom(12).hex()


def function_call_item(call: dict[str, Any]) -> dict[str, Any]:
    """A response's function call (``ActiveResponse.calls``) as a Realtime item."""
    return {
        "id": call["id"],
        "object": "realtime.item",
        "type": "function_call",
        "status": call["status"],
        "call_id": call["call_id"],
        "name": call["name"],
        "arguments": call["arguments"],
    }


@dataclass(slots=True)
class McpCallEntry:
    """One MCP item a response opened: an ``mcp_call`` the server runs, or the
    ``mcp_approval_request`` it asks the client first with."""

    item: dict[str, Any]
    output_index: int
    server_label: str
    # Announced (``response.output_item.added``); running on its server; ended.
    opened: bool = False
    running: bool = False
    done: bool = False

    @property
    def asks_approval(self) -> bool:
        return self.item["type"] == "mcp_approval_request"


@dataclass(slots=True)
class PlaybackCursor:
    """How much of one response's audio was generated, sent, played and committed (ms)."""

    generated_ms: int = 0
    sent_ms: int = 0
    played_ms: int = 0
    committed_ms: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "generated_ms": self.generated_ms,
            "sent_ms": self.sent_ms,
            "played_ms": self.played_ms,
            "committed_ms": self.committed_ms,
        }


@dataclass(slots=True)
class InputTurn:
    """User audio since the last commit, at the plugin's input rate."""

    chunks: list[np.ndarray] = field(default_factory=list)
    samples: int = 0
    speech_samples: int = 0
    appended: bool = False
    speech_active: bool = False
    item_id: str | None = None
    audio_start_ms: int = 0
    transcript_hints: list[str] = field(default_factory=list)

    def audio(self) -> np.ndarray:
        if not self.chunks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(self.chunks).astype(np.float32, copy=False)

    @property
    def has_speech(self) -> bool:
        return self.speech_samples > 0


@dataclass(slots=True)
class ActiveResponse:
    """The response being generated: its ids, stage requests and what it produced."""

    response_id: str
    item_id: str
    input_commit_seq: int
    modalities: tuple[str, ...]
    conversation: str = "auto"
    metadata: dict[str, Any] | None = None
    request_ids: list[str] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    audio_deltas: int = 0
    audio_ms: float = 0.0
    marks: list[dict[str, int]] = field(default_factory=list)
    text_part_open: bool = False
    speak_emitted: bool = False
    encoder: Any = None
    stage_steps: int = 0
    stage_compute_s: float = 0.0
    input_audio_ms: float = 0.0
    input_text: str = ""
    # Its function calls by call_id (id, call_id, name, arguments, status, output_index).
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Output items opened so far, and the assistant message's place among them: it opens
    # with the first thing said (a response that only calls a tool has none).
    outputs_opened: int = 0
    message_index: int | None = None
    # The model is done with it (status, reason) but its audio is still being released
    # at the playout's pace: it ends when the last of it has left.
    generation_ended: tuple[str, str | None] | None = None
    # The model ended it by deciding to listen (the reason): ``response.listen`` goes out
    # as it ends, after its audio.
    listen_reason: str | None = None
    # Remote MCP tools (``mcp_servers``): the names the model may call and their servers;
    # its MCP items by the model's call id; the options and history it started from, and
    # the calls and outputs since, which each further round of the model is given.
    options: dict[str, Any] = field(default_factory=dict)
    mcp_tools: dict[str, str] = field(default_factory=dict)
    mcp_calls: dict[str, McpCallEntry] = field(default_factory=dict)
    base_history: list[dict[str, Any]] = field(default_factory=list)
    tool_messages: list[dict[str, Any]] = field(default_factory=list)
    # The model's current request is still generating; MCP outputs it has not answered.
    model_generating: bool = False
    answer_owed: bool = False
    tool_rounds: int = 0

    @property
    def wants_audio(self) -> bool:
        return "audio" in self.modalities

    @property
    def in_conversation(self) -> bool:
        """``conversation: "none"`` (out of band): its items never join the conversation,
        so no ``conversation.item.*`` event tells of them and no later response sees them."""
        return self.conversation != "none"

    def usage(self) -> dict[str, Any]:
        """OpenAI's ``response.usage``, counted in units every plugin has: one token per
        started 100 ms of audio and one per word of text (models here share no tokenizer)."""
        audio_in = math.ceil(self.input_audio_ms / AUDIO_TOKEN_MS)
        text_in = len(self.input_text.split())
        audio_out = math.ceil(self.audio_ms / AUDIO_TOKEN_MS)
        text_out = len(self.transcript_text().split()) + len(self.text_output().split())
        return {
            "total_tokens": audio_in + text_in + audio_out + text_out,
            "input_tokens": audio_in + text_in,
            "output_tokens": audio_out + text_out,
            "input_token_details": {
                "cached_tokens": 0,
                "text_tokens": text_in,
                "audio_tokens": audio_in,
            },
            "output_token_details": {"text_tokens": text_out, "audio_tokens": audio_out},
        }

    def transcript_text(self) -> str:
        return "".join(self.transcript)

    def text_output(self) -> str:
        return "".join(self.text)


@dataclass(slots=True)
class DuplexEngineSession:
    """Everything the engine knows about one conversation."""

    session_id: str
    settings: Any  # SessionSettings (engine/duplex/settings.py)
    capabilities: DuplexCapabilities
    lease: DuplexLeaseState
    model_state: Any
    state: SessionState = SessionState.OPEN
    epoch: int = 0
    turn_id: int = 0
    input_generation: int = 0
    commit_seq: int = 0
    input: InputTurn = field(default_factory=InputTurn)
    last_response_id: str | None = None
    # The audio of a turn committed while a response was active, answered when it ends.
    deferred_commit: np.ndarray | None = None
    # Ids of ``mcp_approval_response`` items that came while a response was active: each
    # is acted on (the call run, or the refusal answered) when the responses before end.
    deferred_approvals: list[str] = field(default_factory=list)
    committed_input: np.ndarray | None = None
    pending_user_text: str = ""
    overlap_speech_ms: int = 0
    playback: dict[str, PlaybackCursor] = field(default_factory=dict)
    items: ConversationStore = field(default_factory=ConversationStore)
    reserved_input_bytes: int = 0
    pending_turns: int = 0
    response_counter: int = 0
    request_ids: set[str] = field(default_factory=set)
    arrival_jitter: ArrivalJitter = field(default_factory=ArrivalJitter)
    # The silence since the floor was last taken (server VAD's ``idle_timeout_ms``).
    idle: IdleWatch = field(default_factory=IdleWatch)
    # Written only by ``advance``: read them as ``turn_state`` and ``response``.
    _turn_state: TurnState = field(default=TurnState.IDLE, init=False)
    _response: ActiveResponse | None = field(default=None, init=False)

    @property
    def turn_state(self) -> TurnState:
        return self._turn_state

    @property
    def response(self) -> ActiveResponse | None:
        """The active response (one at a time), or None."""
        return self._response

    def advance(self, step: TurnStep, response: ActiveResponse | None = None) -> None:
        """The one transition of the turn state and the active response.

        ``RESPONSE_START`` makes ``response`` the active one and needs none active;
        ``RESPONSE_AUDIO`` and ``RESPONSE_END`` need one active, and ``RESPONSE_END`` and
        ``RESPONSE_ABANDON`` leave none. Any other use raises ``IllegalTurnTransition``.
        """
        needs, target = _STEPS[step]
        active = self._response
        if (
            (needs is _Needs.NONE_ACTIVE and active is not None)
            or (needs is _Needs.ACTIVE and active is None)
            or ((step is TurnStep.RESPONSE_START) != (response is not None))
        ):
            raise IllegalTurnTransition(
                step, self._turn_state, active.response_id if active else None
            )
        if step is TurnStep.RESPONSE_START:
            self._response = response
        elif step in (TurnStep.RESPONSE_END, TurnStep.RESPONSE_ABANDON):
            self._response = None
        if target is not None:
            self._turn_state = target

    def playout_lead_ms(self) -> int:
        """The lead the next paced response keeps: ``output_audio_lead_ms`` when the lead
        is ``fixed``, else what this session's arrival jitter needs, at most that."""
        ceiling = self.settings.output_audio_lead_ms
        if self.settings.output_audio_lead == "fixed":
            return ceiling
        return self.arrival_jitter.lead_ms(ceiling)

    @property
    def fence(self) -> DuplexFence:
        return DuplexFence(self.session_id, self.epoch, self.turn_id)

    @property
    def open(self) -> bool:
        return self.state is SessionState.OPEN

    def advance_epoch(self) -> int:
        """A cancel: everything of the old epoch is stale from here on."""
        self.epoch += 1
        self.advance(TurnStep.EPOCH_ADVANCED)
        return self.epoch

    def cursor(self, response_id: str) -> PlaybackCursor:
        return self.playback.setdefault(response_id, PlaybackCursor())

    def current_playback(self) -> PlaybackCursor:
        rid = self.response.response_id if self.response else self.last_response_id
        return self.playback.get(rid or "", PlaybackCursor())
