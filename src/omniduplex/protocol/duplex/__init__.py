"""The one door to the wire codec for the engine, the serving layer and the clients.

Tier 2 and Tier 3 live here (``events``, ``commands``, ``errors``); the Tier 1 helpers the
duplex stack needs (audio conversion, formats, session readers, items, capabilities) are
re-exported below, so no consumer imports ``protocol.realtime`` directly. A helper that
later needs a duplex-specific version is overridden here, in one place.
"""

from ..realtime.audio import (
    InputAudioConverter,
    OutputAudioEncoder,
    b64decode_strict,
    b64encode_str,
    decode_audio,
    decode_wav,
    encode_audio,
    encode_wav,
    resample,
    rms,
)
from ..realtime.audio_input import RealtimeAudioAppend, decode_audio_append
from ..realtime.base import Dialect, RealtimeCommand, RealtimeEvent, new_event_id
from ..realtime.cancel_rule import cancelled_response_id, media_response_id
from ..realtime.capabilities import PERMISSIVE_CAPABILITIES, RealtimeProtocolCapabilities
from ..realtime.errors import RealtimeProtocolError, error_body
from ..realtime.formats import (
    DEFAULT_INPUT_RATE_HZ,
    DEFAULT_OUTPUT_RATE_HZ,
    INPUT_AUDIO_FORMATS,
    OUTPUT_AUDIO_FORMATS,
    AudioFormat,
    parse_audio_format,
    parse_input_format,
    parse_output_format,
)
from ..realtime.images import IMAGE_SIGNATURES, decode_image_url, image_part_indexes
from ..realtime.items import (
    assistant_item_id,
    normalize_item,
    response_id_of_item,
    truncate_item,
    truncate_transcript,
    validate_truncate,
)
from ..realtime.session import (
    SESSION_TYPE,
    RealtimeInputDefaults,
    build_session_object,
    next_input_defaults,
    read_input_format,
    read_instructions,
    read_max_output_tokens,
    read_output_format,
    read_output_modalities,
    read_temperature,
    read_voice,
    ref_audio_digest,
    validate_session,
)
from ..realtime.session_patch import FieldRejection, PartialUpdate, apply_partially
from ..realtime.transcription_session import (
    LOGPROBS_INCLUDE,
    TRANSCRIPTION_INTENT,
    TRANSCRIPTION_SESSION_TYPE,
    build_transcription_session_object,
    is_transcription,
    wants_logprobs,
)
from ..realtime.turn_detection import (
    IDLE_TIMEOUT_KEY,
    check_overlap_policy,
    overlap_policy_for,
    turn_detection_of,
    validate_turn_detection,
)
from . import commands, events
from .commands import command_from_realtime, decode_client_frame, parse_client_frame
from .errors import ERROR_CLASS_BY_CODE, DuplexCommandError, error_class_for
from .events import DuplexEvent, ErrorEvent, event_from_realtime

__all__ = [
    "DEFAULT_INPUT_RATE_HZ",
    "DEFAULT_OUTPUT_RATE_HZ",
    "ERROR_CLASS_BY_CODE",
    "IDLE_TIMEOUT_KEY",
    "IMAGE_SIGNATURES",
    "INPUT_AUDIO_FORMATS",
    "LOGPROBS_INCLUDE",
    "OUTPUT_AUDIO_FORMATS",
    "PERMISSIVE_CAPABILITIES",
    "SESSION_TYPE",
    "TRANSCRIPTION_INTENT",
    "TRANSCRIPTION_SESSION_TYPE",
    "AudioFormat",
    "Dialect",
    "DuplexCommandError",
    "DuplexEvent",
    "ErrorEvent",
    "FieldRejection",
    "InputAudioConverter",
    "OutputAudioEncoder",
    "PartialUpdate",
    "RealtimeAudioAppend",
    "RealtimeCommand",
    "RealtimeEvent",
    "RealtimeInputDefaults",
    "RealtimeProtocolCapabilities",
    "RealtimeProtocolError",
    "apply_partially",
    "assistant_item_id",
    "b64decode_strict",
    "b64encode_str",
    "build_session_object",
    "build_transcription_session_object",
    "cancelled_response_id",
    "check_overlap_policy",
    "command_from_realtime",
    "commands",
    "decode_audio",
    "decode_audio_append",
    "decode_client_frame",
    "decode_image_url",
    "decode_wav",
    "encode_audio",
    "encode_wav",
    "error_body",
    "error_class_for",
    "event_from_realtime",
    "events",
    "image_part_indexes",
    "is_transcription",
    "media_response_id",
    "new_event_id",
    "next_input_defaults",
    "normalize_item",
    "overlap_policy_for",
    "parse_audio_format",
    "parse_client_frame",
    "parse_input_format",
    "parse_output_format",
    "read_input_format",
    "read_instructions",
    "read_max_output_tokens",
    "read_output_format",
    "read_output_modalities",
    "read_temperature",
    "read_voice",
    "ref_audio_digest",
    "resample",
    "response_id_of_item",
    "rms",
    "truncate_item",
    "truncate_transcript",
    "turn_detection_of",
    "validate_session",
    "validate_truncate",
    "validate_turn_detection",
    "wants_logprobs",
]
