"""How one bench session talks to a server.

``DuplexDriver`` uses :class:`~omniduplex.clients.DuplexClient` (our duplex servers:
``barge_in``, ``playback.ack``, resume with ``server_event_seq``). ``RealtimeDriver``
speaks plain OpenAI Realtime events over a raw WebSocket (any Realtime server). Which one
a server gets is decided once by :func:`probe_server`: a ``resume_token`` in
``session.created`` means one of ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections import deque
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from ..clients import (
    DuplexClient,
    DuplexClientError,
    DuplexProtocolError,
    ReconnectPolicy,
    duplex_session,
)
from ..clients.duplex import realtime_url
from ..protocol.duplex import b64encode_str
from .recorder import AUDIO_TYPES, SessionRecorder, b64_nbytes

__all__ = ["Driver", "DuplexDriver", "RealtimeDriver", "probe_server"]

MAX_FRAME = 64 * 1024 * 1024
_BETA_HEADERS = {"OpenAI-Beta": "realtime=v1"}


def _headers(api_key: str | None, dialect: str) -> dict[str, str] | None:
    headers: dict[str, str] = {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if dialect == "beta":
        headers.update(_BETA_HEADERS)
    return headers or None


def plain_url(url: str, dialect: str) -> str:
    """``url`` as a WebSocket URL as a stock client dials it (``realtime_url`` rules
    without opting into our extensions; beta adds ``dialect=beta``)."""
    return realtime_url(url, dialect="beta" if dialect == "beta" else "ga", extensions=False)


async def probe_server(
    url: str, *, dialect: str = "ga", api_key: str | None = None, timeout_s: float = 10.0
) -> dict[str, Any]:
    """Open one session and read ``session.created``: ``{"kind": "duplex"|"realtime",
    "speaks_first": bool, "model": ..., "session_keys": [...]}``. A server that does not
    speak first (ours without ``?model=``) is sent an empty ``session.update``. Our session
    is closed again."""
    async with ws_connect(
        plain_url(url, dialect),
        additional_headers=_headers(api_key, dialect),
        max_size=MAX_FRAME,
        open_timeout=timeout_s,
        compression=None,
    ) as ws:
        speaks_first = True
        try:
            frame = await asyncio.wait_for(ws.recv(), 1.0)
        except TimeoutError:
            speaks_first = False
            await ws.send('{"type":"session.update","session":{}}')
            frame = await asyncio.wait_for(ws.recv(), timeout_s)
        event = orjson.loads(frame)
        if event.get("type") == "error":
            raise DuplexProtocolError.from_event(event)
        if event.get("type") != "session.created":
            raise DuplexProtocolError(f"expected session.created, got {event.get('type')!r}")
        duplex = bool(event.get("resume_token"))
        if duplex:
            await ws.send('{"type":"session.close"}')
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    while orjson.loads(await ws.recv()).get("type") != "session.closed":
                        pass
        session = event.get("session") or {}
        return {
            "kind": "duplex" if duplex else "realtime",
            "speaks_first": speaks_first,
            "model": session.get("model"),
            "session_keys": sorted(session) if isinstance(session, dict) else [],
        }


class Driver(ABC):
    """One bench session's connection (see the module docstring)."""

    kind: str = ""
    input_rate_hz: int = 24_000
    supports_resume = False
    supports_barge_in = False

    def __init__(
        self,
        recorder: SessionRecorder,
        url: str,
        *,
        dialect: str = "ga",
        api_key: str | None = None,
        server_vad: bool = False,
        input_rate_hz: int | None = None,
    ) -> None:
        self.rec = recorder
        self.url = url
        self.dialect = dialect
        self.api_key = api_key
        self.server_vad = server_vad
        if input_rate_hz is not None:
            self.input_rate_hz = input_rate_hz

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def append(self, pcm16: bytes) -> None: ...

    @abstractmethod
    async def commit(self) -> None: ...

    @abstractmethod
    async def next_response(self, timeout: float) -> Any:
        """The next response handle (``response_id``, ``received_ms``, ``status``,
        ``done``, ``wait(timeout)``)."""

    @abstractmethod
    async def first_audio(self, handle: Any, timeout: float) -> bool:
        """Wait until ``handle`` has audio (True) or ended without any (False)."""

    @abstractmethod
    async def cancel(self, handle: Any, method: str) -> None: ...

    async def ack(self, handle: Any, played_ms: float, truncate: bool = False) -> None:
        return None

    def drop(self) -> None:
        raise NotImplementedError

    @abstractmethod
    async def close(self) -> None: ...


