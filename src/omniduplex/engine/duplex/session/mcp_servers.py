"""The session's remote MCP servers: their connections, their listed tools, their calls.

Part of the session runner, on the orchestrator loop. Each ``mcp`` tool the session
declares gets one connection, opened when ``session.update`` declares it and closed when
an update drops or changes it (URL or headers) or the session closes. Opening lists the
server's tools into an ``mcp_list_tools`` item (``conversation.item.added``,
``mcp_list_tools.in_progress``, then ``.completed`` and ``conversation.item.done`` with
the tools ``allowed_tools`` lets through, or ``.failed``). A listed tool is offered to the
model as a function tool; when the model calls one, the response (``response_flow``)
asks this part to run it.

Nothing here awaits inside a mailbox step: opening and calling run as tasks that post
their outcome back to the runner's mailbox (``McpListed``, ``McpCallDone``), where the
single writer applies it. A call's outcome carries the epoch it started in, so a call a
talk-over cancelled can never speak into a later response.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ....protocol.duplex import RealtimeProtocolError
from ....protocol.duplex import events as ev
from ..mcp import (
    McpCallResult,
    McpConfig,
    McpConnection,
    McpOpenError,
    McpTool,
    McpUrlPolicy,
    McpUrlRefused,
)
from ..mcp.tool_spec import MCP_TOOL_TYPE, McpServerSpec
from .conversation import StoredItem
from .state import new_item_id

if TYPE_CHECKING:
    from .emitter import SessionEmitter
    from .state import DuplexEngineSession

log = logging.getLogger(__name__)

# JSON-RPC's "request cancelled" code: what a call cut off by a cancel reports.
CANCELLED_CODE = -32800


@dataclass(frozen=True, slots=True)
class McpListed:
    """Mailbox item: a server's connection opened (or failed to)."""

    label: str
    generation: int
    connection: McpConnection | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class McpCallDone:
    """Mailbox item: a call the model made finished (its epoch and response say whose)."""

    response_id: str
    item_id: str
    epoch: int
    result: McpCallResult


@dataclass(slots=True)
class _Server:
    spec: McpServerSpec
    item_id: str
    generation: int
    connection: McpConnection | None = None
    tools: dict[str, McpTool] = field(default_factory=dict)
    opening: asyncio.Task[None] | None = None


def list_tools_item(item_id: str, label: str, tools: list[McpTool]) -> dict[str, Any]:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "mcp_list_tools",
        "server_label": label,
        "tools": [
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
                "annotations": tool.annotations,
            }
            for tool in tools
        ],
    }


