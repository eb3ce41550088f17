"""One connection's Realtime envelope: dialect, handshake rules, frame decoding, errors.

``RealtimeEnvelope`` is sans-I/O. The route builds it from the WebSocket request
(``from_request``) and feeds it what the socket delivers; it answers with typed commands
or raises ``DuplexCommandError`` carrying the wire code, the client's ``event_id`` and the
offending ``param``, which ``error_frame_for`` renders.

Query parameters and headers:

* ``dialect`` (decision 1): GA unless ``?dialect=beta``, or the ``OpenAI-Beta:
  realtime=v1`` header, or the browser subprotocol ``openai-beta.realtime-v1``. An explicit
  ``?dialect=ga|beta`` wins over the header.
* ``model``: the default session's model.
* ``intent`` (OpenAI's): ``transcription`` makes the connection's session a
  transcription session (``session.type: "transcription"``) and opens it at once, with or
  without ``model``, as OpenAI does; any other value is refused.
* ``autostart`` (``0|false|no|off``): open nothing before the first message (which may be
  ``session.update`` or ``session.resume``). ``resume`` (``1|true|yes|on``): resume-only.
* ``duplex`` (decision 1): whether the connection receives our Tier 3 event *types*
  (``response.speak``, ``session.resumed``, ``turn.event``, ...). Absent, a connection
  speaks OpenAI's vocabulary only until it opts in: ``?duplex=1``, the ``/v1/duplex``
  route, ``extra_body.duplex_extensions: true`` in a ``session.update``, or sending any
  Tier 3 command (``session.resume``, ``session.heartbeat``, ``playback.ack``, ...: such a
  client speaks the extensions). ``?duplex=0`` says no and is kept to, except that
  ``extra_body.duplex_extensions`` can still change it. Extension *fields* on OpenAI's
  events (``server_event_seq``, ``resume_token``, ...) go to every connection: OpenAI's
  SDK models tolerate them.

A flag or dialect with any other value is refused (``bad_event``, ``param`` = the query
parameter), rather than silently read as its default; an empty value counts as absent.

Handshake (decisions 9 and 17):

1. ``initial_open()``: with ``?model=`` and no resume-only flag the session opens at once
   with ``{"model": ...}`` before anything is read, so ``session.created`` is the first
   event a stock OpenAI client sees. Fires at most once.
2. Otherwise ``first_message(frame)`` classifies the first frame: ``session.resume`` ->
   resume; ``session.update`` -> open with its session object; anything else -> open the
   default session, then handle the decoded command. On a resume-only connection
   (``?resume=1``) every first message but ``session.resume`` is refused with
   ``session_required``. A refused first message changes nothing: the route
   answers the error and may keep reading until ``CONFIG_TIMEOUT_S``.
3. ``bind_session(session_id)`` once the session is open or resumed. From then on
   ``decode(frame)`` handles every frame; ``session.resume`` is refused there with
   ``unsupported_session_resume``.

The handshake is an explicit state machine (``HandshakeState``), with only these steps::

    AWAITING_FIRST --initial_open / first_message (open)--> OPENING --bind_session--> OPEN
    AWAITING_FIRST --first_message (session.resume)--> RESUMING --bind_session--> OPEN
    AWAITING_FIRST --bind_session--> OPEN

A refused first message leaves it where it was; any other step raises
``HandshakeStateError`` (the route asked for something out of order).

Errors: ``error_event`` renders one in the connection's dialect; whether it is numbered
in the session's stream or sent as a transport-local frame (before a session exists) is
``RealtimeProtocol``'s decision (decision 2).

Input defaults: a ``session.update`` the codec accepted is folded into ``defaults``
(``next_input_defaults``) as soon as it is decoded, because appends pipelined right behind
it must already decode with the new format. ``adopt_session`` seeds them from an effective
session object (``session.created`` / ``session.resumed``), so a resumed connection picks
up the formats the session negotiated before (the serving layer keeps no copy of them).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from omniduplex.protocol.duplex import (
    TRANSCRIPTION_INTENT,
    TRANSCRIPTION_SESSION_TYPE,
    Dialect,
    DuplexCommandError,
    ErrorEvent,
    RealtimeCommand,
    RealtimeEvent,
    RealtimeInputDefaults,
    command_from_realtime,
    events,
    image_part_indexes,
    next_input_defaults,
    parse_client_frame,
)
from omniduplex.protocol.duplex.commands import (
    MAX_EVENT_BYTES,
    MAX_ID_CHARS,
    AckEvents,
    CreateItem,
    CreateResponse,
    ResumeSession,
    UpdateSession,
)

#: How long the route waits for the first message when nothing autostarts.
CONFIG_TIMEOUT_S: Final = 10.0
TRUE_VALUES: Final = frozenset({"1", "true", "yes", "on"})
FALSE_VALUES: Final = frozenset({"0", "false", "no", "off"})
BETA_HEADER: Final = "openai-beta"
BETA_HEADER_TOKEN: Final = "realtime=v1"
BETA_SUBPROTOCOL: Final = "openai-beta.realtime-v1"
#: The ``session.update`` field (under ``extra_body``) that turns the extensions on or off.
EXTENSIONS_FIELD: Final = "duplex_extensions"

_SESSION_OBJECT_EVENTS: Final = (
    events.SessionCreated,
    events.SessionUpdated,
    events.SessionResumed,
)
_SPEECH_EVENTS: Final = (
    events.InputAudioBufferSpeechStarted,
    events.InputAudioBufferSpeechStopped,
)

_UPDATE_TYPES: Final = frozenset({UpdateSession.type, *UpdateSession.aliases})

FirstKind = Literal["resume", "open", "open_default"]


class HandshakeState(enum.Enum):
    AWAITING_FIRST = "awaiting_first"  # nothing is open; autostart or the first frame decide
    OPENING = "opening"  # the route opens a session (autostart, or the first message)
    RESUMING = "resuming"  # the first message was session.resume
    OPEN = "open"  # a session is bound: decode() handles every frame


_HANDSHAKE_STEPS: Final = {
    HandshakeState.AWAITING_FIRST: frozenset(
        {HandshakeState.OPENING, HandshakeState.RESUMING, HandshakeState.OPEN}
    ),
    HandshakeState.OPENING: frozenset({HandshakeState.OPEN}),
    HandshakeState.RESUMING: frozenset({HandshakeState.OPEN}),
    HandshakeState.OPEN: frozenset(),
}


class HandshakeStateError(RuntimeError):
    """A handshake step out of order (a bug in the route, not the client's doing)."""


def encode_frame(rendered: Mapping[str, Any]) -> bytes:
    """The wire bytes of a rendered event that is not part of a session's stream."""
    return orjson.dumps(rendered)


def _query_error(name: str, message: str) -> DuplexCommandError:
    return DuplexCommandError(message, "bad_event", param=name)


def query_flag(query: Mapping[str, Any], name: str) -> bool | None:
    """A boolean query parameter: ``None`` when absent or empty; refuses anything else
    that is not one of the recognised spellings."""
    raw = query.get(name)
    value = "" if raw is None else str(raw).strip().lower()
    if not value:
        return None
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    raise _query_error(name, f"query parameter {name} must be one of 1/0, true/false, on/off")


def _header(headers: Mapping[str, Any] | Iterable[tuple[Any, Any]], name: str) -> list[str]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for key, value in items:
        key_text = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        if key_text.lower() == name:
            out.append(value.decode("latin-1") if isinstance(value, bytes) else str(value))
    return out


def select_dialect(
    query: Mapping[str, Any],
    headers: Mapping[str, Any] | Iterable[tuple[Any, Any]] = (),
    subprotocols: Iterable[str] = (),
) -> Dialect:
    """Decision 1: ``?dialect=`` if given, else beta on the beta header/subprotocol."""
    raw = query.get("dialect")
    if raw is not None:
        value = str(raw).strip().lower()
        if value == "ga":
            return "ga"
        if value == "beta":
            return "beta"
        raise _query_error("dialect", "query parameter dialect must be 'ga' or 'beta'")
    for value in _header(headers, BETA_HEADER):
        tokens = {token.strip().lower().replace(" ", "") for token in value.split(",")}
        if BETA_HEADER_TOKEN in tokens:
            return "beta"
    if any(str(p).strip().lower() == BETA_SUBPROTOCOL for p in subprotocols):
        return "beta"
    return "ga"


@dataclass(frozen=True, slots=True)
class FirstMessage:
    """What the first frame asks for.

    ``resume``: ``command`` is the ``ResumeSession``. ``open``: open with
    ``session_payload`` (the ``session.update``'s session object); ``command`` is the
    ``UpdateSession`` (already folded into the defaults; do not submit it again).
    ``open_default``: open with ``session_payload`` ``{"model": default_model}``, then
    handle ``command`` exactly as a later frame's command.
    """

    kind: FirstKind
    command: RealtimeCommand
    session_payload: dict[str, Any] | None = None


@dataclass(slots=True)
class RealtimeEnvelope:
    """The transport state of one WebSocket connection (not of the session)."""

    dialect: Dialect = "ga"
    default_model: str | None = None
    autostart: bool = True
    resume_only: bool = False
    # ``?intent=transcription``: the session this connection opens only transcribes.
    transcription: bool = False
    # ``?duplex`` as given (None: absent); ``extensions`` is what is in force now.
    duplex: bool | None = None
    extensions: bool = False
    defaults: RealtimeInputDefaults = field(default_factory=RealtimeInputDefaults)
    max_event_bytes: int = MAX_EVENT_BYTES
    session_id: str | None = None
    state: HandshakeState = HandshakeState.AWAITING_FIRST
    # The session's turn detection as its last session object said (created/updated).
    _server_detects_turns: bool = field(default=False, repr=False)

    @classmethod
    def from_request(
        cls,
        query: Mapping[str, Any],
        headers: Mapping[str, Any] | Iterable[tuple[Any, Any]] = (),
        subprotocols: Iterable[str] = (),
        *,
        max_event_bytes: int = MAX_EVENT_BYTES,
        duplex_route: bool = False,
    ) -> RealtimeEnvelope:
        """Read query parameters and headers; raises ``DuplexCommandError`` (``bad_event``)
        for a malformed flag or dialect. Render that error with ``error_frame_for`` on a
        GA envelope (the dialect is what failed). ``duplex_route``: the connection came in
        on ``/v1/duplex``, which speaks the extensions unless ``?duplex=0``."""
        model = query.get("model")
        model = str(model).strip() if model is not None else ""
        duplex = query_flag(query, "duplex")
        intent = str(query.get("intent") or "").strip().lower()
        if intent and intent != TRANSCRIPTION_INTENT:
            raise _query_error("intent", f"query parameter intent must be {TRANSCRIPTION_INTENT!r}")
        return cls(
            dialect=select_dialect(query, headers, subprotocols),
            default_model=model or None,
            transcription=intent == TRANSCRIPTION_INTENT,
            autostart=query_flag(query, "autostart") is not False,
            resume_only=query_flag(query, "resume") is True,
            duplex=True if duplex is None and duplex_route else duplex,
            extensions=duplex is True or (duplex is None and duplex_route),
            max_event_bytes=max_event_bytes,
        )

    # ---- handshake ------------------------------------------------------------------

    @property
    def opened(self) -> bool:
        return self.state is HandshakeState.OPEN

    def _step(self, to: HandshakeState) -> None:
        if to not in _HANDSHAKE_STEPS[self.state]:
            raise HandshakeStateError(f"handshake {self.state.value} -> {to.value}")
        self.state = to

    def initial_open(self) -> dict[str, Any] | None:
        """Decision 17: the session payload to open before reading anything, or ``None``.

        Non-``None`` only once, on a connection with ``?model=`` or
        ``?intent=transcription`` that neither says ``?autostart=0`` nor is resume-only.
        """
        if (
            self.state is not HandshakeState.AWAITING_FIRST
            or not self.autostart
            or self.resume_only
            or not (self.default_model or self.transcription)
        ):
            return None
        self._step(HandshakeState.OPENING)
        return self._intended({"model": self.default_model} if self.default_model else {})

    def _intended(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The opening session object, a transcription session's when the URL said so."""
        if self.transcription and "type" not in payload:
            payload["type"] = TRANSCRIPTION_SESSION_TYPE
        return payload

    def first_message(self, frame: str | bytes) -> FirstMessage:
        """Classify the connection's first frame (see the module docstring)."""
        if self.state is not HandshakeState.AWAITING_FIRST:
            raise HandshakeStateError(f"first_message in handshake state {self.state.value}")
        obj = self._parse(frame)
        wire_type = obj["type"]
        if self.resume_only and wire_type != ResumeSession.type:
            raise DuplexCommandError(
                "this connection is resume-only (?resume=1): "
                "its first message must be session.resume",
                "session_required",
                event_id=_event_id(obj),
                param="type",
            )
        command = command_from_realtime(obj, defaults=self.defaults)
        self._refuse_beta_images(command)
        self._refuse_beta_mcp(command)
        self._note_extension_use(command)
        if isinstance(command, ResumeSession):
            self._step(HandshakeState.RESUMING)
            return FirstMessage("resume", command)
        self._step(HandshakeState.OPENING)
        if isinstance(command, UpdateSession) and wire_type in _UPDATE_TYPES:
            self._fold(command)
            return FirstMessage("open", command, self._intended(dict(command.patch)))
        return FirstMessage("open_default", command, self._intended({"model": self.default_model}))

    def bind_session(self, session_id: str) -> None:
        """The session exists: ``decode`` handles every frame from now on."""
        self._step(HandshakeState.OPEN)
        self.session_id = session_id

    def adopt_session(self, session: Mapping[str, Any] | None) -> RealtimeInputDefaults:
        """Seed the input defaults from an effective session object (open or resume)."""
        if isinstance(session, Mapping):
            self.defaults = next_input_defaults(RealtimeInputDefaults(), session)
            self._server_detects_turns = session.get("turn_detection") is not None
        return self.defaults

    # ---- frames ---------------------------------------------------------------------

    def decode(self, frame: str | bytes) -> RealtimeCommand:
        """One frame of an open connection -> its command.

        ``AckEvents`` (``session.event_ack``) is the route's to apply to the journal; every
        other command goes to the engine. Raises ``DuplexCommandError``:
        ``binary_frame_unsupported``, ``event_too_large``, ``invalid_json``,
        ``bad_event``, ``unknown_event`` (with the client's ``event_id``),
        ``unsupported_session_resume`` for a late ``session.resume``, or the codec's code
        for an invalid payload.
        """
        obj = self._parse(frame)
        if obj["type"] == ResumeSession.type:
            raise DuplexCommandError(
                "session.resume must be the first message of a new connection",
                "unsupported_session_resume",
                event_id=_event_id(obj),
            )
        command = command_from_realtime(obj, defaults=self.defaults)
        self._refuse_beta_images(command)
        self._refuse_beta_mcp(command)
        self._note_extension_use(command)
        if isinstance(command, UpdateSession):
            self._fold(command)
        return command

    def _parse(self, frame: str | bytes) -> dict[str, Any]:
        if not isinstance(frame, str):
            raise DuplexCommandError(
                "binary frames are not supported: send each event as a JSON text frame",
                "binary_frame_unsupported",
            )
        return parse_client_frame(frame, max_bytes=self.max_event_bytes)

    def _fold(self, command: UpdateSession) -> None:
        self.defaults = next_input_defaults(self.defaults, command.patch)
        extra = command.patch.get("extra_body")
        wanted = extra.get(EXTENSIONS_FIELD) if isinstance(extra, Mapping) else None
        if isinstance(wanted, bool):
            self.extensions = wanted

    def _refuse_beta_images(self, command: RealtimeCommand) -> None:
        """The beta dialect has no ``input_image`` part: a beta client's image is refused
        (``unsupported``) rather than stored and then dropped from every echo it gets."""
        if self.dialect != "beta" or not isinstance(command, CreateItem):
            return
        indexes = image_part_indexes(command.item.get("content"))
        if indexes:
            raise DuplexCommandError(
                "input_image content parts need the GA Realtime API: the beta dialect has"
                " none (connect without the OpenAI-Beta: realtime=v1 header or ?dialect=beta)",
                "unsupported",
                event_id=command.event_id,
                param=f"item.content[{indexes[0]}]",
            )

    def _refuse_beta_mcp(self, command: RealtimeCommand) -> None:
        """The beta dialect has no remote MCP tools (no ``mcp`` tool, no MCP items or
        events): a beta client's ``mcp`` tool is refused rather than run unseen."""
        if self.dialect != "beta":
            return
        if isinstance(command, UpdateSession):
            tools, param = command.patch.get("tools"), "session.tools"
        elif isinstance(command, CreateResponse):
            tools, param = (command.options or {}).get("tools"), "response.tools"
        elif isinstance(command, CreateItem) and command.item.get("type") == MCP_APPROVAL:
            tools, param = [{"type": "mcp"}], "item"
        else:
            return
        for index, tool in enumerate(tools if isinstance(tools, list) else []):
            if isinstance(tool, Mapping) and tool.get("type") == "mcp":
                where = param if param == "item" else f"{param}[{index}].type"
                raise DuplexCommandError(
                    "remote MCP tools need the GA Realtime API: the beta dialect has none"
                    " (connect without the OpenAI-Beta: realtime=v1 header or ?dialect=beta)",
                    "unsupported",
                    event_id=command.event_id,
                    param=where,
                )

    def _note_extension_use(self, command: RealtimeCommand) -> None:
        """A client that sends one of our commands speaks the extensions (unless it said
        ``?duplex=0``)."""
        if command.tier == 3 and self.duplex is None:
            self.extensions = True

    # ---- outbound -------------------------------------------------------------------

    def render(self, event: RealtimeEvent) -> dict[str, Any] | None:
        """``event`` in this connection's dialect; ``None`` when the dialect lacks it, or
        the connection has not opted into the extensions and OpenAI would not send it: a
        Tier 3 event type, or a speech start/stop found while the session has no turn
        detection (our overlap detector's; OpenAI sends none then, and frameworks take
        one for the user talking over the assistant)."""
        if isinstance(event, _SESSION_OBJECT_EVENTS):
            session = event.session if isinstance(event.session, Mapping) else {}
            self._server_detects_turns = session.get("turn_detection") is not None
        if not self.extensions:
            if event.tier >= 3:
                return None
            if isinstance(event, _SPEECH_EVENTS) and not self._server_detects_turns:
                return None
        return event.to_realtime(self.dialect)

    def error_event(
        self,
        code: str,
        message: str,
        *,
        event_id: str | None = None,
        param: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The rendered ``error`` envelope (decision 3); ``event_id`` is the client's."""
        event = ErrorEvent.build(code, message, event_id=event_id, param=param, extra=extra)
        rendered = event.to_realtime(self.dialect)
        assert rendered is not None  # "error" exists in both dialects
        return rendered

    def error_frame(
        self,
        code: str,
        message: str,
        *,
        event_id: str | None = None,
        param: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> bytes:
        """The error's wire bytes as a transport-local frame (no ``server_event_seq``)."""
        return encode_frame(
            self.error_event(code, message, event_id=event_id, param=param, extra=extra)
        )

    def error_frame_for(self, exc: Exception, *, event_id: str | None = None) -> bytes:
        """``error_frame`` for a typed refusal: a ``DuplexCommandError`` /
        ``RealtimeProtocolError`` or a transport error with ``code`` and ``message``.
        ``event_id`` (the answered client event's) is used when ``exc`` has none."""
        code = getattr(exc, "code", None) or "internal_error"
        message = getattr(exc, "message", None) or str(exc) or code
        return self.error_frame(
            code,
            message,
            event_id=getattr(exc, "event_id", None) or event_id,
            param=getattr(exc, "param", None),
        )


MCP_APPROVAL = "mcp_approval_response"


def _event_id(obj: Mapping[str, Any]) -> str | None:
    raw = obj.get("event_id")
    return raw if isinstance(raw, str) and 0 < len(raw) <= MAX_ID_CHARS else None


__all__ = [
    "BETA_HEADER",
    "BETA_SUBPROTOCOL",
    "CONFIG_TIMEOUT_S",
    "EXTENSIONS_FIELD",
    "FALSE_VALUES",
    "MAX_EVENT_BYTES",
    "TRUE_VALUES",
    "AckEvents",
    "FirstMessage",
    "HandshakeState",
    "HandshakeStateError",
    "RealtimeEnvelope",
    "ResumeSession",
    "encode_frame",
    "query_flag",
    "select_dialect",
]