# ---- our duplex servers -------------------------------------------------------------------


class DuplexDriver(Driver):
    kind = "duplex"
    input_rate_hz = 16_000
    supports_resume = True
    supports_barge_in = True

    def __init__(self, recorder: SessionRecorder, url: str, **connection: Any) -> None:
        super().__init__(recorder, url, **connection)
        self.client: DuplexClient | None = None
        self._responses: Any = None

    async def open(self) -> None:
        overrides: dict[str, Any] = {}
        if self.server_vad:
            overrides["audio"] = {
                "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 300}}
            }
        session = duplex_session(input_rate_hz=self.input_rate_hz, **overrides)
        client = await DuplexClient.connect(
            self.url,
            session=session,
            api_key=self.api_key,
            dialect="beta" if self.dialect == "beta" else "ga",
            reconnect=ReconnectPolicy(max_attempts=8, min_backoff_s=0.05, max_backoff_s=1.0),
        )
        self.client = client
        self.rec.session_id = client.session_id
        rec = self.rec
        seq_of = client.seq_of

        def listen(kind: str, obj: Any, at: float) -> None:
            if kind == "event":
                rec.on_event(obj.type, obj, at, seq_of(obj))

        client.add_listener(listen)
        self._responses = client.responses()

    def _client(self) -> DuplexClient:
        if self.client is None:
            raise DuplexClientError("session not open")
        return self.client

    async def append(self, pcm16: bytes) -> None:
        await self._client().append_audio(pcm16, sample_rate_hz=self.input_rate_hz)

    async def commit(self) -> None:
        self.rec.committed(time.perf_counter())
        await self._client().commit()

    async def next_response(self, timeout: float) -> Any:
        return await self._responses.next(timeout)

    async def first_audio(self, handle: Any, timeout: float) -> bool:
        async with asyncio.timeout(timeout):
            async for _chunk in handle.audio():
                return True
        return False

    async def cancel(self, handle: Any, method: str) -> None:
        client = self._client()
        self.rec.cancelled(handle.response_id, time.perf_counter(), method)
        if method == "barge_in":
            await client.barge_in()
        else:
            await client.cancel_response(handle.response_id)

    async def ack(self, handle: Any, played_ms: float, truncate: bool = False) -> None:
        await self._client().ack_playback(handle.response_id, played_ms, truncate=truncate)

    def drop(self) -> None:
        self.rec.dropped(time.perf_counter())
        self._client().drop_connection()

    async def close(self) -> None:
        client = self.client
        if client is None:
            return
        self.rec.replay_duplicates_dropped = client.duplicates_dropped
        try:
            await client.close(timeout=10.0)
        finally:
            await client.aclose()


# ---- any OpenAI Realtime server -------------------------------------------------------------


class _PlainResponse:
    """A response as the plain driver tracks it (the ``ResponseHandle`` subset used)."""

    def __init__(self, response_id: str) -> None:
        self.response_id = response_id
        self.received_ms = 0.0
        self.status: str | None = None
        self.done = False
        self._audio = asyncio.Event()
        self._finished = asyncio.Event()

    def _end(self, status: str | None) -> None:
        self.status = status
        self.done = True
        self._finished.set()
        self._audio.set()

    async def wait(self, timeout: float | None = None) -> str | None:
        await asyncio.wait_for(self._finished.wait(), timeout)
        return self.status


