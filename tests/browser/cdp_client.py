"""Drive a headless Debian chromium through the Chrome DevTools Protocol.

No Playwright browser download: the system ``chromium`` is started with a remote-debugging
port and driven over one WebSocket (the ``websockets`` package the server already needs).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """``$OMNIDUPLEX_CHROMIUM``, else the first browser binary on ``PATH``."""
    explicit = os.environ.get("OMNIDUPLEX_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else shutil.which(explicit)
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class CdpError(RuntimeError):
    pass


class Page:
    """One page target: ``call`` a CDP method, ``evaluate`` JavaScript, collect problems."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.console: list[str] = []
        self.exceptions: list[str] = []
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            future = self.pending.pop(message.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(message)
                continue
            method = message.get("method")
            params = message.get("params", {})
            if method == "Runtime.consoleAPICalled":
                args = " ".join(
                    str(a.get("value", a.get("description", ""))) for a in params["args"]
                )
                self.console.append(f"{params['type']}: {args}")
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                text = details.get("exception", {}).get("description") or details.get("text")
                self.exceptions.append(str(text))

    async def call(self, method: str, timeout_s: float = 15.0, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[ident] = future
        await self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        message = await asyncio.wait_for(future, timeout_s)
        if "error" in message:
            raise CdpError(f"{method}: {message['error']}")
        return message.get("result", {})

    async def evaluate(self, expression: str, *, gesture: bool = False) -> Any:
        result = await self.call(
            "Runtime.evaluate",
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
            userGesture=gesture,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise CdpError(details.get("exception", {}).get("description") or details["text"])
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout_s: float, *, poll_s: float = 0.05) -> Any:
        """Poll until ``expression`` is truthy; its value. Raises with the last value."""
        deadline = time.monotonic() + timeout_s
        value = None
        while time.monotonic() < deadline:
            try:
                value = await self.evaluate(expression)
            except CdpError as exc:  # e.g. the page is still loading
                value = exc
            if value and not isinstance(value, CdpError):
                return value
            await asyncio.sleep(poll_s)
        raise TimeoutError(f"timed out after {timeout_s}s waiting for {expression!r} ({value!r})")

    async def screenshot(self, *paths: Path) -> bytes:
        import base64

        result = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        data = base64.b64decode(result["data"])
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return data


def _devtools_port(profile: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CdpError(f"chromium exited with {proc.returncode}")
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int(marker.read_text().splitlines()[0])
        time.sleep(0.05)
    raise CdpError("chromium did not open its DevTools port")


@contextlib.asynccontextmanager
async def chromium_page(
    binary: str, extra_args: Sequence[str] = (), *, width: int = 1280, height: int = 900
) -> AsyncIterator[Page]:
    """A headless chromium with one blank page, torn down afterwards."""
    with tempfile.TemporaryDirectory(
        prefix="omniduplex-chromium-", ignore_cleanup_errors=True
    ) as tmp:
        profile = Path(tmp)
        args = [
            binary,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            *extra_args,
            "about:blank",
        ]
        log = (profile / "chromium.log").open("wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            # A hang guard: chromium's start took over 20 s on a loaded 2-core machine.
            port = await asyncio.to_thread(_devtools_port, profile, proc, 90.0)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                targets = json.load(r)
            target = next(t for t in targets if t["type"] == "page")
            async with connect(target["webSocketDebuggerUrl"], max_size=None) as ws:
                page = Page(ws)
                await page.call("Runtime.enable")
                await page.call("Page.enable")
                await page.call(
                    "Emulation.setDeviceMetricsOverride",
                    width=width,
                    height=height,
                    deviceScaleFactor=1,
                    mobile=False,
                )
                try:
                    yield page
                finally:
                    page.reader.cancel()
        finally:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 10)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
