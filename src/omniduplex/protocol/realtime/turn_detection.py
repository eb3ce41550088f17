"""``turn_detection`` in a session object: where it is, what we accept, what we echo.

We serve OpenAI's ``server_vad`` (a VAD ends the turn after a silence), ``semantic_vad``
(a turn-completion model decides whether the user has finished; ``eagerness`` bounds how
long a turn that sounds unfinished may wait) and ``null`` (the client or the model decides
turns). How a plugin without a turn-completion model serves ``semantic_vad`` is the
engine's business (``engine/duplex/session/turn_detection.py``); here it is validated and
normalised only.

Every refusal names the narrowest param it can: ``<field>.<key>`` when one key of the
object cannot be honoured (the rest of the object still can; a bad ``<field>.type`` leaves
nothing to honour), ``<field>`` when the object is not an object at all. ``<field>`` is
where the client put it (``turn_detection`` or ``audio.input.turn_detection``), so a
partial ``session.update`` can drop exactly that.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from .errors import RealtimeProtocolError
from .wire_values import fail, is_number, non_negative_int, quote

TURN_DETECTION_PARAM: Final = "turn_detection"
TURN_DETECTION_CODE: Final = "unsupported_turn_detection"
SERVER_VAD: Final = "server_vad"
SEMANTIC_VAD: Final = "semantic_vad"
TURN_DETECTION_TYPES: Final = (SERVER_VAD, SEMANTIC_VAD)

# Echoed under the client's own values; create_response follows OpenAI's default (decision 16).
TURN_DETECTION_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "type": SERVER_VAD,
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "min_speech_duration_ms": 96,
        "create_response": True,
        "interrupt_response": True,
    }
)
# OpenAI's semantic_vad object has exactly these keys; "auto" is OpenAI's default eagerness.
SEMANTIC_VAD_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "type": SEMANTIC_VAD,
        "eagerness": "auto",
        "create_response": True,
        "interrupt_response": True,
    }
)
EAGERNESS: Final = ("low", "medium", "high", "auto")
_DURATION_KEYS: Final = ("prefix_padding_ms", "silence_duration_ms", "min_speech_duration_ms")
# OpenAI's server_vad key: after this much silence following the assistant's audio, the
# user is prompted (``engine/duplex/session/idle_timeout.py``). OpenAI's API reference
# bounds it to 5 to 30 s; it is absent from the echo unless the client set it. OpenAI
# serves it under server_vad only: semantic_vad takes null alone.
IDLE_TIMEOUT_KEY: Final = "idle_timeout_ms"
IDLE_TIMEOUT_RANGE_MS: Final = (5000, 30000)
TURN_DETECTION_KEYS: Final[frozenset[str]] = frozenset(TURN_DETECTION_DEFAULTS) | {IDLE_TIMEOUT_KEY}
# Under semantic_vad the VAD still finds candidate ends of speech: its threshold, padding and
# minimum speech are ours to tune. silence_duration_ms is not (eagerness sets the wait).
_SEMANTIC_TUNING_KEYS: Final = ("threshold", "prefix_padding_ms", "min_speech_duration_ms")
SEMANTIC_VAD_KEYS: Final[frozenset[str]] = (
    frozenset(SEMANTIC_VAD_DEFAULTS) | frozenset(_SEMANTIC_TUNING_KEYS) | {IDLE_TIMEOUT_KEY}
)
# Below this Silero fires on breathing and room noise.
MIN_THRESHOLD_EXCLUSIVE: Final = 0.15

BARGE_IN_ON_SPEECH: Final = "barge_in_on_speech"
LISTEN_ONLY: Final = "listen_only"


def _refuse(message: str, param: str = TURN_DETECTION_PARAM) -> RealtimeProtocolError:
    return fail(message, param, TURN_DETECTION_CODE)


def turn_detection_of(session: Mapping[str, Any]) -> tuple[bool, Any, str]:
    """``(present, raw value, where)`` of a session's turn detection.

    ``audio.input.turn_detection`` wins over the flat ``turn_detection`` when both are given;
    a key given as ``null`` is present (it turns detection off).
    """
    audio = session.get("audio")
    audio_input = audio.get("input") if isinstance(audio, Mapping) else None
    if isinstance(audio_input, Mapping) and "turn_detection" in audio_input:
        return True, audio_input["turn_detection"], "audio.input.turn_detection"
    if "turn_detection" in session:
        return True, session["turn_detection"], "turn_detection"
    return False, None, "turn_detection"


def validate_turn_detection(raw: Any, *, field: str = "turn_detection") -> dict[str, Any] | None:
    """The normalised turn detection (defaults under the client's values), or ``None``.

    Raises ``unsupported_turn_detection`` for anything but ``null``, a valid
    ``server_vad`` or a valid ``semantic_vad`` object: param ``field`` when the object is
    unusable, ``field.key`` for the first key that cannot be honoured.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _refuse(f"{field} must be an object or null", field)
    kind = raw.get("type")
    if kind not in TURN_DETECTION_TYPES:
        raise _refuse(
            f"{field}.type must be 'server_vad' or 'semantic_vad' (got {quote(kind)})",
            f"{field}.type",
        )
    semantic = kind == SEMANTIC_VAD
    known = SEMANTIC_VAD_KEYS if semantic else TURN_DETECTION_KEYS
    unknown = sorted(str(key) for key in raw if key not in known)
    if unknown:
        key = unknown[0]
        hint = " (semantic_vad waits by eagerness)" if key == "silence_duration_ms" else ""
        raise _refuse(f"Unknown {kind} field {quote(key)} in {field}{hint}", f"{field}.{key}")
    out = dict(SEMANTIC_VAD_DEFAULTS if semantic else TURN_DETECTION_DEFAULTS)
    threshold = raw.get("threshold")
    if threshold is not None:
        if not is_number(threshold) or not MIN_THRESHOLD_EXCLUSIVE < threshold <= 1:
            raise _refuse(
                f"{field}.threshold must be a number > {MIN_THRESHOLD_EXCLUSIVE} and <= 1",
                f"{field}.threshold",
            )
        out["threshold"] = threshold
    for key in _DURATION_KEYS:
        value = raw.get(key)
        if value is None:
            continue
        # OpenAI's durations are integers of milliseconds; 500.0 is one, 1.5 is not.
        out[key] = non_negative_int(value, f"{field}.{key}", TURN_DETECTION_CODE)
    if semantic:
        eagerness = raw.get("eagerness")
        if eagerness is not None:
            if eagerness not in EAGERNESS:
                raise _refuse(
                    f"{field}.eagerness must be one of {', '.join(EAGERNESS)}",
                    f"{field}.eagerness",
                )
            out["eagerness"] = eagerness
    create_response = raw.get("create_response")
    if create_response is not None:
        if not isinstance(create_response, bool):
            raise _refuse(f"{field}.create_response must be a boolean", f"{field}.create_response")
        out["create_response"] = create_response
    interrupt = raw.get("interrupt_response")
    if interrupt is not None and interrupt is not True:
        raise _refuse(
            f"{field}.interrupt_response=false is unsupported; "
            "use turn_detection=null for model-owned listen/speak",
            f"{field}.interrupt_response",
        )
    idle_timeout = raw.get(IDLE_TIMEOUT_KEY)
    if idle_timeout is not None:
        out[IDLE_TIMEOUT_KEY] = _idle_timeout_ms(idle_timeout, field, semantic=semantic)
    return out


def _idle_timeout_ms(value: Any, field: str, *, semantic: bool) -> int:
    """A valid ``idle_timeout_ms`` as an int; refused naming ``<field>.idle_timeout_ms``."""
    param = f"{field}.{IDLE_TIMEOUT_KEY}"
    if semantic:
        raise _refuse(f"{param} is supported under server_vad only (OpenAI's rule)", param)
    low, high = IDLE_TIMEOUT_RANGE_MS
    integral = is_number(value) and float(value).is_integer()
    if not integral or not low <= value <= high:
        message = f"{param} must be an integer from {low} to {high} (got {quote(value)})"
        raise _refuse(message, param)
    return int(value)


def overlap_policy_for(turn_detection: Mapping[str, Any] | None) -> str:
    """The overlap policy a turn detection implies: VAD barges in, no VAD only listens."""
    return BARGE_IN_ON_SPEECH if turn_detection is not None else LISTEN_ONLY


def check_overlap_policy(session: Mapping[str, Any], turn_detection: Any, *, present: bool) -> None:
    """Refuse an ``overlap_policy`` that contradicts the turn detection sent with it.

    Only the two policies a turn detection implies can contradict it; other strings are the
    engine's to normalise. Without a turn detection in the same object there is nothing to
    compare against here (the session's current one is engine state). The refusal names
    the policy (flat or under ``extra_body``): the turn detection itself is valid.
    """
    if not present:
        return
    extra = session.get("extra_body")
    policy = session.get("overlap_policy")
    param = "overlap_policy"
    if policy is None and isinstance(extra, Mapping):
        policy = extra.get("overlap_policy")
        param = "extra_body.overlap_policy"
    if policy not in (BARGE_IN_ON_SPEECH, LISTEN_ONLY):
        return
    implied = overlap_policy_for(turn_detection)
    if policy != implied:
        kind = turn_detection.get("type", "vad") if isinstance(turn_detection, Mapping) else "null"
        raise _refuse(
            f"overlap_policy {policy!r} contradicts turn_detection ({kind} requires {implied!r})",
            param,
        )
