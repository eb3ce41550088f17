"""A session's effective settings, read from (and echoed as) a Realtime session object."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...protocol.duplex import (
    DEFAULT_INPUT_RATE_HZ,
    DEFAULT_OUTPUT_RATE_HZ,
    SESSION_TYPE,
    TRANSCRIPTION_SESSION_TYPE,
    AudioFormat,
    RealtimeInputDefaults,
    RealtimeProtocolError,
    build_session_object,
    build_transcription_session_object,
    check_overlap_policy,
    next_input_defaults,
    overlap_policy_for,
    read_input_format,
    read_instructions,
    read_max_output_tokens,
    read_output_format,
    read_output_modalities,
    read_temperature,
    read_voice,
    turn_detection_of,
    validate_turn_detection,
)
from .mcp.tool_spec import MCP_TOOL_TYPE, check_mcp_tool, public_tool
from .session.turn_detection import served_turn_detection

if TYPE_CHECKING:
    from .session.state import DuplexEngineSession

_POLICIES = ("listen_only", "barge_in_on_speech")
_COMMIT_POLICIES = ("commit_all_on_done", "ack_only")
#: What speech that starts while the assistant is audibly speaking does under server turn
#: detection. ``barge_in`` (OpenAI's rule): any speech stops the reply at once.
#: ``ignore``: the moment speech starts over a reply in progress, the reply's playout is
#: paused (nothing more is released; the client plays out the lead it holds). Speech that
#: ends within ``backchannel_max_ms`` of its onset (an "uh-huh", "yeah", "mm-hm",
#: "right") is a backchannel: no turn, no speech_started, and the reply resumes where it
#: paused, nothing lost; speech that lasts longer is announced then and stops the reply,
#: truncated at what the client played.
BACKCHANNEL_POLICIES = ("barge_in", "ignore")
#: ``realtime``: the engine releases a response's audio at real time plus the lead;
#: ``none``: as fast as it is generated (offline uses).
PACINGS = ("realtime", "none")
# How a paced response's lead is chosen: from the session's arrival jitter, at most
# output_audio_lead_ms (session/arrival_jitter.py), or exactly output_audio_lead_ms.
LEAD_POLICIES = ("adaptive", "fixed")
# Keys we echo back as the client sent them (``tools`` and ``tool_choice`` are echoed too,
# once checked: a model that ``supports_tools`` calls them).
_ECHOED = (
    "metadata",
    "include",
    "prompt",
    "tracing",
    "input_audio_transcription",
    "input_audio_noise_reduction",
)
# The GA spellings of echoed keys, under audio.input.
_ECHOED_GA_INPUT = {
    "transcription": "input_audio_transcription",
    "noise_reduction": "input_audio_noise_reduction",
}


_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Bounds on numeric settings: a millisecond knob past an hour is a mistake, and any
# number a session echoes must fit the wire's JSON (64-bit integers).
_LONGEST_MS = 3_600_000
_LARGEST_SETTING = 1e12
_TOOL_CHOICES = ("auto", "none", "required")


def check_tools(raw: Any, param: str = "tools") -> list[dict[str, Any]]:
    """Realtime function tools (``type: function``, ``name``, optional ``description``
    and JSON-schema ``parameters``) and remote MCP servers (``type: mcp``, ``mcp/tool_spec``),
    refusing a malformed one naming it in ``param``."""
    if not isinstance(raw, list):
        raise RealtimeProtocolError("tools must be a list", "invalid_tool", param=param)
    tools = []
    labels: set[str] = set()
    for index, tool in enumerate(raw):
        where = f"{param}[{index}]"
        if not isinstance(tool, Mapping):
            raise RealtimeProtocolError(f"{where} must be an object", "invalid_tool", param=where)
        if tool.get("type") == MCP_TOOL_TYPE:
            checked = check_mcp_tool(tool, where)
            if checked["server_label"] in labels:
                raise RealtimeProtocolError(
                    f"{where}.server_label {checked['server_label']!r} is declared twice",
                    "invalid_tool",
                    param=f"{where}.server_label",
                )
            labels.add(checked["server_label"])
            tools.append(checked)
            continue
        if tool.get("type", "function") != "function":
            raise RealtimeProtocolError(
                f"{where}.type {tool.get('type')!r} is not supported: only function and mcp tools",
                "invalid_tool",
                param=f"{where}.type",
            )
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise RealtimeProtocolError(
                f"{where}.name must be 1-64 letters, digits, _ or -",
                "invalid_tool",
                param=f"{where}.name",
            )
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise RealtimeProtocolError(
                f"{where}.description must be a string",
                "invalid_tool",
                param=f"{where}.description",
            )
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise RealtimeProtocolError(
                f"{where}.parameters must be a JSON schema object",
                "invalid_tool",
                param=f"{where}.parameters",
            )
        tools.append({**copy.deepcopy(dict(tool)), "type": "function"})
    return tools


def check_tool_choice(raw: Any, param: str = "tool_choice") -> Any:
    """``auto``, ``none``, ``required``, or ``{"type": "function", "name": ...}``."""
    if raw in _TOOL_CHOICES:
        return raw
    if isinstance(raw, Mapping) and raw.get("type") == "function":
        name = raw.get("name") or (raw.get("function") or {}).get("name")
        if isinstance(name, str) and name:
            return {"type": "function", "name": name}
    raise RealtimeProtocolError(
        "tool_choice must be auto, none, required or a function",
        "invalid_tool_choice",
        param=param,
    )


def _number(
    raw: Any, param: str, *, minimum: float = 0.0, maximum: float = _LARGEST_SETTING
) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not minimum <= raw <= maximum:
        raise RealtimeProtocolError(
            f"{param} must be a number from {minimum:g} to {maximum:g}", "bad_event", param=param
        )
    return float(raw)


def _formats(
    payload: Mapping[str, Any], current_in: AudioFormat, current_out: AudioFormat
) -> tuple[AudioFormat, AudioFormat]:
    """The input and output formats after ``payload``, rates included however the client
    stated them (``sample_rate_hz`` beside the format, ``audio.input.sample_rate_hz``, the
    GA format object's ``rate``): the codec's one negotiation rule, after a strict check
    that refuses a format it cannot read instead of keeping the old one."""
    # The codec's readers refuse what they cannot read, naming the field as the client did.
    read_input_format(payload)
    read_output_format(payload)
    current = RealtimeInputDefaults(input_format=current_in, output_format=current_out)
    negotiated = next_input_defaults(current, payload)
    return negotiated.input_format, negotiated.output_format


@dataclass(frozen=True, slots=True)
class SessionSettings:
    model: str
    modalities: tuple[str, ...] = ("audio",)
    instructions: str | None = None
    voice: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    input_format: AudioFormat = AudioFormat("pcm16", None)  # noqa: RUF009 - frozen value
    output_format: AudioFormat = AudioFormat("pcm16", None)  # noqa: RUF009 - frozen value
    turn_detection: dict[str, Any] | None = None
    overlap_policy: str = "listen_only"
    overlap_short_ack_ms: int = 700
    overlap_barge_in_ms: int = 400
    overlap_silence_rms: float = 0.003
    backchannel_policy: str = "barge_in"
    backchannel_max_ms: int = 800
    playback_commit_policy: str = "commit_all_on_done"
    output_audio_pacing: str = "realtime"
    output_audio_lead_ms: int = 300
    output_audio_lead: str = "adaptive"
    idle_timeout_s: float | None = None
    auto_response: bool = False
    ref_audio: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    echoed: dict[str, Any] = field(default_factory=dict)
    # ``realtime`` (a conversation) or ``transcription`` (transcripts only, no responses);
    # chosen when the session opens.
    session_type: str = SESSION_TYPE

    @property
    def transcription_only(self) -> bool:
        return self.session_type == TRANSCRIPTION_SESSION_TYPE

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.echoed.get("tools") or [])

    @property
    def tool_choice(self) -> Any:
        return self.echoed.get("tool_choice") or "auto"

    @property
    def paced(self) -> bool:
        return self.output_audio_pacing == "realtime"

    @property
    def output_rate_hz(self) -> int:
        return self.output_format.effective_rate(DEFAULT_OUTPUT_RATE_HZ)

    @classmethod
    def from_realtime(
        cls,
        payload: Mapping[str, Any] | None,
        *,
        served_model: str,
        max_idle_timeout_s: float = 3600.0,
        output_audio_pacing: str = "realtime",
        output_audio_lead_ms: int = 300,
        output_audio_lead: str = "adaptive",
    ) -> SessionSettings:
        base = cls(
            model=served_model,
            output_audio_pacing=output_audio_pacing,
            output_audio_lead_ms=output_audio_lead_ms,
            output_audio_lead=output_audio_lead,
        )
        return base.updated(payload or {}, opening=True, max_idle_timeout_s=max_idle_timeout_s)

    def updated(
        self,
        patch: Mapping[str, Any],
        *,
        opening: bool = False,
        max_idle_timeout_s: float = 3600.0,
    ) -> SessionSettings:
        """Settings after a ``session.update`` (or the opening session object)."""
        if not isinstance(patch, Mapping):
            raise RealtimeProtocolError("session must be an object", "invalid_session_config")
        payload = patch.get("session") if isinstance(patch.get("session"), Mapping) else patch
        changes: dict[str, Any] = {}
        kind = payload.get("type")
        if isinstance(kind, str) and kind != self.session_type:
            if not opening:
                # OpenAI refuses the other kind's update the same way.
                raise RealtimeProtocolError(
                    f"this is a {self.session_type} session: it cannot become a {kind} "
                    "session (open a new connection for that)",
                    "session_type_change_unsupported",
                    param="type",
                )
            changes["session_type"] = kind
        model = payload.get("model")
        # The model is chosen when the session opens. A later update naming another one
        # keeps it, and session.updated says which model answers: stock clients (the
        # Agents SDK) repeat their default model name in every update.
        if opening and isinstance(model, str) and model and model != self.model:
            changes["model"] = model
        fmt_in, fmt_out = _formats(payload, self.input_format, self.output_format)
        if fmt_in != self.input_format:
            changes["input_format"] = fmt_in
        if fmt_out != self.output_format:
            changes["output_format"] = fmt_out
        # Every value is read by the codec's reader of that field, the one check of it.
        modalities = read_output_modalities(payload)
        if modalities is not None:
            changes["modalities"] = modalities
        audio = payload.get("audio") if isinstance(payload.get("audio"), Mapping) else {}
        audio_out = audio.get("output") if isinstance(audio.get("output"), Mapping) else {}
        # A key sent as null clears the setting, as OpenAI's does.
        if "instructions" in payload:
            changes["instructions"] = read_instructions(payload)
        if "voice" in payload or "voice" in audio_out:
            changes["voice"] = read_voice(payload)
        if payload.get("temperature") is not None:
            changes["temperature"] = read_temperature(payload)
        tokens = read_max_output_tokens(payload)
        if tokens is not None:
            changes["max_output_tokens"] = None if tokens == "inf" else tokens
        present, raw_td, where = turn_detection_of(payload)
        if present:
            check_overlap_policy(payload, raw_td, present=True)
            td = validate_turn_detection(raw_td, field=where)
            changes["turn_detection"] = td
            changes["overlap_policy"] = overlap_policy_for(td)
        extra = payload.get("extra_body")
        extra = dict(extra) if isinstance(extra, Mapping) else {}
        sources = (payload, extra)
        for source in sources:
            policy = source.get("overlap_policy")
            if policy in _POLICIES and not present:
                changes["overlap_policy"] = policy
            commit_policy = source.get("playback_commit_policy")
            if commit_policy is not None:
                if commit_policy not in _COMMIT_POLICIES:
                    raise RealtimeProtocolError(
                        f"playback_commit_policy must be one of {', '.join(_COMMIT_POLICIES)}",
                        "invalid_session_config",
                        param="playback_commit_policy",
                    )
                changes["playback_commit_policy"] = commit_policy
            pacing = source.get("output_audio_pacing")
            if pacing is not None:
                if pacing not in PACINGS:
                    raise RealtimeProtocolError(
                        f"output_audio_pacing must be one of {', '.join(PACINGS)}",
                        "invalid_session_config",
                        param="output_audio_pacing",
                    )
                changes["output_audio_pacing"] = pacing
            lead_policy = source.get("output_audio_lead")
            if lead_policy is not None:
                if lead_policy not in LEAD_POLICIES:
                    raise RealtimeProtocolError(
                        f"output_audio_lead must be one of {', '.join(LEAD_POLICIES)}",
                        "invalid_session_config",
                        param="output_audio_lead",
                    )
                changes["output_audio_lead"] = lead_policy
            backchannel = source.get("backchannel_policy")
            if backchannel is not None:
                if backchannel not in BACKCHANNEL_POLICIES:
                    raise RealtimeProtocolError(
                        f"backchannel_policy must be one of {', '.join(BACKCHANNEL_POLICIES)}",
                        "invalid_session_config",
                        param="backchannel_policy",
                    )
                changes["backchannel_policy"] = backchannel
            for key in (
                "overlap_short_ack_ms",
                "overlap_barge_in_ms",
                "output_audio_lead_ms",
                "backchannel_max_ms",
            ):
                if source.get(key) is not None:
                    changes[key] = int(_number(source[key], key, maximum=_LONGEST_MS))
            if source.get("overlap_silence_rms") is not None:
                changes["overlap_silence_rms"] = _number(
                    source["overlap_silence_rms"], "overlap_silence_rms", maximum=1.0
                )
        if "auto_response" in extra:
            changes["auto_response"] = bool(extra["auto_response"])
        if payload.get("idle_timeout_s") is not None:
            changes["idle_timeout_s"] = min(
                _number(payload["idle_timeout_s"], "idle_timeout_s", minimum=1.0),
                max_idle_timeout_s,
            )
        ref_audio = payload.get("ref_audio", extra.get("ref_audio"))
        if ref_audio is not None:
            if not opening:
                raise RealtimeProtocolError(
                    "ref_audio can only be set when the session opens",
                    "ref_audio_update_unsupported",
                    param="ref_audio",
                )
            if not isinstance(ref_audio, str):
                raise RealtimeProtocolError(
                    "ref_audio must be a string", "bad_event", param="ref_audio"
                )
            changes["ref_audio"] = ref_audio
        if extra:
            changes["extra_body"] = {**self.extra_body, **extra}
        echoed = dict(self.echoed)
        if payload.get("tools") is not None:
            echoed["tools"] = check_tools(payload["tools"])
        if payload.get("tool_choice") is not None:
            echoed["tool_choice"] = check_tool_choice(payload["tool_choice"])
        for key in _ECHOED:
            if key in payload:
                echoed[key] = copy.deepcopy(payload[key])
        audio_in = audio.get("input") if isinstance(audio.get("input"), Mapping) else {}
        for nested, flat in _ECHOED_GA_INPUT.items():
            if nested in audio_in:
                echoed[flat] = copy.deepcopy(audio_in[nested])
        changes["echoed"] = echoed
        return replace(self, **changes)

    def as_model_config(self) -> dict[str, Any]:
        """What a plugin sees of the session (no wire shapes)."""
        return {
            "model": self.model,
            "modalities": list(self.modalities),
            "instructions": self.instructions,
            "voice": self.voice,
            "temperature": self.temperature,
            "max_output_tokens": self.max_output_tokens,
            "ref_audio": self.ref_audio,
            "include": list(self.echoed.get("include") or []),
            "extra_body": dict(self.extra_body),
        }

    def public_object(self, session: DuplexEngineSession) -> dict[str, Any]:
        """The session object of ``session.created`` / ``session.updated``.

        Built by the codec's one session-object builder: both spellings, the effective
        formats and rates, ``ref_audio`` by digest only (DESIGN decision 8), plus the
        engine's own keys.
        """
        state = {
            "state": session.state.value,
            "turn_state": session.turn_state.value,
            "epoch": session.epoch,
            "turn_id": session.turn_id,
            "overlap_policy": self.overlap_policy,
            "overlap_short_ack_ms": self.overlap_short_ack_ms,
            "overlap_barge_in_ms": self.overlap_barge_in_ms,
            "overlap_silence_rms": self.overlap_silence_rms,
            "backchannel_policy": self.backchannel_policy,
            "backchannel_max_ms": self.backchannel_max_ms,
            "playback_commit_policy": self.playback_commit_policy,
            "output_audio_pacing": self.output_audio_pacing,
            "output_audio_lead_ms": self.output_audio_lead_ms,
            "output_audio_lead": self.output_audio_lead,
            "output_audio_lead_now_ms": session.playout_lead_ms(),
            "auto_response": self.auto_response,
            "idle_timeout_s": session.lease.config.idle_ttl_s,
            "playback": session.current_playback().as_dict(),
            "capabilities": session.capabilities.as_dict(),
        }
        if self.transcription_only:
            return self._transcription_object(session, state)
        return build_session_object(
            session.session_id,
            model=self.model,
            formats=RealtimeInputDefaults(
                input_format=self.input_format,
                output_format=self.output_format,
                overlap_silence_rms=self.overlap_silence_rms,
            ),
            output_modalities=self.modalities,
            instructions=self.instructions,
            voice=self.voice,
            temperature=self.temperature,
            max_output_tokens=self.max_output_tokens,
            # semantic_vad on a plugin without a turn model says how it is served instead.
            turn_detection=served_turn_detection(
                self.turn_detection,
                semantic_supported=session.capabilities.supports_semantic_vad,
            ),
            ref_audio=self.ref_audio,
            state=state,
            client=self._client_view(session.capabilities.supports_input_transcription),
        )

    def _client_view(self, transcribes: bool) -> dict[str, Any]:
        """The client's echoed keys, with the input transcription as it is in force (the
        client's choice where the model transcribes, else none) and MCP tools without
        their secrets."""
        view = dict(self.echoed)
        if view.get("tools"):
            view["tools"] = [public_tool(tool) for tool in view["tools"]]
        if not transcribes and view.get("input_audio_transcription") is not None:
            view["input_audio_transcription"] = None
        return view

    def _transcription_object(
        self, session: DuplexEngineSession, state: dict[str, Any]
    ) -> dict[str, Any]:
        """A transcription session's object: its input audio, ``include`` and the
        engine's keys (what concerns responses and output does not apply)."""
        for key in [k for k in state if k.startswith(("output_", "playback"))]:
            del state[key]
        return build_transcription_session_object(
            session.session_id,
            input_format=self.input_format,
            input_rate_hz=self.input_format.effective_rate(DEFAULT_INPUT_RATE_HZ),
            transcription=self.echoed.get("input_audio_transcription"),
            noise_reduction=self.echoed.get("input_audio_noise_reduction"),
            turn_detection=served_turn_detection(
                self.turn_detection,
                semantic_supported=session.capabilities.supports_semantic_vad,
            ),
            include=self.echoed.get("include"),
            state=state,
        )
