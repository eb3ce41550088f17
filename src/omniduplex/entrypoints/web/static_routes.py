"""Serve the static talk page: ``/`` is the page, ``/web/<file>`` its modules and styles.

The page is public (it holds no secret; a key is typed into it and sent only on the
WebSocket), so it is served by an outer ASGI middleware ahead of the API-key check: a
browser cannot put a Bearer header on a page load. Only the files listed in
``STATIC_DIR`` are served, by exact name; anything else falls through to the app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.responses import FileResponse
from starlette.types import ASGIApp, Receive, Scope, Send

STATIC_DIR = Path(__file__).resolve().parent / "static"
PREFIX = "/web/"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
# Modules change with the server: revalidate on every load (cheap, ETag-based).
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


def _files() -> dict[str, Path]:
    return {
        path.name: path
        for path in STATIC_DIR.iterdir()
        if path.is_file() and path.suffix in _TYPES and not path.name.startswith(".")
    }


class WebPageMiddleware:
    """Answers GET/HEAD for ``/`` and ``/web/<name>``; passes everything else on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.files = _files()

    def _lookup(self, path: str) -> Path | None:
        if path in ("/", "/index.html"):
            return self.files.get("index.html")
        if path.startswith(PREFIX):
            return self.files.get(path[len(PREFIX) :])
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD"):
            found = self._lookup(scope.get("path", ""))
            if found is not None:
                response = FileResponse(
                    found, media_type=_TYPES[found.suffix], headers=dict(_HEADERS)
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def mount_web_page(app: Any) -> None:
    """Serve the talk page on ``app`` (a FastAPI/Starlette app, before it starts).

    Call it after the app's other middleware are added: the last one added runs first.
    """
    app.add_middleware(WebPageMiddleware)
