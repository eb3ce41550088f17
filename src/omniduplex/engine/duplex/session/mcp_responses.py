"""The part of a response that is remote MCP calls (``ResponseFlow`` mixes it in).

A response whose model calls a tool of a declared MCP server (``mcp_servers``) has the
server make the call: an ``mcp_call`` output item whose arguments stream as the model
writes them, then the call, run by the session's ``McpServers`` and answered through the
mailbox (``McpCallDone``). Once the model's request is done and no call runs, a further
round of the model is given the calls and their outputs and speaks, in the same
response. A tool that needs approval asks with an ``mcp_approval_request`` item instead;
the client's ``mcp_approval_response`` starts the response that runs the call (or says it
was refused). A response that ends with a call running (a cancel, a talk-over, a failure)
cancels it and ends its item failed before ``response.done``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ....protocol.duplex import RealtimeProtocolError
from ..contracts import stage_request_id
from ..mcp.tool_spec import MCP_TOOL_TYPE
from ..plugin import ModelToolCall, ResponseRequest
from .conversation import StoredItem, mcp_call_messages
from .mcp_servers import CANCELLED_CODE, McpCallDone
from .state import ActiveResponse, McpCallEntry, new_item_id

if TYPE_CHECKING:
    from .context import SessionContext
    from .emitter import SessionEmitter
    from .state import DuplexEngineSession

# Rounds of MCP calls one response may make before it must answer in words.
MAX_TOOL_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class ToolOffer:
    """What a response may call: function tools for the model, its choice, and which of
    those names are remote MCP tools (name -> server label)."""

    tools: list[dict[str, Any]]
    choice: Any
    mcp_owners: dict[str, str]


class McpResponses(ABC):
    """Remote MCP calls within responses; the host (``ResponseFlow``) opens responses,
    offers tools, builds and submits the model's requests."""

    ctx: SessionContext
    session: DuplexEngineSession
    out: SessionEmitter

    # ---- what the host provides ------------------------------------------------------

    @abstractmethod
    def _open(self, options: dict[str, Any]) -> ActiveResponse:
        """A new active response, announced."""

    @abstractmethod
    def _tools(self, options: dict[str, Any]) -> ToolOffer:
        """What a response with these options may call."""

    @abstractmethod
    def _request(
        self,
        response_id: str,
        options: dict[str, Any],
        offer: ToolOffer,
        *,
        history: list[dict[str, Any]],
        audio: np.ndarray,
        text: str,
        input_streamed: bool,
        opening: bool,
    ) -> ResponseRequest:
        """A model request for ``response_id``."""

    @abstractmethod
    def _submit(self, response: ActiveResponse, request_id: str, request: ResponseRequest) -> None:
        """Add ``request`` to the response and send it to the model."""

    # ---- calls -----------------------------------------------------------------------

    def _check_response_mcp_tools(self, tools: list[dict[str, Any]]) -> None:
        """A response's ``mcp`` tool names a server the session declared (and listed):
        a connection is the session's, opened and listed when ``session.update`` said so."""
        for index, tool in enumerate(tools):
            if tool.get("type") == MCP_TOOL_TYPE and not self.ctx.mcp.declares(
                tool["server_label"]
            ):
                raise RealtimeProtocolError(
                    f"response.tools[{index}]: MCP server {tool['server_label']!r} is not "
                    "declared in session.tools (declare it there first: its tools are listed "
                    "when the session declares it)",
                    "invalid_tool",
                    param=f"response.tools[{index}].server_label",
                )

    def _on_mcp_tool_call(
        self, response: ActiveResponse, result: ModelToolCall, label: str | None
    ) -> None:
        """The model calls an MCP tool: an ``mcp_call`` item whose arguments stream, then
        the server makes the call; a tool that needs approval asks for it instead with an
        ``mcp_approval_request`` item once the arguments are whole."""
        entry = response.mcp_calls.get(result.call_id)
        if entry is None:
            assert label is not None
            kind = (
                "mcp_approval_request"
                if self.ctx.mcp.needs_approval(label, result.name)
                else "mcp_call"
            )
            item = _mcp_item(kind, label, result.name)
            entry = McpCallEntry(
                item=item, output_index=response.outputs_opened, server_label=label
            )
            response.outputs_opened += 1
            response.mcp_calls[result.call_id] = entry
            if not entry.asks_approval:
                self._open_mcp_item(response, entry)
        if entry.running or entry.done:
            return
        if result.arguments:
            entry.item["arguments"] += result.arguments
            if not entry.asks_approval:
                self.out.mcp_arguments_delta(response, entry, result.arguments)
        if not result.done:
            return
        if entry.asks_approval:
            self._open_mcp_item(response, entry)
            self._keep(response, entry.item)
            self._end_mcp_item(response, entry)
            return
        self.out.mcp_arguments_done(response, entry)
        self._run_mcp_call(response, entry)

    def _open_mcp_item(self, response: ActiveResponse, entry: McpCallEntry) -> None:
        entry.opened = True
        self.out.mcp_item_opened(response, entry)

    def _end_mcp_item(self, response: ActiveResponse, entry: McpCallEntry) -> None:
        entry.done = True
        self.out.mcp_item_done(response, entry)

    def _run_mcp_call(self, response: ActiveResponse, entry: McpCallEntry) -> None:
        entry.running = True
        # In history before it runs: a client may retrieve it while it does.
        self._keep(response, entry.item)
        self.out.mcp_call_running(entry)
        self.ctx.mcp.start_call(
            response_id=response.response_id,
            item_id=entry.item["id"],
            label=entry.server_label,
            name=entry.item["name"],
            arguments=entry.item["arguments"],
        )

    def _keep(self, response: ActiveResponse, item: dict[str, Any]) -> None:
        if response.in_conversation:
            self.session.items.add(StoredItem(item=item, response_id=response.response_id))

    def on_mcp_call_done(self, done: McpCallDone) -> None:
        """A call's outcome (from the mailbox): into its item, then the model speaks it
        once it is done generating. A call of a response that ended (a talk-over, a
        cancel: a later epoch) is already closed and is dropped."""
        response = self.session.response
        if (
            response is None
            or response.response_id != done.response_id
            or done.epoch != self.session.epoch
        ):
            return
        entry = next((e for e in response.mcp_calls.values() if e.item["id"] == done.item_id), None)
        if entry is None or not entry.running:
            return
        entry.running = False
        result = done.result
        entry.item["output"] = result.output
        entry.item["error"] = result.error
        self._end_mcp_item(response, entry)
        response.tool_messages.extend(mcp_call_messages(entry.item))
        response.answer_owed = True
        self._answer_tools(response)

    def _answer_tools(self, response: ActiveResponse) -> None:
        """Once the model's request is done and no call runs, a further round of the model
        speaks the outputs (another call it makes there runs the same way)."""
        if response.model_generating or any(e.running for e in response.mcp_calls.values()):
            return
        if not response.answer_owed:
            return
        response.answer_owed = False
        response.tool_rounds += 1
        options = dict(response.options)
        offer = self._tools(options)
        if response.tool_rounds >= MAX_TOOL_ROUNDS:
            offer = ToolOffer([], "none", {})  # enough calls: answer with what came back
        response.mcp_tools = offer.mcp_owners
        request = self._request(
            response.response_id,
            options,
            offer,
            history=response.base_history + response.tool_messages,
            audio=_EMPTY,
            text="",
            input_streamed=False,
            opening=True,
        )
        session = self.session
        request_id = stage_request_id(
            session.fence, f"resp{session.response_counter}t{response.tool_rounds}"
        )
        self._submit(response, request_id, request)

    def on_mcp_approval(self, response_item: dict[str, Any]) -> None:
        """The client answered an approval request: a response runs the call (approved)
        or tells the model it was refused; behind an active response, once it ends."""
        session = self.session
        if session.response is not None:
            session.deferred_approvals.append(response_item["id"])
            return
        stored = session.items.get(response_item["approval_request_id"])
        if stored is None:  # deleted meanwhile: nothing left to run
            return
        asked = stored.item
        response = self._open({})
        response.base_history = session.items.messages()
        label = str(asked.get("server_label"))
        item = _mcp_item("mcp_call", label, str(asked.get("name")))
        item["arguments"] = str(asked.get("arguments") or "")
        item["approval_request_id"] = asked["id"]
        entry = McpCallEntry(item=item, output_index=0, server_label=label)
        response.outputs_opened = 1
        response.mcp_calls[item["id"]] = entry
        response.mcp_tools = self._tools({}).mcp_owners
        if response_item.get("approve") and self.ctx.mcp.declares(label):
            self._open_mcp_item(response, entry)
            self.out.mcp_arguments_done(response, entry)
            self._run_mcp_call(response, entry)
            return
        if response_item.get("approve"):
            # Approved, but the session no longer declares that server.
            refusal = f"The MCP server {label} is no longer available."
        else:
            reason = response_item.get("reason")
            refusal = "The user declined this call" + (f": {reason}" if reason else ".")
        item["error"] = {"type": "tool_execution_error", "message": refusal}
        response.mcp_calls.clear()
        response.outputs_opened = 0
        response.tool_messages.extend(mcp_call_messages(item))
        response.answer_owed = True
        self._answer_tools(response)

    def _close_mcp_calls(self, response: ActiveResponse) -> None:
        """A response ending with MCP items still open (a cancel, a talk-over, a failure):
        their calls are cancelled and the items end failed; an approval request whose
        arguments never finished was never announced and is forgotten."""
        self.ctx.mcp.cancel_calls(response.response_id)
        for key, entry in list(response.mcp_calls.items()):
            if not entry.opened:
                del response.mcp_calls[key]
            elif not entry.done:
                entry.running = False
                entry.item["error"] = {
                    "type": "protocol_error",
                    "code": CANCELLED_CODE,
                    "message": "the call was cancelled: its response ended",
                }
                self._end_mcp_item(response, entry)


def _mcp_item(kind: str, label: str, name: str) -> dict[str, Any]:
    """A new ``mcp_call`` or ``mcp_approval_request`` item, its arguments still to come.
    A call shows its outcome fields from the start, null until it is back (stock clients
    read them on ``response.output_item.added``)."""
    item: dict[str, Any] = {
        "id": new_item_id(),
        "object": "realtime.item",
        "type": kind,
        "server_label": label,
        "name": name,
        "arguments": "",
    }
    if kind == "mcp_call":
        item.update(approval_request_id=None, output=None, error=None)
    return item


_EMPTY = np.zeros(0, dtype=np.float32)