class RealtimeDriver(Driver):
    """Plain Realtime events: ``session.update``, ``input_audio_buffer.append`` /
    ``commit``, ``response.create``, ``response.cancel``. No resume, no barge-in."""

    kind = "realtime"
    input_rate_hz = 24_000

    def __init__(
        self, recorder: SessionRecorder, url: str, *, speaks_first: bool = True, **connection: Any
    ) -> None:
        super().__init__(recorder, url, **connection)
        #: Whether the server sends ``session.created`` before the client's first event.
        self.speaks_first = speaks_first
        self.ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._responses: dict[str, _PlainResponse] = {}
        self._created: deque[_PlainResponse] = deque()
        self._created_signal = asyncio.Event()
        self._closed = asyncio.Event()

    def _session_update(self) -> dict[str, Any]:
        vad = {"type": "server_vad", "silence_duration_ms": 300} if self.server_vad else None
        if self.dialect == "beta":
            session: dict[str, Any] = {
                "modalities": ["audio", "text"],
                "input_audio_format": "pcm16",
                "output_audio_format": "pcm16",
                "turn_detection": vad,
            }
        else:
            session = {
                "type": "realtime",
                "output_modalities": ["audio"],
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": self.input_rate_hz},
                        "turn_detection": vad,
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": 24_000}},
                },
            }
        return {"type": "session.update", "session": session}

    async def open(self) -> None:
        ws = await ws_connect(
            plain_url(self.url, self.dialect),
            additional_headers=_headers(self.api_key, self.dialect),
            max_size=MAX_FRAME,
            open_timeout=30.0,
            compression=None,
        )
        self.ws = ws
        try:
            if not self.speaks_first:
                # Ours without ``?model=``: the session opens on the client's first update.
                await self._send(self._session_update())
            first = orjson.loads(await asyncio.wait_for(ws.recv(), 30.0))
            if first.get("type") == "error":
                raise DuplexProtocolError.from_event(first)
            session = first.get("session") or {}
            self.rec.session_id = session.get("id") if isinstance(session, dict) else None
            if self.speaks_first:
                await self._send(self._session_update())
        except BaseException:
            await ws.close()
            raise
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _send(self, obj: dict[str, Any]) -> None:
        if self.ws is None:
            raise DuplexClientError("session not open")
        await self.ws.send(orjson.dumps(obj).decode())

    async def _read(self) -> None:
        assert self.ws is not None
        rec = self.rec
        try:
            async for frame in self.ws:
                at = time.perf_counter()
                obj = orjson.loads(frame)
                kind = obj.get("type", "")
                rec.on_event(kind, obj, at)
                if kind in AUDIO_TYPES:
                    handle = self._responses.get(obj.get("response_id"))
                    if handle is not None:
                        handle.received_ms += b64_nbytes(obj.get("delta") or "") / 48.0
                        handle._audio.set()
                elif kind == "response.created":
                    rid = (obj.get("response") or {}).get("id")
                    if isinstance(rid, str):
                        handle = _PlainResponse(rid)
                        self._responses[rid] = handle
                        self._created.append(handle)
                        self._created_signal.set()
                elif kind == "response.done":
                    response = obj.get("response") or {}
                    handle = self._responses.pop(response.get("id"), None)
                    if handle is not None:
                        handle._end(response.get("status"))
        except Exception:
            pass
        finally:
            self._closed.set()
            for handle in self._responses.values():
                handle._end(None)
            self._created_signal.set()

    async def append(self, pcm16: bytes) -> None:
        await self._send({"type": "input_audio_buffer.append", "audio": b64encode_str(pcm16)})

    async def commit(self) -> None:
        self.rec.committed(time.perf_counter())
        await self._send({"type": "input_audio_buffer.commit"})
        await self._send({"type": "response.create"})

    async def next_response(self, timeout: float) -> Any:
        async with asyncio.timeout(timeout):
            while not self._created:
                if self._closed.is_set():
                    raise DuplexClientError("connection closed")
                self._created_signal.clear()
                await self._created_signal.wait()
        return self._created.popleft()

    async def first_audio(self, handle: Any, timeout: float) -> bool:
        await asyncio.wait_for(handle._audio.wait(), timeout)
        return handle.received_ms > 0

    async def cancel(self, handle: Any, method: str) -> None:
        self.rec.cancelled(handle.response_id, time.perf_counter(), "response.cancel")
        await self._send({"type": "response.cancel", "response_id": handle.response_id})

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._reader, 5.0)


def host_port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    default = 443 if parts.scheme in ("wss", "https") else 80
    return parts.hostname or "127.0.0.1", parts.port or default
