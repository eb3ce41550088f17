"""The Realtime error envelope (Tier 1) and the exception the codec raises.

OpenAI defines the envelope shape and three error classes; the codes themselves are ours
and live in ``protocol.duplex.errors`` together with the code-to-class table.
"""

from __future__ import annotations

from typing import Any, Final, Literal

ErrorClass = Literal["invalid_request_error", "server_error", "rate_limit_error"]

INVALID_REQUEST_ERROR: Final = "invalid_request_error"
SERVER_ERROR: Final = "server_error"
RATE_LIMIT_ERROR: Final = "rate_limit_error"
ERROR_CLASSES: Final[frozenset[str]] = frozenset(
    {INVALID_REQUEST_ERROR, SERVER_ERROR, RATE_LIMIT_ERROR}
)


class RealtimeProtocolError(Exception):
    """A client event that cannot be accepted, with the code and field that explain why.

    ``event_id`` is the client's own event id (echoed as ``error.event_id``); ``param``
    names the offending field when one can be named. The codec raises nothing else for
    bad input: every failure of a client payload becomes one of these.
    """

    def __init__(
        self,
        message: str,
        code: str = "bad_event",
        *,
        event_id: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.event_id = event_id if isinstance(event_id, str) and event_id else None
        self.param = param if isinstance(param, str) and param else None

    def with_event_id(self, event_id: Any) -> RealtimeProtocolError:
        """Attach the client's event id unless one is already known."""
        if self.event_id is None and isinstance(event_id, str) and event_id:
            self.event_id = event_id
        return self

    def __repr__(self) -> str:
        return f"RealtimeProtocolError(code={self.code!r}, message={self.message!r})"


def error_body(
    *,
    error_class: str,
    code: str,
    message: str,
    event_id: str | None = None,
    param: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``error`` object of the envelope; optional keys only when they carry a value."""
    body: dict[str, Any] = {"type": error_class, "code": code, "message": message}
    if isinstance(param, str) and param:
        body["param"] = param
    if isinstance(event_id, str) and event_id:
        body["event_id"] = event_id
    if extra:
        for key, value in extra.items():
            body.setdefault(key, value)
    return body
