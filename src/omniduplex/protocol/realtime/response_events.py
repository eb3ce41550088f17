"""OpenAI's response-scoped server events: a response, its output item, parts and media.

GA and beta name the media events differently (``response.output_audio.delta`` /
``response.audio.delta`` ...); each class carries both names and renders the one of the
connection's dialect, so a media event is never sent twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .base import RealtimeEvent
from .errors import SERVER_ERROR
from .event_shapes import beta_item, beta_response, ga_item, ga_response, part_event_part

# Events that merely share a shape derive from a private base, never from each other, so
# ``isinstance(event, ResponseCreated)`` is never true of a ``response.done``.


@dataclass(kw_only=True, slots=True)
class _ResponseEvent(RealtimeEvent):
    response: dict[str, Any]

    def __post_init__(self) -> None:
        RealtimeEvent.__post_init__(self)
        self.response = ga_response(self.response, classify_failure=self.failure_class)

    @classmethod
    def failure_class(cls, code: str) -> str:
        """The error class of a response that failed with ``code``: OpenAI's layer knows
        no codes, and a failed response is the server's fault."""
        return SERVER_ERROR

    def adapt_beta(self, rendered: dict[str, Any]) -> dict[str, Any]:
        rendered["response"] = beta_response(rendered["response"])
        return rendered


@dataclass(kw_only=True, slots=True)
class ResponseCreated(_ResponseEvent):
    """``response.created``: a response opened; ``response`` is the response object."""

    type: ClassVar[str] = "response.created"
    beta_type: ClassVar[str | None] = "response.created"


@dataclass(kw_only=True, slots=True)
class ResponseDone(_ResponseEvent):
    """``response.done``: the response's terminal event, with its final status and output.

    A cancelled response reports OpenAI's ``client_cancelled`` / ``turn_detected`` and
    keeps our finer reason in ``metadata.omniduplex_reason`` (see ``event_shapes``).
    """

    type: ClassVar[str] = "response.done"
    beta_type: ClassVar[str | None] = "response.done"


@dataclass(kw_only=True, slots=True)
class _OutputItemEvent(RealtimeEvent):
    response_id: str
    output_index: int = 0
    item: dict[str, Any]

    def __post_init__(self) -> None:
        RealtimeEvent.__post_init__(self)
        self.item = ga_item(self.item)

    def adapt_beta(self, rendered: dict[str, Any]) -> dict[str, Any]:
        rendered["item"] = beta_item(rendered["item"])
        return rendered


@dataclass(kw_only=True, slots=True)
class ResponseOutputItemAdded(_OutputItemEvent):
    """``response.output_item.added``: the response's item, as it is when it opens."""

    type: ClassVar[str] = "response.output_item.added"
    beta_type: ClassVar[str | None] = "response.output_item.added"


@dataclass(kw_only=True, slots=True)
class ResponseOutputItemDone(_OutputItemEvent):
    """``response.output_item.done``: the final item (``incomplete`` when cut short)."""

    type: ClassVar[str] = "response.output_item.done"
    beta_type: ClassVar[str | None] = "response.output_item.done"


@dataclass(kw_only=True, slots=True)
class _ContentPartEvent(RealtimeEvent):
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    part: dict[str, Any]

    def __post_init__(self) -> None:
        RealtimeEvent.__post_init__(self)
        self.part = part_event_part(self.part)


@dataclass(kw_only=True, slots=True)
class ResponseContentPartAdded(_ContentPartEvent):
    """``response.content_part.added``: ``part`` is ``{"type": "audio"|"text", ...}``."""

    type: ClassVar[str] = "response.content_part.added"
    beta_type: ClassVar[str | None] = "response.content_part.added"


@dataclass(kw_only=True, slots=True)
class ResponseContentPartDone(_ContentPartEvent):
    """``response.content_part.done``: the part with its full transcript or text."""

    type: ClassVar[str] = "response.content_part.done"
    beta_type: ClassVar[str | None] = "response.content_part.done"


@dataclass(kw_only=True, slots=True)
class _ContentEvent(RealtimeEvent):
    """Fields every event about one content part of the response's item carries."""

    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0


@dataclass(kw_only=True, slots=True)
class ResponseOutputAudioDelta(_ContentEvent):
    """One base64 audio chunk. This is the hot path: rendering is the base field walk."""

    type: ClassVar[str] = "response.output_audio.delta"
    beta_type: ClassVar[str | None] = "response.audio.delta"

    delta: str


@dataclass(kw_only=True, slots=True)
class ResponseOutputAudioDone(_ContentEvent):
    type: ClassVar[str] = "response.output_audio.done"
    beta_type: ClassVar[str | None] = "response.audio.done"


@dataclass(kw_only=True, slots=True)
class ResponseOutputAudioTranscriptDelta(_ContentEvent):
    """Transcript of one audio chunk; may be ``""``, never overlaps earlier text."""

    type: ClassVar[str] = "response.output_audio_transcript.delta"
    beta_type: ClassVar[str | None] = "response.audio_transcript.delta"

    delta: str


@dataclass(kw_only=True, slots=True)
class ResponseOutputAudioTranscriptDone(_ContentEvent):
    type: ClassVar[str] = "response.output_audio_transcript.done"
    beta_type: ClassVar[str | None] = "response.audio_transcript.done"

    transcript: str


@dataclass(kw_only=True, slots=True)
class ResponseOutputTextDelta(_ContentEvent):
    type: ClassVar[str] = "response.output_text.delta"
    beta_type: ClassVar[str | None] = "response.text.delta"

    delta: str


@dataclass(kw_only=True, slots=True)
class ResponseOutputTextDone(_ContentEvent):
    type: ClassVar[str] = "response.output_text.done"
    beta_type: ClassVar[str | None] = "response.text.done"

    text: str


@dataclass(kw_only=True, slots=True)
class ResponseFunctionCallArgumentsDelta(RealtimeEvent):
    type: ClassVar[str] = "response.function_call_arguments.delta"
    beta_type: ClassVar[str | None] = "response.function_call_arguments.delta"

    response_id: str
    item_id: str
    output_index: int = 0
    call_id: str
    delta: str


@dataclass(kw_only=True, slots=True)
class ResponseFunctionCallArgumentsDone(RealtimeEvent):
    """The whole argument string; GA requires the function ``name`` here too."""

    type: ClassVar[str] = "response.function_call_arguments.done"
    beta_type: ClassVar[str | None] = "response.function_call_arguments.done"

    response_id: str
    item_id: str
    output_index: int = 0
    call_id: str
    name: str
    arguments: str


RESPONSE_EVENT_CLASSES: tuple[type[RealtimeEvent], ...] = (
    ResponseCreated,
    ResponseDone,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    ResponseOutputAudioDelta,
    ResponseOutputAudioDone,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputTextDelta,
    ResponseOutputTextDone,
    ResponseFunctionCallArgumentsDelta,
    ResponseFunctionCallArgumentsDone,
)
