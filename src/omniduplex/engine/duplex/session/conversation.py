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

from ....protocol.duplex import (
    RealtimeProtocolError,
    decode_image_url,
    image_part_indexes,
    truncate_transcript,
)
from ....protocol.duplex import commands as cmd
from ..plugin import DuplexModelPlugin, InputImage, InputImageError

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
    # An empty user turn committed by ``idle_timeout_ms``: the user said nothing this long.
    silent_ms: int | None = None


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
        """History as chat messages (``chat_messages``), idle timeouts' silences included."""
        stored = list(self._items.values())
        silences = {s.item["id"]: s.silent_ms for s in stored if s.silent_ms is not None}
        return chat_messages((s.item for s in stored), silences)

    def function_call(self, call_id: str) -> StoredItem | None:
        """The function call item with ``call_id``, if history holds one."""
        for stored in self._items.values():
            item = stored.item
            if item.get("type") == "function_call" and item.get("call_id") == call_id:
                return stored
        return None


def chat_messages(
    items: Iterable[Mapping[str, Any]], silences: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """Items as chat messages (role + content) for models that read history; a function
    call is an assistant message with ``tool_calls``, its output a ``role: tool`` message
    naming the call (so is a remote MCP call the server made, with its outcome); an idle
    timeout's empty user turn (its id in ``silences``, with how long the user said nothing)
    is a user message with no content and ``silent_ms``."""
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
        if kind == "mcp_call":
            out.extend(mcp_call_messages(item))
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
        elif silences and item.get("id") in silences:
            # The user went quiet: a model must know it was asked to speak into that.
            out.append({"role": "user", "content": "", "silent_ms": silences[item["id"]]})
    return out


def mcp_call_messages(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An ``mcp_call`` item as the model reads it: a tool call and its output (an error
    is the output, so the model can say what went wrong)."""
    error = item.get("error")
    output = item.get("output") if not error else f"Error: {error.get('message')}"
    call = {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": item.get("id"), "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": item.get("id"), "content": output or ""},
    ]


# Images history may hold at once (wire.md 7.3): their count and their URLs' characters.
MAX_HISTORY_IMAGES = 8
MAX_HISTORY_IMAGE_CHARS = 4 * 1024 * 1024


class ItemCommands:
    """``conversation.item.create`` / ``delete`` / ``retrieve`` / ``truncate``.

    An item is checked whole before any of it takes effect: a refused item leaves the
    conversation, the pending user text and the model's input as they were.
    """

    def __init__(
        self, session: DuplexEngineSession, out: SessionEmitter, plugin: DuplexModelPlugin
    ) -> None:
        self.session = session
        self.out = out
        self.plugin = plugin

    def create(self, command: cmd.CreateItem) -> dict[str, Any] | None:
        """Add the client's item; returns it, or ``None`` when it was refused."""
        session = self.session
        item = dict(command.item)
        user_message = item.get("type") == "message" and item.get("role") == "user"
        texts = [
            part.get("text")
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") in ("input_text", "text")
        ]
        if user_message and texts and not session.capabilities.supports_text_input:
            self.out.error(
                "text_only_turn_unsupported",
                "this model cannot answer text input",
                event_id=command.event_id,
                param="item.content",
            )
            return None
        images = self._images(item, command.event_id) if user_message else []
        if images is None:
            return None
        if images:
            try:
                self.plugin.take_input_images(session.model_state, images)
            except InputImageError as exc:
                index = image_part_indexes(item.get("content"))[exc.index]
                self.out.error(
                    "invalid_image",
                    str(exc),
                    event_id=command.event_id,
                    param=f"item.content[{index}].image_url",
                )
                return None
        if user_message and texts:
            session.pending_user_text = (
                session.pending_user_text + " " + " ".join(t for t in texts if isinstance(t, str))
            ).strip()
        if item.get("type") == "mcp_approval_response" and not self._answers_approval(
            item, command.event_id
        ):
            return None
        if item.get("type") == "function_call_output":
            call_id = item.get("call_id")
            if session.items.function_call(call_id) is None:
                self.out.error(
                    "function_call_not_found",
                    f"No function call with call_id {call_id!r} in this conversation",
                    event_id=command.event_id,
                    param="item.call_id",
                )
                return None
        previous = session.items.add(StoredItem(item=item))
        self.out.item_added(item, command.previous_item_id or previous, done=True)
        return item

    def _answers_approval(self, item: dict[str, Any], event_id: str | None) -> bool:
        """An ``mcp_approval_response`` names an approval request of this conversation
        that nothing answered yet (else it is refused, naming the field)."""
        request_id = item.get("approval_request_id")
        stored = self.session.items.get(request_id) if isinstance(request_id, str) else None
        if stored is None or stored.item.get("type") != "mcp_approval_request":
            self.out.error(
                "item_not_found",
                f"No mcp_approval_request with id {request_id!r} in this conversation",
                event_id=event_id,
                param="item.approval_request_id",
            )
            return False
        answered = any(
            other.item.get("type") == "mcp_approval_response"
            and other.item.get("approval_request_id") == request_id
            for other in self.session.items
        )
        if answered:
            self.out.error(
                "mcp_approval_already_answered",
                f"approval request {request_id} was already answered",
                event_id=event_id,
                param="item.approval_request_id",
            )
            return False
        return True

    def _images(self, item: dict[str, Any], event_id: str | None) -> list[InputImage] | None:
        """The item's images for the model, or ``None`` when the item is refused (the
        error already sent): a model that cannot see refuses the first image part."""
        content = item.get("content")
        indexes = image_part_indexes(content)
        if not indexes:
            return []
        if not self.session.capabilities.supports_image_input:
            self.out.error(
                "unsupported",
                "this model cannot see images: input_image content parts are not accepted",
                event_id=event_id,
                param=f"item.content[{indexes[0]}]",
            )
            return None
        held = [
            len(part.get("image_url") or "")
            for stored in self.session.items
            for part in stored.item.get("content") or []
            if isinstance(part, dict) and part.get("type") == "input_image"
        ]
        sizes = held + [len(content[index].get("image_url") or "") for index in indexes]
        if len(sizes) > MAX_HISTORY_IMAGES or sum(sizes) > MAX_HISTORY_IMAGE_CHARS:
            self.out.error(
                "input_backpressure",
                f"the conversation holds at most {MAX_HISTORY_IMAGES} images and"
                f" {MAX_HISTORY_IMAGE_CHARS} characters of image URLs; delete an image item"
                " before adding more",
                event_id=event_id,
                param=f"item.content[{indexes[0]}]",
            )
            return None
        images: list[InputImage] = []
        for index in indexes:
            part = content[index]
            where = f"item.content[{index}].image_url"
            try:
                mime_type, data = decode_image_url(part.get("image_url"), where)
            except RealtimeProtocolError as exc:  # the wire checked it: only a bug lands here
                self.out.error(exc.code, exc.message, event_id=event_id, param=where)
                return None
            images.append(InputImage(mime_type, data, str(part.get("detail") or "auto")))
        return images

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
