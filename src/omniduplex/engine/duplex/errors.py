"""What the duplex engine raises to a caller of its session calls."""

from __future__ import annotations


class DuplexSessionError(RuntimeError):
    """A session-level refusal with a wire error code (and the field it is about)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "internal_error",
        retryable: bool = False,
        param: str | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.retryable = retryable
        self.param = param
