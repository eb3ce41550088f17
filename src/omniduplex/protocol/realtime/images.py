"""Images a client sends: ``input_image`` content parts and camera frames.

OpenAI's GA user message carries an image as ``{"type": "input_image", "image_url":
"data:image/png;base64,...", "detail": "auto" | "low" | "high"}``. The wire checks what
it can without decoding pixels: a ``data:`` URL of a JPEG or PNG, strict base64 whose
bytes start with that format's signature, and a size bound. Whether the pixels decode is
the model's concern (a plugin that takes images decodes them when they arrive).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pybase64

from .errors import RealtimeProtocolError
from .wire_values import one_of, quote

IMAGE_PART_TYPE: Final = "input_image"
IMAGE_DETAILS: Final = frozenset({"auto", "low", "high"})
# The same bound as a camera frame's: 4 000 000 base64 characters (about 2.9 MB).
MAX_IMAGE_CHARS: Final = 4_000_000
IMAGE_SIGNATURES: Final = {"image/jpeg": b"\xff\xd8", "image/png": b"\x89PNG"}
_DATA_URL_SUFFIX: Final = ";base64,"
INVALID_IMAGE: Final = "invalid_image"


def has_image_signature(data: bytes) -> bool:
    """Whether ``data`` starts like a JPEG or a PNG."""
    return any(data.startswith(magic) for magic in IMAGE_SIGNATURES.values())


def image_part_indexes(content: Any) -> list[int]:
    """Indexes of the ``input_image`` parts of a message's content, in order."""
    if not isinstance(content, list):
        return []
    return [
        index
        for index, part in enumerate(content)
        if isinstance(part, Mapping) and part.get("type") == IMAGE_PART_TYPE
    ]


def check_image_part(part: Mapping[str, Any], where: str) -> None:
    """Refuse an ``input_image`` part OpenAI's schema or our bounds would not take."""
    detail = part.get("detail")
    if detail is not None and not one_of(detail, IMAGE_DETAILS):
        raise RealtimeProtocolError(
            f"{where}.detail must be one of auto, low, high, got {quote(detail)}",
            INVALID_IMAGE,
            param=f"{where}.detail",
        )
    decode_image_url(part.get("image_url"), f"{where}.image_url")


def decode_image_url(url: Any, param: str) -> tuple[str, bytes]:
    """``(mime type, bytes)`` of a ``data:image/jpeg|png;base64,`` URL (``invalid_image``).

    A remote ``https://`` URL is refused: the server fetches nothing on a client's behalf.
    """
    if not isinstance(url, str) or not url:
        raise RealtimeProtocolError(
            f"{param} must be a data:image/jpeg;base64 or data:image/png;base64 URL",
            INVALID_IMAGE,
            param=param,
        )
    head, sep, payload = url.partition(_DATA_URL_SUFFIX)
    mime_type = head.removeprefix("data:").lower()
    if not sep or not head.startswith("data:") or mime_type not in IMAGE_SIGNATURES:
        raise RealtimeProtocolError(
            f"{param} must be a data:image/jpeg;base64 or data:image/png;base64 URL"
            f" (got {quote(url[:40])}); remote image URLs are not fetched",
            INVALID_IMAGE,
            param=param,
        )
    if len(payload) > MAX_IMAGE_CHARS:
        raise RealtimeProtocolError(
            f"{param} may have at most {MAX_IMAGE_CHARS} base64 characters",
            INVALID_IMAGE,
            param=param,
        )
    try:
        data = pybase64.b64decode(payload, validate=True)
    except (ValueError, TypeError):
        raise RealtimeProtocolError(
            f"{param} is not valid base64", INVALID_IMAGE, param=param
        ) from None
    if not data.startswith(IMAGE_SIGNATURES[mime_type]):
        raise RealtimeProtocolError(
            f"{param} says {mime_type} but its bytes are not a {mime_type.split('/')[1].upper()}",
            INVALID_IMAGE,
            param=param,
        )
    return mime_type, data
