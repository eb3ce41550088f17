"""What the server's logs may hold: no secrets.

At debug level the WebSocket layer logs every handshake header (``authorization: Bearer
...``), and the access log writes every path with its query (``?api_key=...``). A
``RedactingFilter`` on a handler rewrites each record before it is formatted: the
configured keys wherever they appear, and whatever follows ``authorization:``,
``api_key=`` or the browser subprotocol ``openai-insecure-api-key.``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
_PATTERNS = (
    re.compile(r"(authorization:\s*(?:\w+\s+)?)[^\s,;]+", re.IGNORECASE),
    re.compile(r"(api[_-]?key=)[^&\s\"']+", re.IGNORECASE),
    re.compile(r"(openai-insecure-api-key\.)[^\s,;\"']+", re.IGNORECASE),
)
# Loggers whose handlers see the server's records (uvicorn's own do not propagate).
SERVER_LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda match: match.group(1) + REDACTED, text)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites a record's message and string arguments (it drops nothing)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(secret for secret in secrets if secret)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg, self.secrets)
        if isinstance(record.args, tuple):
            record.args = tuple(self._clean(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: self._clean(value) for key, value in record.args.items()}
        return True

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str | bytes):
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            cleaned = redact(text, self.secrets)
            return cleaned if cleaned != text else value
        return value


def configure_server_logs(secrets: Iterable[str] = ()) -> None:
    """Install a ``RedactingFilter`` on every handler of ``SERVER_LOGGERS`` (call it after
    logging is configured)."""
    for name in SERVER_LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(RedactingFilter(secrets))
