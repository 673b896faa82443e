"""Pictures scaled for Claude: the long side at most 1,568 px, in a format the API reads."""

from __future__ import annotations

import io
import warnings

import structlog

__all__ = ["IMAGE_FORMATS", "MAX_IMAGE_SIDE", "image_type", "scale_image"]

log = structlog.get_logger(__name__)

MAX_IMAGE_SIDE = 1568
"""Claude scales a longer side down anyway: sending it costs upload time and tokens."""
IMAGE_FORMATS = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp"}
"""Pillow's format names of the pictures Claude reads, and their MIME types."""


def scale_image(data: bytes, max_side: int = MAX_IMAGE_SIDE) -> bytes | None:
    """The picture with its long side at most ``max_side``, as JPEG, PNG, GIF or WebP.

    A picture in another format (BMP, TIFF…) becomes PNG; ``None`` when it cannot be read.
    """
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image: Image.Image = Image.open(io.BytesIO(data))
            image.load()
    except Exception as e:  # Pillow raises many kinds for a bad file: it is just unreadable
        log.info("files.image_unreadable", error=type(e).__name__)
        return None
    fmt = image.format if image.format in IMAGE_FORMATS else None
    if fmt is not None and max(image.size) <= max_side:
        return data
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    if fmt == "JPEG" and image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    out = io.BytesIO()
    image.save(out, format=fmt or "PNG", **({"quality": 85} if fmt == "JPEG" else {}))
    return out.getvalue()


def image_type(data: bytes) -> str | None:
    """The MIME type of a JPEG, PNG, GIF or WebP picture, from its first bytes; else ``None``."""
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    return None
