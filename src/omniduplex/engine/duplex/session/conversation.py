"""The conversation as the engine keeps it: ordered Realtime items.

What the store holds is what the model sees as history and what
``conversation.item.retrieve`` returns. An assistant item holds only the text the user
heard when the session commits playback by acknowledgement (``ack_only``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


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
        """History as chat messages (role + content) for models that read history; a
        function call is an assistant message with ``tool_calls``, its output a
        ``role: tool`` message naming the call."""
        out: list[dict[str, Any]] = []
        for stored in self._items.values():
            item = stored.item
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

    def function_call(self, call_id: str) -> StoredItem | None:
        """The function call item with ``call_id``, if history holds one."""
        for stored in self._items.values():
            item = stored.item
            if item.get("type") == "function_call" and item.get("call_id") == call_id:
                return stored
        return None
