"""Every error code the server sends and the one table that classes each of them.

Where OpenAI's Realtime API has a code for the same situation we send that code (and its
message prefix, since frameworks key on both): ``OPENAI_CODES`` lists them. The rest are
ours. Every code is listed here with its OpenAI error class. Server faults are
``server_error``, capacity and pacing limits ``rate_limit_error``, everything the client
can fix ``invalid_request_error``.
An unknown code is classed ``server_error``: a code we forgot to list is our fault.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from ..realtime.errors import (
    INVALID_REQUEST_ERROR,
    RATE_LIMIT_ERROR,
    SERVER_ERROR,
    RealtimeProtocolError,
)

_CLIENT: Final = INVALID_REQUEST_ERROR
_SERVER: Final = SERVER_ERROR
_RATE: Final = RATE_LIMIT_ERROR

ERROR_CLASS_BY_CODE: Final = MappingProxyType(
    {
        # envelope and decoding
        "bad_event": _CLIENT,
        "bad_audio": _CLIENT,
        "invalid_json": _CLIENT,
        "binary_frame_unsupported": _CLIENT,
        "event_too_large": _CLIENT,
        "unknown_event": _CLIENT,
        "config_timeout": _CLIENT,
        "unsupported_audio_format": _CLIENT,
        "unsupported_turn_detection": _CLIENT,
        "invalid_video_frames": _CLIENT,
        "invalid_input_modality": _CLIENT,
        "missing_item_id": _CLIENT,
        "invalid_session_config": _CLIENT,
        # transcription sessions: a model without a transcriber, a session that would
        # change its kind, a response asked of a session that only transcribes
        "transcription_unsupported": _CLIENT,
        "session_type_change_unsupported": _CLIENT,
        "transcription_session_response_unsupported": _CLIENT,
        "invalid_event_ack": _CLIENT,
        # sessions, handshake and resume
        "session_exists": _CLIENT,
        "session_closed": _CLIENT,
        "unknown_session": _CLIENT,
        "session_required": _CLIENT,
        "invalid_session_resume": _CLIENT,
        "session_resume_expired": _CLIENT,
        "unsupported_session_resume": _CLIENT,
        "invalid_resume_token": _CLIENT,
        "session_resume_conflict": _CLIENT,
        "unauthorized": _CLIENT,
        "host_not_allowed": _CLIENT,
        "origin_not_allowed": _CLIENT,
        "route_not_available": _CLIENT,
        "http_error": _CLIENT,
        "resource_exhausted": _RATE,
        "input_backpressure": _RATE,
        "server_input_audio_full": _RATE,
        # session configuration
        "invalid_duplex_runtime_config": _CLIENT,
        "instructions_update_unsupported": _CLIENT,
        "persona_update_unsupported": _CLIENT,
        "voice_update_unsupported": _CLIENT,
        "voice_update_after_audio_unsupported": _CLIENT,
        "ref_audio_update_unsupported": _CLIENT,
        "ref_audio_required": _CLIENT,
        "unsupported_ref_audio_path": _CLIENT,
        # a voice the model has no prompt for, or one it cannot read (personaplex)
        "invalid_voice": _CLIENT,
        "unsupported_voice": _CLIENT,
        # responses and input turns
        "unsupported_response_option": _CLIENT,
        "unsupported_native_response_options": _CLIENT,
        "conversation_already_has_active_response": _CLIENT,
        "response_cancel_not_active": _CLIENT,
        "text_only_turn_unsupported": _CLIENT,
        "native_text_append_unsupported": _CLIENT,
        "input_audio_buffer_commit_empty": _CLIENT,
        "input_audio_buffer_full": _CLIENT,
        "barge_in_unsupported": _CLIENT,
        "truncate_unsupported": _CLIENT,
        # items and playback
        "item_not_found": _CLIENT,
        "invalid_function_call_output": _CLIENT,
        "function_call_not_found": _CLIENT,
        "invalid_tool": _CLIENT,
        "mcp_server_url_not_allowed": _CLIENT,
        "mcp_approval_already_answered": _CLIENT,
        "invalid_tool_choice": _CLIENT,
        "invalid_image": _CLIENT,
        "unsupported": _CLIENT,
        "playback_item_mismatch": _CLIENT,
        "playback_item_not_found": _CLIENT,
        "playback_ack_too_late": _CLIENT,
        # server faults
        "internal_error": _SERVER,
        "output_audio_backlog_full": _SERVER,
        "engine_error": _SERVER,
        "commit_aborted": _SERVER,
        "session_update_aborted": _SERVER,
        "realtime_input_failed": _SERVER,
        "runtime_append_failed": _SERVER,
        "runtime_append_task_failed": _SERVER,
        "runtime_signal_failed": _SERVER,
        "runtime_abort_failed": _SERVER,
        "runtime_touch_failed": _SERVER,
        "runtime_resume_failed": _SERVER,
        "runtime_data_plane_stream_failed": _SERVER,
        "runtime_data_plane_text_without_audio": _SERVER,
        "server_vad_unavailable": _SERVER,
        "model_backend_failed": _SERVER,
        "input_transcription_failed": _SERVER,
        "stage_worker_died": _SERVER,
        "engine_unavailable": _SERVER,
        "server_shutting_down": _SERVER,
        "server_starting": _SERVER,
    }
)

ERROR_CODES: Final[frozenset[str]] = frozenset(ERROR_CLASS_BY_CODE)

#: Codes OpenAI's Realtime API defines for the same situation, with the message prefix it
#: sends (LiveKit matches "Cancellation failed"; Pipecat treats every other code as fatal).
OPENAI_CODES: Final = MappingProxyType(
    {
        "response_cancel_not_active": "Cancellation failed: no active response found",
        "conversation_already_has_active_response": (
            "Conversation already has an active response in progress"
        ),
        "input_audio_buffer_commit_empty": (
            "Error committing input audio buffer: buffer too small"
        ),
    }
)


def error_class_for(code: str) -> str:
    """The OpenAI error class of ``code``; an unlisted code is a server fault."""
    return ERROR_CLASS_BY_CODE.get(code, SERVER_ERROR)


class DuplexCommandError(RealtimeProtocolError):
    """A command the duplex surface refuses, carrying one of the codes above."""


__all__ = [
    "ERROR_CLASS_BY_CODE",
    "ERROR_CODES",
    "OPENAI_CODES",
    "DuplexCommandError",
    "RealtimeProtocolError",
    "error_class_for",
]
