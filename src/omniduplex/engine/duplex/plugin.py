"""The one class a model provides to be served as a duplex session.

A plugin turns session input into stage submissions and stage outputs into typed model
results; the session runner owns everything else (ledgers, events, epochs). Plugins never
see the wire.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .capabilities import DuplexCapabilities
from .contracts import DuplexFence
from .vad import SpeechClassifier, TurnCompletionModel


class DuplexRuntimeConfigError(ValueError):
    """A session setting the plugin refuses; ``code`` and ``param`` go on the wire."""

    def __init__(
        self, message: str, *, code: str = "invalid_duplex_runtime_config", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


class InputImageError(ValueError):
    """An image the model cannot read (not a decodable JPEG/PNG, or too large);
    ``index`` is its position in the images the plugin was handed."""

    def __init__(self, message: str, *, index: int = 0) -> None:
        super().__init__(message)
        self.index = index


@dataclass(frozen=True, slots=True)
class InputImage:
    """One image the user showed: its encoded bytes (JPEG or PNG, signature checked by
    the wire) and the client's ``detail`` (``auto``, ``low`` or ``high``)."""

    mime_type: str
    data: bytes = field(repr=False)
    detail: str = "auto"


# ---- model results: what a data plane yields for one stage output -----------------


@dataclass(frozen=True, slots=True)
class ModelAudio:
    """One unit of reply audio (float32 mono at the plugin's output rate) and its text."""

    samples: np.ndarray
    text: str = ""
    end_of_turn: bool = False


@dataclass(frozen=True, slots=True)
class ModelText:
    """Text-only output of a response (no audio for it)."""

    delta: str
    end_of_turn: bool = False


@dataclass(frozen=True, slots=True)
class ModelSpeak:
    """The model decided to speak (model-native plugins open responses this way)."""

    reason: str = "model_speak"


@dataclass(frozen=True, slots=True)
class ModelListen:
    """The model decided to listen; ends an open response that produced nothing more."""

    reason: str = "model_listen"


@dataclass(frozen=True, slots=True)
class ModelInputTranscript:
    """What the model heard the user say.

    A partial (``final=False``) is the whole hypothesis of the utterance so far and may
    revise its last words; the engine turns successive partials into append-only deltas.
    The final transcript is authoritative. ``logprobs``, from a plugin that
    ``reports_logprobs`` when asked: one ``{"token", "logprob", "bytes"}`` per word of
    ``text``, each token spelled as it appears in it (a space before every word but the
    first), so the tokens joined are ``text``.
    """

    text: str
    final: bool = True
    logprobs: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True)
class ModelError:
    """The model failed this response; the session goes on."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    """A piece of a function call the model is making: ``arguments`` is the next part of
    its JSON arguments (they stream as produced); ``done`` closes the call. ``name`` is
    the declared tool's; every piece of one call has the same ``call_id``."""

    call_id: str
    name: str
    arguments: str = ""
    done: bool = False


ModelResult = (
    ModelAudio
    | ModelText
    | ModelSpeak
    | ModelListen
    | ModelInputTranscript
    | ModelError
    | ModelToolCall
)


# ---- per-session model state and the plugin ---------------------------------------


class DuplexModelSessionState(ABC):  # noqa: B024 - a seam's base class, no hooks of its own
    """Whatever the model keeps per session between units (owned by the runner, which
    hands it to the plugin's ``plan_*`` methods and calls nothing on it)."""


