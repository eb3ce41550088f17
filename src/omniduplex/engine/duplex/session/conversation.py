"""The conversation as the engine keeps it: ordered Realtime items, and the client's
``conversation.item.*`` commands on them.

What the store holds is what the model sees as history and what
``conversation.item.retrieve`` returns. An assistant item holds only the text the user
heard when the session commits playback by acknowledgement (``ack_only``).
``ItemCommands`` is the runner's part that answers the item commands; a truncate of the
response still playing is the runner's to route (``Playback.stops_at``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ....protocol.duplex import commands as cmd
from ....protocol.duplex import truncate_transcript

if TYPE_CHECKING:
    from .emitter import SessionEmitter
    from .state import DuplexEngineSession


@dataclass(slots=True)
class StoredItem:
    item: dict[str, Any]
    full_transcript: str = ""
    audio_duration_ms: int = 0
    marks: list[dict[str, int]] = field(default_factory=list)
    response_id: str | None = None
    input_commit_seq: int = 0


class ConversationStore:
    """Items in insertion order, addressable by id."""

    def __init__(self) -> None:
        self._items: dict[str, StoredItem] = {}
        self._last_id: str | None = None

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[StoredItem]:
        return iter(list(self._items.values()))

    @property
    def last_item_id(self) -> str | None:
        return self._last_id

    def add(self, stored: StoredItem) -> str | None:
        """Append an item; returns the id of the item before it (``previous_item_id``)."""
        item_id = stored.item["id"]
        previous = self._last_id
        self._items.pop(item_id, None)
        self._items[item_id] = stored
        self._last_id = item_id
        return previous

    def get(self, item_id: str) -> StoredItem | None:
        return self._items.get(item_id)

    def snapshot(self, item_id: str) -> dict[str, Any] | None:
        stored = self._items.get(item_id)
        return copy.deepcopy(stored.item) if stored else None

    def delete(self, item_id: str) -> bool:
        if self._items.pop(item_id, None) is None:
            return False
        if self._last_id == item_id:
            self._last_id = next(reversed(self._items), None) if self._items else None
        return True

    def messages(self) -> list[dict[str, Any]]:
        """History as chat messages (``chat_messages``)."""
        return chat_messages(stored.item for stored in self._items.values())

    def function_call(self, call_id: str) -> StoredItem | None:
        """The function call item with ``call_id``, if history holds one."""
        for stored in self._items.values():
            item = stored.item
            if item.get("type") == "function_call" and item.get("call_id") == call_id:
                return stored
        return None


def chat_messages(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Items as chat messages (role + content) for models that read history; a function
    call is an assistant message with ``tool_calls``, its output a ``role: tool`` message
    naming the call."""
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            call = {"name": item.get("name"), "arguments": item.get("arguments") or ""}
            out.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": item.get("call_id"), "type": "function", "function": call}
                    ],
                }
            )
            continue
        if kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": output})
            continue
        if kind != "message":
            continue
        text = " ".join(
            part.get("text") or part.get("transcript") or ""
            for part in item.get("content", [])
            if isinstance(part, dict)
        ).strip()
        if text:
            out.append({"role": str(item.get("role", "user")), "content": text})
    return out


class ItemCommands:
    """``conversation.item.create`` / ``delete`` / ``retrieve`` / ``truncate``."""

    def __init__(self, session: DuplexEngineSession, out: SessionEmitter) -> None:
        self.session = session
        self.out = out

    def create(self, command: cmd.CreateItem) -> None:
        session = self.session
        item = dict(command.item)
        texts = [
            part.get("text")
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") in ("input_text", "text")
        ]
        if item.get("type") == "message" and item.get("role") == "user" and texts:
            if not session.capabilities.supports_text_input:
                self.out.error(
                    "text_only_turn_unsupported",
                    "this model cannot answer text input",
                    event_id=command.event_id,
                    param="item.content",
                )
                return
            session.pending_user_text = (
                session.pending_user_text + " " + " ".join(t for t in texts if isinstance(t, str))
            ).strip()
        if item.get("type") == "function_call_output":
            call_id = item.get("call_id")
            if session.items.function_call(call_id) is None:
                self.out.error(
                    "function_call_not_found",
                    f"No function call with call_id {call_id!r} in this conversation",
                    event_id=command.event_id,
                    param="item.call_id",
                )
                return
        previous = session.items.add(StoredItem(item=item))
        self.out.item_added(item, command.previous_item_id or previous, done=True)

    def delete(self, command: cmd.DeleteItem) -> None:
        if not self.session.items.delete(command.item_id):
            self.out.error(
                "item_not_found", f"Unknown item: {command.item_id}", event_id=command.event_id
            )
            return
        self.out.item_deleted(command.item_id)

    def retrieve(self, command: cmd.RetrieveItem) -> None:
        item = self.session.items.snapshot(command.item_id)
        if item is None:
            self.out.error(
                "item_not_found", f"Unknown item: {command.item_id}", event_id=command.event_id
            )
            return
        self.out.item_retrieved(item)

    def truncate(self, command: cmd.TruncateItem) -> None:
        """Truncate a stored assistant item's audio (and what history keeps of its
        transcript) at ``audio_end_ms``."""
        session, out = self.session, self.out
        stored = session.items.get(command.item_id)
        if stored is None:
            out.error(
                "item_not_found", f"Unknown item: {command.item_id}", event_id=command.event_id
            )
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
