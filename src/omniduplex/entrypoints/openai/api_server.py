"""The FastAPI app: Realtime WebSocket routes, models, health, chat completions.

On a duplex deployment ``/v1/realtime`` and ``/v1/duplex`` serve duplex sessions; the
second speaks our Tier 3 extensions from the start, the first only once the client opts in
(``?duplex=1`` and the other ways ``RealtimeEnvelope`` lists). A turn-based deployment
answers both that the Realtime API is not available.
Every route the deployment does not serve answers a JSON 404 that names it. With an API
key, every route requires it: ``Authorization: Bearer <key>``, or for browsers the
WebSocket subprotocol ``openai-insecure-api-key.<key>``. Every route also checks the
``Host`` header and, when a browser sent one, the ``Origin`` (``origins.OriginPolicy``).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...protocol.duplex import ErrorEvent
from ..async_omni import AsyncOmni
from ..duplex.chat_completions import DuplexChatCompletionsAdapter
from ..duplex.serving import RealtimeRoute
from ..duplex_omni import DuplexOmni
from ..turn_responses import DuplexModelPlugin, turn_responder
from ..web.static_routes import mount_web_page
from .audio_routes import register_audio_routes
from .metrics import RequestMetricsMiddleware, ServerMetrics
from .origins import OriginPolicy

API_KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."


def _error_body(code: str, message: str, status: int) -> JSONResponse:
    event = ErrorEvent.build(code, message)
    body = event.to_realtime("ga") or {}
    return JSONResponse({"error": body.get("error", {})}, status_code=status)


def _key_matches(presented: str | None, expected: str) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), expected.encode())


def _bearer(value: str | None) -> str | None:
    if value and value.lower().startswith("bearer "):
        return value[7:].strip()
    return None


def _subprotocol_key(websocket: WebSocket) -> str | None:
    raw = websocket.headers.get("sec-websocket-protocol", "")
    for offered in (p.strip() for p in raw.split(",")):
        if offered.startswith(API_KEY_SUBPROTOCOL_PREFIX):
            return offered[len(API_KEY_SUBPROTOCOL_PREFIX) :]
    return None


def _refused_by(policy: OriginPolicy, headers: Any) -> tuple[str, str] | None:
    """``(code, message)`` when the request's Host or Origin is not allowed."""
    if not policy.host_allowed(headers):
        return "host_not_allowed", f"this server does not answer to {headers.get('host')!r}"
    if not policy.origin_allowed(headers):
        origin = headers.get("origin")
        return "origin_not_allowed", f"pages from {origin!r} may not call this server"
    return None


def _echoed_subprotocol(websocket: WebSocket) -> str | None:
    """``realtime`` when the client offered it: a browser drops a handshake that does
    not echo one of its subprotocols, and would never see our error event."""
    raw = websocket.headers.get("sec-websocket-protocol", "")
    return "realtime" if "realtime" in (p.strip() for p in raw.split(",")) else None