@dataclass(slots=True)
class StreamedSessionState(DuplexModelSessionState):
    """A model-native (``streams_input``) session's state: the session config its stage-0
    request opens with, sent with the first unit of each epoch."""

    config: dict[str, Any] = field(default_factory=dict)
    epoch_sent: int | None = None
    units: int = 0
    # Images taken since the last unit was planned; they ride the next one.
    pending_images: list[InputImage] = field(default_factory=list)

    def plan_unit(
        self, samples: np.ndarray, *, unit_samples: int, fence: DuplexFence, model: str
    ) -> dict[str, Any]:
        """One input unit's stage-0 data; the first of an epoch carries the config, and a
        unit carries (``images``) every image taken since the unit before it."""
        audio = np.asarray(samples, dtype=np.float32).reshape(-1)
        if audio.size != unit_samples:
            raise ValueError(f"{model} streams {unit_samples}-sample units, got {audio.size}")
        self.units += 1
        data: dict[str, Any] = {"audio": audio}
        if self.pending_images:
            data["images"] = tuple(self.pending_images)
            self.pending_images.clear()
        if self.epoch_sent != fence.epoch:
            # The first unit of this epoch opens its stage-0 request: it says who we are.
            self.epoch_sent = fence.epoch
            data["config"] = dict(self.config)
        return data


@dataclass(slots=True)
class ResponseRequest:
    """Everything a turn-based plugin needs to start one response."""

    fence: DuplexFence
    response_id: str
    input_audio: np.ndarray
    input_text: str
    # Chat messages (``ConversationStore.messages``); a user message with ``silent_ms``
    # and no content is an idle timeout's empty turn: the user said nothing that long.
    history: Sequence[Mapping[str, Any]]
    options: Mapping[str, Any] = field(default_factory=dict)
    # The session's settings in force (``SessionSettings.as_model_config``): a
    # ``session.update`` after the session opened reaches the next response through here.
    session: Mapping[str, Any] = field(default_factory=dict)
    # The turn's audio already reached stage 0 through its utterance request (which this
    # response's data finishes); ``input_audio`` is empty then.
    input_streamed: bool = False
    # Nothing new to answer (``response.create`` with no committed turn or user text): the
    # model speaks first, or again, under the session's instructions. A plugin with nothing
    # to say completes the response empty.
    opening: bool = False
    # The functions the model may call (Realtime ``tools`` entries: ``type: function``,
    # ``name``, ``description``, ``parameters``) and ``tool_choice`` (``auto``, ``none``,
    # ``required`` or ``{"type": "function", "name": ...}``); empty for a plugin that does
    # not declare ``supports_tools``. ``history`` then carries the calls (assistant
    # messages with ``tool_calls``) and their outputs (``role: tool``) in chat form.
    tools: Sequence[Mapping[str, Any]] = ()
    tool_choice: Any = "auto"


class DuplexDataPlane(ABC):
    """Projects raw stage outputs into model results."""

    @abstractmethod
    def project(self, data: Mapping[str, Any]) -> Sequence[ModelResult]: ...


