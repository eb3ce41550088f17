"""``POST /v1/chat/completions`` on a duplex deployment (DESIGN decision 14).

``DuplexChatCompletionsAdapter`` pumps one HTTP request: the chat completions codec
(``protocol/chat_completions``, which documents what a request may hold) validates the
body into one ``ChatTurn``, the deployment's ``TurnResponder``
(``entrypoints/turn_responses.py``) runs it as a ``TurnResponseRequest``, and the model
results that come back are written out as the codec renders them: a ``chat.completion``
or its ``chat.completion.chunk`` stream. On a duplex deployment the engine plans the
request with the plugin, runs it on the stage workers and projects its outputs, with no
session and no admission slot. It serves only when the model declares
``supports_chat_completions``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Final

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ...protocol.chat_completions import (
    SSE_DONE,
    ChatCompletionBody,
    ChatCompletionError,
    ChatCompletionStream,
    ChatTurn,
    bad_request,
    load_json_body,
    model_failed,
    new_completion_id,
    parse_chat_request,
    sse_event,
)
from ..turn_responses import (
    ModelAudio,
    ModelResult,
    ModelText,
    TurnFailure,
    TurnModel,
    TurnResponder,
    TurnResponseError,
    TurnResponseRequest,
)

log = logging.getLogger(__name__)

SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _json(obj: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY),
        status_code=status,
        media_type="application/json",
    )


def _error_response(exc: ChatCompletionError) -> Response:
    return _json(exc.body(), exc.status)


class DuplexChatCompletionsAdapter:
    """Serves ``/v1/chat/completions`` through the deployment's ``TurnResponder``.

    ``responder`` is ``None`` on a deployment whose model has no plugin to answer turns:
    then the route only ever says it is warming up.
    """

    def __init__(self, responder: TurnResponder | None, *, model_name: str) -> None:
        self.responder = responder
        self.model_name = model_name

    def model(self) -> TurnModel | None:
        """The model's declarations (``None`` until a duplex engine has started)."""
        return self.responder.model() if self.responder is not None else None

    @property
    def available(self) -> bool:
        """Whether the model declares ``supports_chat_completions``."""
        model = self.model()
        return model is not None and model.capabilities.supports_chat_completions

    # ---- HTTP ---------------------------------------------------------------------------

    async def create_chat_completion(self, request: Request) -> Response:
        """Answer one HTTP request: JSON, an SSE stream, or an OpenAI error object."""
        try:
            body = load_json_body(await request.body())
            return await self.complete(body)
        except ChatCompletionError as exc:
            return _error_response(exc)
        except Exception as exc:
            log.exception("chat completion failed")
            return _error_response(ChatCompletionError(500, "internal_error", str(exc)))

    async def complete(self, body: Any) -> Response:
        """Validate ``body`` and run it; raises ``ChatCompletionError`` on refusals."""
        model = self.model()
        if self.responder is None or model is None:
            raise ChatCompletionError(503, "server_starting", "the server is warming up")
        if not model.capabilities.supports_chat_completions:
            raise ChatCompletionError(
                404,
                "route_not_available",
                "this model does not serve chat completions; use /v1/realtime?duplex=1",
            )
        turn = parse_chat_request(
            body,
            served_model=self.model_name,
            capabilities=model.capabilities,
            input_rate_hz=model.input_sample_rate_hz,
        )
        completion_id = new_completion_id()
        results = self._results(self.responder, turn, completion_id)
        rate = model.output_sample_rate_hz
        if not turn.stream:
            async with aclosing(results):
                return _json(await self._collect(rate, turn, completion_id, results))
        # Wait for the first result before answering 200: a request that fails at once
        # still gets its HTTP error status.
        try:
            first: ModelResult | None = await anext(results)
        except StopAsyncIteration:
            first = None
        except BaseException:
            await results.aclose()
            raise
        return StreamingResponse(
            self._sse(rate, turn, completion_id, first, results),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
        )

    # ---- running the turn ---------------------------------------------------------------

    async def _results(
        self, responder: TurnResponder, turn: ChatTurn, request_id: str
    ) -> AsyncIterator[ModelResult]:
        """The model results of the turn, up to its end; failures as ``ChatCompletionError``."""
        request = TurnResponseRequest(
            request_id=request_id,
            input_audio=turn.input_audio,
            input_text=turn.input_text,
            history=turn.history,
            options=turn.options,
            session=turn.session_config(),
        )
        try:
            async with aclosing(responder.respond(request)) as results:
                async for result in results:
                    yield result
        except TurnResponseError as exc:
            raise _turn_failed(exc) from exc

    async def _collect(
        self,
        model_rate_hz: int,
        turn: ChatTurn,
        completion_id: str,
        results: AsyncIterator[ModelResult],
    ) -> dict[str, Any]:
        completion = ChatCompletionBody(turn, completion_id, model_rate_hz)
        async for result in results:
            if isinstance(result, ModelText):
                completion.text(result.delta)
            elif isinstance(result, ModelAudio):
                completion.audio(result.samples, result.text)
        return completion.body()

    async def _sse(
        self,
        model_rate_hz: int,
        turn: ChatTurn,
        completion_id: str,
        first: ModelResult | None,
        results: AsyncIterator[ModelResult],
    ) -> AsyncIterator[bytes]:
        stream = ChatCompletionStream(turn, completion_id, model_rate_hz)
        try:
            yield stream.start()
            async with aclosing(results):
                if first is not None and (chunk := _chunk(stream, first)) is not None:
                    yield chunk
                async for result in results:
                    if (chunk := _chunk(stream, result)) is not None:
                        yield chunk
            for chunk in stream.finish():
                yield chunk
        except ChatCompletionError as exc:
            # The status line is sent already: the failure travels as an error chunk, and
            # no "stop" pretends the answer was complete.
            yield sse_event(exc.body())
        except Exception as exc:
            log.exception("chat completion %s failed mid-stream", completion_id)
            yield sse_event(model_failed(str(exc)).body())
        yield SSE_DONE


def _chunk(stream: ChatCompletionStream, result: ModelResult) -> bytes | None:
    if isinstance(result, ModelText):
        return stream.text(result.delta)
    if isinstance(result, ModelAudio):
        return stream.audio(result.samples, result.text)
    return None


def _turn_failed(exc: TurnResponseError) -> ChatCompletionError:
    """The HTTP answer to a turn response that did not complete."""
    if exc.kind is TurnFailure.REFUSED:
        return bad_request(exc.code, exc.message, exc.param)
    if exc.kind is TurnFailure.UNAVAILABLE:
        return ChatCompletionError(503, exc.code, exc.message)
    if exc.kind is TurnFailure.BUSY:
        return ChatCompletionError(429, exc.code, exc.message)
    return model_failed(exc.message, code=exc.code)


__all__ = ["DuplexChatCompletionsAdapter"]
