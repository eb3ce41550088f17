"""OpenAI's chat completions format as a duplex deployment serves it, sans-I/O.

``parse_chat_request`` validates a request body into one ``ChatTurn`` (``request`` and
``content``); ``ChatCompletionBody`` and ``ChatCompletionStream`` build the answer from
the model's output (``response``); every refusal or failure is a ``ChatCompletionError``,
which carries its HTTP status and OpenAI error object (``errors``). The route that reads
the HTTP request and talks to the engine is ``entrypoints/duplex/chat_completions.py``.

What a request may hold:

- ``messages``: ``system`` / ``developer`` messages become the instructions; the last
  message is the turn and must come from the ``user``; the messages before it are the
  history (as text: audio of earlier turns is validated, then dropped). Content is a
  string or a list of parts: ``text`` (or ``input_text``) and ``input_audio`` (or
  ``audio``) ``{"data": <base64>, "format": "wav" | "pcm16" | "pcm_f32le" | "g711_ulaw" |
  "g711_alaw", "sample_rate_hz": <int>}``. Raw formats default to 24 kHz (G.711: 8 kHz);
  WAV carries its own rate.
- ``modalities`` (default ``["text"]``) and ``audio`` ``{"voice", "format"}`` with format
  ``wav`` (default), ``pcm16``, ``g711_ulaw`` or ``g711_alaw``; output audio is 24 kHz
  (G.711: 8 kHz).
- ``stream`` and ``stream_options.include_usage``. Streamed ``wav`` is one WAV file across
  the chunks: the first ``delta.audio.data`` starts with a header whose sizes are the
  "unknown length" value streamers use, so the decoded chunks concatenate to a playable file.
- ``temperature`` and ``max_completion_tokens`` / ``max_tokens`` reach the plugin as
  response options; unknown top-level keys (the SDK's ``extra_body``) as
  ``options["extra_body"]``.

Refused with 400 (OpenAI error objects): ``n`` > 1, ``tools`` / ``functions``,
``logprobs`` / ``top_logprobs``, a non-text ``response_format``, image and other content
parts, and anything malformed. A duplex model reports no token counts, so ``usage`` is 0.
"""

from .errors import ChatCompletionError, bad_request, model_failed
from .request import ChatTurn, TurnInputs, load_json_body, parse_chat_request
from .response import (
    SSE_DONE,
    ChatCompletionBody,
    ChatCompletionStream,
    new_completion_id,
    sse_event,
)

__all__ = [
    "SSE_DONE",
    "ChatCompletionBody",
    "ChatCompletionError",
    "ChatCompletionStream",
    "ChatTurn",
    "TurnInputs",
    "bad_request",
    "load_json_body",
    "model_failed",
    "new_completion_id",
    "parse_chat_request",
    "sse_event",
]