class DuplexModelPlugin(ABC):
    """A model served as duplex sessions.

    ``input_sample_rate_hz`` / ``output_sample_rate_hz`` are the rates the model consumes
    and produces; the engine resamples client audio to the former and model audio to the
    session's output rate. ``streams_input``: every unit of input audio is submitted to
    stage 0 as it arrives (model-native duplex); otherwise the engine buffers the turn and
    hands it over at response start.

    ``transcribes_while_speaking`` (turn-based plugins, server VAD): stage 0 can decode the
    user's speech as it arrives. At speech start the engine opens one stage-0 request per
    utterance and feeds it with ``plan_utterance_audio``; stage 0 reports hypotheses
    addressed ``to_owner``. At commit the request either carries the response (its final
    input is ``plan_response``'s data, with ``input_streamed`` set) or is closed with
    ``plan_utterance_end`` for the transcript alone.

    ``drafts_replies`` (with ``transcribes_while_speaking``): the opening piece of an
    utterance also gets a ``preview``, the request the response answering it would get
    if the turn were committed now (``response_id`` empty), so the model may start the
    reply at a pause before the commit. The response's real request, at commit, is the
    one that counts: a draft made from anything else must be dropped.

    ``reports_logprobs`` (with ``plan_utterance_audio``): asked with ``logprobs=True``
    on an utterance's opening piece, stage 0 gives its transcripts ``logprobs``
    (``ModelInputTranscript``); a session's ``include`` asks for them.
    """

    plugin_id: str = ""
    input_sample_rate_hz: int = 16_000
    output_sample_rate_hz: int = 24_000
    streams_input: bool = False
    transcribes_while_speaking: bool = False
    drafts_replies: bool = False
    reports_logprobs: bool = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = dict(options or {})

    @property
    @abstractmethod
    def data_plane(self) -> DuplexDataPlane: ...

    @abstractmethod
    def capabilities(self, *, max_sessions: int) -> DuplexCapabilities: ...

    @abstractmethod
    def create_session_state(self, config: Mapping[str, Any]) -> DuplexModelSessionState: ...

    def validate_session_config(self, config: Mapping[str, Any]) -> None:
        """Refuse settings the model cannot honour (raise DuplexRuntimeConfigError).

        The default accepts everything the codec already validated.
        """
        return None

    def default_session(self) -> dict[str, Any]:
        """Session settings (a Realtime session object) a session starts from before the
        client's own; e.g. ``{"turn_detection": {"type": "server_vad"}}``."""
        return {}

    def create_speech_classifier(self) -> SpeechClassifier | None:
        """A per-session speech classifier for server VAD (``None``: the energy default)."""
        return None

    def turn_completion_model(self) -> TurnCompletionModel | None:
        """The model that decides ``semantic_vad`` turns (shared by sessions), or ``None``:
        then ``semantic_vad`` is served as server VAD (``session/turn_detection.py`` has
        the rule). A plugin that returns one declares ``supports_semantic_vad``."""
        return None

    def plan_input_unit(
        self, state: DuplexModelSessionState, samples: np.ndarray, *, fence: DuplexFence
    ) -> dict[str, Any] | None:
        """Stage-0 data for one streamed unit of input (streaming plugins only)."""
        return None

    def take_input_images(
        self, state: DuplexModelSessionState, images: Sequence[InputImage]
    ) -> None:
        """Images the user showed, in the order they came, for the model to see with the
        input that follows. Called only for a plugin whose capabilities declare
        ``supports_image_input``; it takes all of them or, raising ``InputImageError``
        for one it cannot read, none."""
        raise NotImplementedError(f"{type(self).__name__} does not take images")

    def plan_utterance_audio(
        self,
        state: DuplexModelSessionState,
        samples: np.ndarray,
        *,
        opening: bool,
        preview: ResponseRequest | None = None,
        logprobs: bool = False,
    ) -> dict[str, Any]:
        """Stage-0 data with one piece of an utterance's audio; ``opening``: its first
        (with the ``preview`` of its response, for plugins that ``drafts_replies``, and
        ``logprobs`` for plugins that ``reports_logprobs``)."""
        raise NotImplementedError(f"{type(self).__name__} does not transcribe while speaking")

    def plan_utterance_end(self, state: DuplexModelSessionState) -> dict[str, Any]:
        """Final stage-0 data of an utterance no response follows: report its transcript."""
        raise NotImplementedError(f"{type(self).__name__} does not transcribe while speaking")

    @abstractmethod
    def plan_response(
        self, state: DuplexModelSessionState, request: ResponseRequest
    ) -> dict[str, Any]:
        """Stage-0 data that starts one response of a turn-based plugin."""


def load_duplex_plugin(path: str, options: Mapping[str, Any] | None = None) -> DuplexModelPlugin:
    """Instantiate ``package.module:Class`` (or ``package.module.Class``)."""
    module_name, sep, class_name = path.partition(":")
    if not sep:
        module_name, _, class_name = path.rpartition(".")
    if not module_name or not class_name:
        raise ValueError(f"Invalid duplex plugin path: {path!r}")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, DuplexModelPlugin)):
        raise TypeError(f"{path} is not a DuplexModelPlugin")
    plugin = cls(options)
    if not plugin.plugin_id:
        raise TypeError("Duplex plugin must declare plugin_id")
    return plugin
