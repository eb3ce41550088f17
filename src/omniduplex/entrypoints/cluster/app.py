"""A front end's FastAPI app: the same routes and guards as ``build_app``, on a cluster.

The Realtime routes tunnel each socket to its replica (``ClusterRoute``); ``/health`` and
``/v1/models`` report the cluster the directory sees (503 while no replica serves);
``/metrics`` is this front end's own (its tunnels, placements, routed resumes, refusals
and replica failures, and HTTP requests; the sessions' counters live on their replicas).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse, Response

from ...protocol.duplex import ErrorEvent
from ..openai.api_server import (
    _bearer,
    _echoed_subprotocol,
    _key_matches,
    _refused_by,
    _subprotocol_key,
    guard_http_routes,
)
from ..openai.metrics import RequestMetricsMiddleware, ServerMetrics
from ..openai.origins import OriginPolicy
from .frontend import ClusterRoute, ReplicaBackend


def build_cluster_app(
    backend: ReplicaBackend,
    *,
    model_name: str,
    api_key: str | None = None,
    origins: OriginPolicy | None = None,
    on_startup: Callable[[], Awaitable[None]] | None = None,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
) -> FastAPI:
    """A stateless front end for the replicas ``backend`` reaches; ``on_startup`` and
    ``on_shutdown`` run on the server's loop around its life (a backend whose replicas
    this process starts, ``ProcessCluster``, needs that loop)."""
    policy = origins or OriginPolicy.open()
    metrics = ServerMetrics()
    route = ClusterRoute(backend, registry=metrics.registry)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if on_startup is not None:
            await on_startup()
        app.state.ready = True
        try:
            yield
        finally:
            app.state.ready = False
            await route.shutdown()
            if on_shutdown is not None:
                await on_shutdown()

    app = FastAPI(title="omniduplex", lifespan=lifespan)
    app.state.ready = False
    app.state.cluster = backend
    app.state.route = route
    app.state.metrics = metrics

    guard_http_routes(app, policy, api_key, where="on a cluster front end")

    @app.get("/health")
    async def health() -> JSONResponse:
        try:
            view = await backend.view()
        except Exception as exc:  # the directory does not answer (Ray's error types vary)
            body = {"status": "unavailable", "reason": f"session directory: {exc}"[:200]}
            return JSONResponse(body, status_code=503)
        ok = bool(app.state.ready) and view.live > 0
        body = {"status": "ok" if ok else "unavailable", "cluster": view.to_dict()}
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        view = await backend.view()
        entry = {
            "id": model_name,
            "object": "model",
            "created": created,
            "owned_by": "omniduplex",
            "metadata": {"cluster": view.to_dict()},
        }
        return {"object": "list", "data": [entry]}

    async def realtime(websocket: WebSocket, *, alias: bool) -> None:
        refusal = _refused_by(policy, websocket.headers)
        if refusal is None and api_key is not None:
            presented = _bearer(websocket.headers.get("authorization")) or _subprotocol_key(
                websocket
            )
            if not _key_matches(presented, api_key):
                refusal = ("unauthorized", "Missing or invalid API key")
        if refusal is not None:
            await websocket.accept(subprotocol=_echoed_subprotocol(websocket))
            await websocket.send_json(ErrorEvent.build(*refusal).to_realtime("ga"))
            await websocket.close(code=1008, reason=refusal[0])
            return
        await route.handle(websocket, duplex_route=alias)

    @app.websocket("/v1/realtime")
    async def realtime_route(websocket: WebSocket) -> None:
        await realtime(websocket, alias=False)

    @app.websocket("/v1/duplex")
    async def duplex_route(websocket: WebSocket) -> None:
        await realtime(websocket, alias=True)

    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    return app