class McpServers:
    """The MCP servers of one session and the calls in flight to them."""

    def __init__(
        self,
        session: DuplexEngineSession,
        out: SessionEmitter,
        *,
        config: McpConfig,
        policy: McpUrlPolicy,
        post: Callable[[Any], None],
    ) -> None:
        self.session = session
        self.out = out
        self.config = config
        self.policy = policy
        self._post = post
        self._servers: dict[str, _Server] = {}
        self._generation = 0
        self._calls: dict[str, tuple[str, asyncio.Task[None]]] = {}  # item id -> response, task
        self._closing: set[asyncio.Task[None]] = set()

    # ---- declaring servers ------------------------------------------------------------

    def check(self, tools: list[dict[str, Any]], param: str = "tools") -> None:
        """Refuse what the deployment does not allow before an update applies: more
        servers than ``max_servers_per_session``, a URL its policy refuses on sight."""
        declared = [(i, t) for i, t in enumerate(tools) if t.get("type") == MCP_TOOL_TYPE]
        limit = self.config.max_servers_per_session
        if len(declared) > limit:
            index = declared[limit][0]
            raise RealtimeProtocolError(
                f"a session may declare at most {limit} MCP servers",
                "invalid_tool",
                param=f"{param}[{index}]",
            )
        for index, tool in declared:
            try:
                self.policy.check_form(tool["server_url"])
            except McpUrlRefused as exc:
                raise RealtimeProtocolError(
                    str(exc), "mcp_server_url_not_allowed", param=f"{param}[{index}].server_url"
                ) from None

    def reconcile(self, tools: list[dict[str, Any]]) -> None:
        """Open what the session now declares and close what it no longer does."""
        wanted = {
            spec.server_label: spec
            for spec in (McpServerSpec.from_tool(t) for t in tools if t.get("type") == "mcp")
        }
        for label, server in list(self._servers.items()):
            spec = wanted.get(label)
            if spec is None or spec.connection_key != server.spec.connection_key:
                self._drop(label)
            else:
                server.spec = spec  # filters and approval rules apply from now on
                if server.connection is not None:
                    server.tools = self._allowed(spec, server.connection.tools)
        for label, spec in wanted.items():
            if label not in self._servers:
                self._open(spec)

    def _open(self, spec: McpServerSpec) -> None:
        self._generation += 1
        server = _Server(spec, item_id=new_item_id(), generation=self._generation)
        self._servers[spec.server_label] = server
        item = list_tools_item(server.item_id, spec.server_label, [])
        previous = self.session.items.add(StoredItem(item=item))
        self.out.item_added(item, previous, done=False)
        self.out.emit(ev.McpListToolsInProgress(item_id=server.item_id))
        server.opening = asyncio.get_running_loop().create_task(
            self._connect(spec, server.generation), name=f"mcp-open-{spec.server_label}"
        )

    async def _connect(self, spec: McpServerSpec, generation: int) -> None:
        try:
            connection = await McpConnection.open(
                spec.server_url, dict(spec.headers), self.config, self.policy
            )
        except (McpUrlRefused, McpOpenError) as exc:
            self._post(McpListed(spec.server_label, generation, None, str(exc)))
        except Exception as exc:  # whatever went wrong, the listing ends (failed)
            log.exception("session %s: MCP server %s", self.session.session_id, spec.server_label)
            self._post(McpListed(spec.server_label, generation, None, type(exc).__name__))
        else:
            self._post(McpListed(spec.server_label, generation, connection))

    def on_listed(self, listed: McpListed) -> None:
        server = self._servers.get(listed.label)
        if server is None or server.generation != listed.generation:
            if listed.connection is not None:  # an update replaced it meanwhile
                self._close_soon(listed.connection)
            return
        server.opening = None
        stored = self.session.items.get(server.item_id)
        if listed.connection is None:
            log.info(
                "session %s: MCP server %s: %s", self.session.session_id, listed.label, listed.error
            )
            self.out.emit(ev.McpListToolsFailed(item_id=server.item_id))
            if stored is not None:
                self.out.emit(ev.ConversationItemDone(previous_item_id=None, item=stored.item))
            return
        server.connection = listed.connection
        server.tools = self._allowed(server.spec, listed.connection.tools)
        item = list_tools_item(server.item_id, listed.label, list(server.tools.values()))
        if stored is not None:
            stored.item = item
        self.out.emit(ev.McpListToolsCompleted(item_id=server.item_id))
        self.out.emit(ev.ConversationItemDone(previous_item_id=None, item=item))

    @staticmethod
    def _allowed(spec: McpServerSpec, tools: list[McpTool]) -> dict[str, McpTool]:
        return {t.name: t for t in tools if spec.allows(t.name, t.read_only)}

    def _drop(self, label: str) -> None:
        server = self._servers.pop(label)
        if server.opening is not None:
            server.opening.cancel()
        if server.connection is not None:
            self._close_soon(server.connection)

    # ---- what the model may call ------------------------------------------------------

    def declares(self, label: str) -> bool:
        return label in self._servers

    def function_tools(
        self, labels: set[str] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The listed tools of the servers named (all when ``None``) as function tools for
        the model, and which server each name belongs to. A name two servers (or a
        function tool) share goes to the first that lists it."""
        tools: list[dict[str, Any]] = []
        owners: dict[str, str] = {}
        for label, server in self._servers.items():
            if labels is not None and label not in labels:
                continue
            for tool in server.tools.values():
                if tool.name in owners:
                    continue
                owners[tool.name] = label
                tools.append(
                    {
                        "type": "function",
                        "name": tool.name,
                        "description": tool.description or "",
                        "parameters": tool.input_schema or {"type": "object", "properties": {}},
                    }
                )
        return tools, owners

    def needs_approval(self, label: str, name: str) -> bool:
        server = self._servers.get(label)
        if server is None:
            return False
        tool = server.tools.get(name)
        return server.spec.needs_approval(name, tool.read_only if tool else False)

    # ---- calls ----------------------------------------------------------------------

    def start_call(
        self, *, response_id: str, item_id: str, label: str, name: str, arguments: str
    ) -> None:
        """Run a call; its outcome comes back as ``McpCallDone`` (never raises)."""
        epoch = self.session.epoch
        server = self._servers.get(label)

        async def run() -> None:
            result = await _call(server.connection if server else None, name, arguments)
            self._calls.pop(item_id, None)
            self._post(McpCallDone(response_id, item_id, epoch, result))

        task = asyncio.get_running_loop().create_task(run(), name=f"mcp-call-{name}")
        self._calls[item_id] = (response_id, task)

    def cancel_calls(self, response_id: str) -> None:
        for item_id, (owner, task) in list(self._calls.items()):
            if owner == response_id:
                task.cancel()
                del self._calls[item_id]

    def _close_soon(self, connection: McpConnection) -> None:
        task = asyncio.get_running_loop().create_task(connection.close(), name="mcp-close")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for _, task in self._calls.values():
            task.cancel()
        self._calls.clear()
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            if server.opening is not None:
                server.opening.cancel()
            if server.connection is not None:
                await server.connection.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


async def _call(connection: McpConnection | None, name: str, arguments: str) -> McpCallResult:
    if connection is None:
        return McpCallResult(
            None,
            {
                "type": "protocol_error",
                "code": -32000,
                "message": "the MCP server is not connected",
            },
        )
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return McpCallResult(
            None,
            {
                "type": "tool_execution_error",
                "message": "the call's arguments are not a JSON object",
            },
        )
    return await connection.call(name, parsed)
