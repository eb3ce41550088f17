"""The OpenAI error object a chat completions request is refused or failed with."""

from __future__ import annotations

from typing import Any

from ..realtime.errors import INVALID_REQUEST_ERROR, RATE_LIMIT_ERROR, SERVER_ERROR


class ChatCompletionError(Exception):
    """A request answered with an OpenAI error object and the HTTP ``status``.

    The object's ``type`` follows from the status: ``rate_limit_error`` for 429,
    ``invalid_request_error`` for any other 4xx, ``server_error`` for 5xx.
    """

    def __init__(self, status: int, code: str, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        if status == 429:
            self.error_type = RATE_LIMIT_ERROR
        else:
            self.error_type = INVALID_REQUEST_ERROR if status < 500 else SERVER_ERROR

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


def bad_request(code: str, message: str, param: str | None = None) -> ChatCompletionError:
    return ChatCompletionError(400, code, message, param=param)


def model_failed(message: str, *, code: str = "model_backend_failed") -> ChatCompletionError:
    return ChatCompletionError(500, code, f"the model failed: {message}")
