"""``InlineDuplexClient``: the duplex client API over a ``DuplexOmni`` in this process.

::

    async with DuplexOmni("loopback") as omni:
        async with await InlineDuplexClient.open(omni, loopback_session()) as client:
            responses = client.responses()
            await client.stream_pcm(pcm, sample_rate_hz=16_000)
            await client.commit()
            response = await responses.next(timeout=10)
            async for chunk in response.audio():
                ...

Every command goes through ``command_from_realtime`` (the same decoder, and so the same
validation, as the WebSocket route); a command it refuses is answered with a local
``error`` event echoing the command's ``event_id``, as the server would answer it. The
engine runtime is imported only when a client is opened.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Self

from ..protocol.duplex import (
    DuplexCommandError,
    RealtimeCommand,
    RealtimeInputDefaults,
    command_from_realtime,
    next_input_defaults,
)
from ..protocol.duplex import commands as cmd
from ..protocol.duplex import events as ev
from .base import DuplexClientBase
from .events import DuplexConnectionError, DuplexSessionClosedError

if TYPE_CHECKING:
    from ..entrypoints.duplex_omni import DuplexOmni, DuplexSessionHandle

__all__ = ["InlineDuplexClient"]


class InlineDuplexClient(DuplexClientBase):
    """A client of one engine-resident session, reading its ``DuplexSessionHandle``.

    ``open(omni, session)`` opens a new session; ``attach(handle)`` drives an open one
    (the client becomes the handle's only reader). ``aclose()`` closes the session unless
    ``close_session=False`` was given.
    """

    def __init__(
        self,
        handle: DuplexSessionHandle,
        *,
        session: Mapping[str, Any] | None = None,
        close_session: bool = True,
        close_timeout: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.close_timeout = close_timeout
        self.handle = handle
        self.omni = handle.omni
        self.close_session_on_exit = close_session
        self._session_id = handle.session_id
        self._defaults: RealtimeInputDefaults = next_input_defaults(None, dict(session or {}))
        self._released = False

    @classmethod
    async def open(
        cls,
        omni: DuplexOmni,
        session: Mapping[str, Any] | None = None,
        *,
        handshake_timeout: float | None = 30.0,
        **kwargs: Any,
    ) -> Self:
        """Open a session on ``omni`` and start reading it; returns after
        ``session.created`` arrived (``session_info`` is set)."""
        handle = await omni.open_session(dict(session or {}))
        client = cls(handle, session=session, **kwargs)
        client.start()
        try:
            await client.wait_for(ev.SessionCreated.type, handshake_timeout, since=0)
        except BaseException:
            await client.aclose()
            raise
        return client

    @classmethod
    def attach(
        cls,
        handle: DuplexSessionHandle,
        *,
        session: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Self:
        """Drive an already open session (call from a running event loop). ``session``:
        the object it was opened with, for the input formats appends default to."""
        client = cls(handle, session=session, **kwargs)
        client.start()
        return client

    # ---- transport seams ---------------------------------------------------------------

    def _events(self) -> AsyncIterator[Any]:
        return self.handle.events()

    async def _send(self, command: Mapping[str, Any] | RealtimeCommand) -> None:
        if self._released:
            raise DuplexConnectionError("send failed: the client was closed")
        if isinstance(command, RealtimeCommand):
            typed: RealtimeCommand = command
        else:
            kind = command.get("type")
            if kind in cmd.CloseSession.aliases or kind == cmd.CloseSession.type:
                reason = command.get("reason")
                await self._close_handle(reason if isinstance(reason, str) else "client_close")
                return
            if kind == cmd.AckEvents.type:
                return  # in process there is no replay journal to acknowledge
            try:
                typed = command_from_realtime(command, defaults=self._defaults)
            except DuplexCommandError as exc:
                self._answer_locally(exc)
                return
            if isinstance(typed, cmd.UpdateSession):
                self._defaults = next_input_defaults(self._defaults, _session_of(command))
        if isinstance(typed, cmd.CloseSession):
            await self._close_handle(typed.reason)
            return
        if isinstance(typed, cmd.ResumeSession):
            self._answer_locally(
                DuplexCommandError(
                    "session.resume is a connection's first message; in process use "
                    "DuplexOmni.resume_session",
                    "unsupported",
                    event_id=typed.event_id,
                )
            )
            return
        self._submit(typed)

    async def aclose(self) -> None:
        """Close the session (unless ``close_session=False``) and stop the reader."""
        if self._released:
            return
        self._released = True
        closing = self.close_session_on_exit and not self.handle.closed
        if closing:
            with contextlib.suppress(Exception):
                await self.handle.close("client_close")
        # Once the session was asked to close, let the reader dispatch session.closed.
        await self._stop_reader(self.close_timeout if closing or self.handle.closed else 0.0)

    # ---- helpers -----------------------------------------------------------------------

    def _submit(self, command: RealtimeCommand) -> None:
        if self.handle.closed:
            raise DuplexSessionClosedError(self.closed_reason or "closed")
        try:
            self.handle.submit(command)
        except Exception as exc:
            if self.handle.closed or getattr(exc, "code", None) == "session_closed":
                raise DuplexSessionClosedError(self.closed_reason or "closed") from exc
            raise DuplexConnectionError(f"send failed: {exc}") from exc

    async def _close_handle(self, reason: str) -> None:
        if self.handle.closed:
            return
        try:
            await self.handle.close(reason)
        except Exception as exc:
            raise DuplexConnectionError(f"close failed: {exc}") from exc

    def _answer_locally(self, exc: DuplexCommandError) -> None:
        """A command the decoder refused: answered like the server answers it."""
        error = ev.ErrorEvent.from_exception(exc)
        error.session_id = self.session_id
        self._dispatch(error)


def _session_of(update: Mapping[str, Any]) -> Mapping[str, Any]:
    session = update.get("session")
    if isinstance(session, Mapping):
        return session
    return {k: v for k, v in update.items() if k not in ("type", "event_id")}
