"""Images as upstream's vision path takes them: RGB ``PIL.Image`` objects.

Upstream's ``MiniCPMODuplex.streaming_prefill(frame_list=[...])`` hands each image to its
processor (``process_image``) and reads ``frame.size`` to plan its slices, so a frame
must be a PIL image; OpenBMB's own demo decodes each JPEG with ``Image.open``. Decoding
is bounded: a compressed image may name more pixels than it carries (a decompression
bomb), so the header's size is checked before any pixel is decoded.
"""

from __future__ import annotations

import io
import warnings
from typing import Final

from PIL import Image, UnidentifiedImageError

from omniduplex.engine.duplex.plugin import InputImage, InputImageError

# 4096 x 4096: far above what the model resolves (it downsamples each image to about
# 448 px per slice), far below what would exhaust a worker's memory.
MAX_IMAGE_PIXELS: Final = 4096 * 4096
_FORMATS: Final = {"image/jpeg": "JPEG", "image/png": "PNG"}


def decode_image(image: InputImage) -> Image.Image:
    """The image's pixels as RGB; ``InputImageError`` when they cannot be read."""
    expected = _FORMATS.get(image.mime_type)
    if expected is None:
        raise InputImageError(f"{image.mime_type} images are not supported (JPEG or PNG)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            opened = Image.open(io.BytesIO(image.data), formats=[expected])
            width, height = opened.size
            if width * height > MAX_IMAGE_PIXELS:
                raise InputImageError(
                    f"the image is {width}x{height}; at most {MAX_IMAGE_PIXELS} pixels are accepted"
                )
            opened.load()
            return opened.convert("RGB")
    except InputImageError:
        raise
    except UnidentifiedImageError:
        raise InputImageError(f"the image is not a readable {expected}") from None
    except (OSError, ValueError) as exc:  # truncated or corrupt pixel data
        raise InputImageError(f"the image is not a readable {expected}: {exc}") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputImageError("the image is too large to decode") from None