def guard_http_routes(
    app: FastAPI, policy: OriginPolicy, api_key: str | None, *, where: str
) -> None:
    """Every HTTP route checks the origin and host, then the API key (``/health`` needs
    none); a route that does not exist answers a JSON 404 saying it is not available
    ``where``."""

    @app.middleware("http")
    async def require_key(request: Request, call_next: Any) -> Any:
        refusal = _refused_by(policy, request.headers)
        if refusal is not None:
            return _error_body(*refusal, 403)
        presented = _bearer(request.headers.get("authorization"))
        guarded = api_key is not None and request.url.path != "/health"
        if guarded and not _key_matches(presented, api_key):
            return _error_body("unauthorized", "Missing or invalid API key", 401)
        return await call_next(request)

    @app.exception_handler(StarletteHTTPException)
    async def not_available(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return _error_body(
                "route_not_available",
                f"{request.method} {request.url.path} is not available {where}",
                404,
            )
        return _error_body("http_error", str(exc.detail), exc.status_code)


def build_app(
    omni: AsyncOmni,
    *,
    api_key: str | None = None,
    model_name: str,
    plugin: DuplexModelPlugin | None = None,
    origins: OriginPolicy | None = None,
) -> FastAPI:
    """The server for one deployment; ``omni`` is started by the app's lifespan.

    A ``DuplexOmni`` (``session_mode: duplex``) serves Realtime sessions and chat
    completions; a plain ``AsyncOmni`` (``session_mode: turn``) serves the turn-based
    routes only (chat completions through ``plugin``, when the model has one).
    ``origins``: which hosts and web origins may reach it (default: any; ``omniduplex
    serve`` passes the policy of its bind address).
    """
    policy = origins or OriginPolicy.open()
    duplex = isinstance(omni, DuplexOmni)
    handler_box: dict[str, RealtimeRoute] = {}
    metrics = ServerMetrics()
    metrics.requests_in_flight.set_function(lambda: float(omni.requests_in_flight))
    metrics.watch_stage_counters(lambda: omni.engine.stage_counters)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await omni.start()
        app.state.loop = asyncio.get_running_loop()
        if duplex:
            handler_box["handler"] = RealtimeRoute(omni, metrics=metrics)
        app.state.ready = True
        try:
            yield
        finally:
            app.state.ready = False
            if "handler" in handler_box:
                await handler_box["handler"].shutdown()
            await omni.shutdown()

    app = FastAPI(title="omniduplex", lifespan=lifespan)
    app.state.ready = False
    app.state.omni = omni
    app.state.handlers = handler_box
    app.state.metrics = metrics

    guard_http_routes(app, policy, api_key, where="for this deployment")

    @app.get("/health")
    async def health() -> JSONResponse:
        dead = omni.dead_reason
        if dead is not None:
            # A stage's restart budget is spent: this process serves nothing more until
            # it is restarted (``omniduplex serve`` exits unless told not to).
            return JSONResponse({"status": "dead", "reason": dead}, status_code=503)
        ready = bool(app.state.ready) and omni.started
        status = 200 if ready else 503
        return JSONResponse({"status": "ok" if ready else "starting"}, status_code=status)

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": model_name,
            "object": "model",
            "created": created,
            "owned_by": "omniduplex",
        }
        loaded = chat.model()
        if loaded is not None and loaded.capabilities.extra:
            # What the model says of itself: for the cascade, the engines that run and
            # any that fell back.
            entry["metadata"] = dict(loaded.capabilities.extra)
        return {"object": "list", "data": [entry]}

    chat = DuplexChatCompletionsAdapter(turn_responder(omni, plugin), model_name=model_name)
    app.state.chat_completions = chat

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        # Served only when the loaded model declares supports_chat_completions.
        if chat.model() is not None and not chat.available:
            raise StarletteHTTPException(404)
        return await chat.create_chat_completion(request)

    register_audio_routes(app, omni, model_name=model_name)  # cascade ASR / TTS routes

    async def realtime(websocket: WebSocket, *, alias: bool) -> None:
        refusal = _refused_by(policy, websocket.headers)
        if refusal is not None:
            await websocket.accept(subprotocol=_echoed_subprotocol(websocket))
            await websocket.send_json(ErrorEvent.build(*refusal).to_realtime("ga"))
            await websocket.close(code=1008, reason=refusal[0])
            return
        if api_key is not None:
            presented = _bearer(websocket.headers.get("authorization")) or _subprotocol_key(
                websocket
            )
            if not _key_matches(presented, api_key):
                await websocket.accept(subprotocol=_echoed_subprotocol(websocket))
                event = ErrorEvent.build("unauthorized", "Missing or invalid API key")
                await websocket.send_json(event.to_realtime("ga"))
                await websocket.close(code=1008, reason="unauthorized")
                return
        if not duplex:
            await websocket.accept(subprotocol=_echoed_subprotocol(websocket))
            event = ErrorEvent.build(
                "route_not_available",
                "the turn-based Realtime API is not available on this deployment",
            )
            await websocket.send_json(event.to_realtime("ga"))
            await websocket.close(code=1008)
            return
        handler = handler_box.get("handler")
        if handler is None or not app.state.ready:
            await websocket.accept(subprotocol=_echoed_subprotocol(websocket))
            await websocket.send_json(
                ErrorEvent.build("server_starting", "the server is warming up").to_realtime("ga")
            )
            await websocket.close(code=1013)
            return
        await handler.handle(websocket, duplex_route=alias)

    @app.websocket("/v1/realtime")
    async def realtime_route(websocket: WebSocket) -> None:
        await realtime(websocket, alias=False)

    @app.websocket("/v1/duplex")
    async def duplex_route(websocket: WebSocket) -> None:
        await realtime(websocket, alias=True)

    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    if policy.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=policy.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
        )
    mount_web_page(app)  # the talk page at / (outermost: a page load carries no key)
    return app
