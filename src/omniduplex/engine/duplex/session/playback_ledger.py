"""Playback truth: what the client says it played decides what history keeps.

``playback.ack`` moves a response's played/committed cursor forward (monotonic), or, with
``truncate: true`` (DESIGN decision 5), sets it exactly and truncates the assistant item
in history at ``played_ms``. ``conversation.item.truncate`` is the OpenAI spelling of a
truncating acknowledgement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....protocol.duplex import commands as cmd
from ....protocol.duplex import truncate_transcript

if TYPE_CHECKING:
    from .emitter import SessionEmitter
    from .state import DuplexEngineSession


def resolve_ack(session: DuplexEngineSession, command: cmd.AckPlayback) -> tuple[str, str] | None:
    """The (response id, item id) an ack names: by either, else the current or last one."""
    response_id = command.response_id
    item_id = command.item_id
    if response_id is None and item_id is not None and item_id.startswith("item_"):
        response_id = item_id[len("item_") :]
    if response_id is None:
        response_id = session.response.response_id if session.response else session.last_response_id
    if response_id is None:
        return None
    return response_id, item_id or f"item_{response_id}"


def apply_playback_ack(
    session: DuplexEngineSession, out: SessionEmitter, command: cmd.AckPlayback
) -> None:
    resolved = resolve_ack(session, command)
    if resolved is None:
        out.error(
            "playback_item_not_found", "No response to acknowledge", event_id=command.event_id
        )
        return
    response_id, item_id = resolved
    if item_id != f"item_{response_id}":
        out.error(
            "playback_item_mismatch",
            f"item {item_id} does not belong to response {response_id}",
            event_id=command.event_id,
        )
        return
    if response_id not in session.playback:
        out.error(
            "playback_item_not_found",
            f"Unknown assistant item: {item_id}",
            event_id=command.event_id,
        )
        return
    cursor = session.playback[response_id]
    played = max(0, int(command.played_ms))
    committed = played if command.committed_ms is None else max(0, int(command.committed_ms))
    if command.truncate:
        limit = max(cursor.sent_ms, cursor.generated_ms)
        cursor.played_ms = min(played, limit)
        cursor.committed_ms = min(committed, limit)
    else:
        cursor.played_ms = max(cursor.played_ms, played)
        cursor.committed_ms = max(cursor.committed_ms, committed)
    history_committed = _commit_history(
        session, item_id, cursor.committed_ms, hard=command.truncate
    )
    out.playback_acknowledged(
        item_id=item_id,
        played_ms=cursor.played_ms,
        committed_ms=cursor.committed_ms,
        truncate=command.truncate,
        playback=cursor.as_dict(),
        history_committed=history_committed,
    )


def _commit_history(
    session: DuplexEngineSession, item_id: str, committed_ms: int, *, hard: bool
) -> bool:
    """Rewrite the stored assistant item to the acknowledged prefix of its transcript."""
    if session.items.get(item_id) is None:
        return False  # still streaming: the item is stored when the response ends
    if session.settings.playback_commit_policy != "ack_only" and not hard:
        return True
    return truncate_stored_item(session, item_id, committed_ms)


def truncate_item(
    session: DuplexEngineSession, out: SessionEmitter, command: cmd.TruncateItem
) -> None:
    stored = session.items.get(command.item_id)
    if stored is None:
        out.error("item_not_found", f"Unknown item: {command.item_id}", event_id=command.event_id)
        return
    item = stored.item
    content = item.get("content") or []
    if item.get("role") != "assistant" or not (0 <= command.content_index < len(content)):
        out.error(
            "bad_event",
            "only the audio part of an assistant item can be truncated",
            event_id=command.event_id,
            param="content_index",
        )
        return
    if command.audio_end_ms > stored.audio_duration_ms:
        out.error(
            "bad_event",
            f"audio_end_ms {command.audio_end_ms} is past the item's audio "
            f"({stored.audio_duration_ms} ms)",
            event_id=command.event_id,
            param="audio_end_ms",
        )
        return
    heard = truncate_transcript(
        stored.full_transcript, command.audio_end_ms, stored.audio_duration_ms, stored.marks
    )
    content[command.content_index]["transcript"] = heard
    if stored.response_id in session.playback:
        cursor = session.playback[stored.response_id]
        cursor.played_ms = cursor.committed_ms = command.audio_end_ms
    out.item_truncated(command.item_id, command.content_index, command.audio_end_ms)


def truncate_stored_item(session: DuplexEngineSession, item_id: str, audio_end_ms: int) -> bool:
    """Cut a stored assistant item's audio and transcript at ``audio_end_ms`` (the server
    knows the user heard no more); False if there is no such item."""
    stored = session.items.get(item_id)
    if stored is None:
        return False
    heard = truncate_transcript(
        stored.full_transcript, audio_end_ms, stored.audio_duration_ms, stored.marks
    )
    for part in stored.item.get("content", []):
        if part.get("type") == "output_audio":
            part["transcript"] = heard
    return True
