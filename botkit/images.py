"""Pictures made fit for Claude: the long side at most 1,568 px, at most 5 MB, in a format the
API reads.

A picture's size is read from its header before it is decoded: one of more pixels than the
limit is refused without the gigabyte its decoding would take, and a JPEG is decoded already
reduced (draft mode) when it is larger than needed. A picture still over the API's 5 MB after
scaling (noise, a photo saved as PNG) is re-encoded as JPEG in steps until it fits.

Decoding a large picture takes its width x height x bands in memory at once (240 MB for a
60-megapixel RGBA PNG of a few hundred KB). So every decode in the process draws on one
budget (``DECODE_BUDGET``, BOTKIT_IMAGE_MEMORY_MB): a picture waits until its pixels fit
beside the others being decoded, and one that waits too long is refused
(``ImageDecodeBusy``), so many users sending such pictures at once cannot exhaust memory.
"""

from __future__ import annotations

import ctypes
import functools
import io
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "DECODE_BUDGET",
    "DEFAULT_MAX_PIXELS",
    "IMAGE_FORMATS",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_SIDE",
    "DecodeBudget",
    "ImageDecodeBusy",
    "ImageTooLargeToDecode",
    "image_size",
    "image_type",
    "scale_image",
]

log = structlog.get_logger(__name__)

MAX_IMAGE_SIDE = 1568
"""Claude scales a longer side down anyway: sending it costs upload time and tokens."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""The Messages API refuses a picture over 5 MB (its decoded bytes)."""
DEFAULT_MAX_PIXELS = 60_000_000
"""BOTKIT_MAX_IMAGE_PIXELS's default: phone photos and A4 scans at 600 dpi fit."""
IMAGE_FORMATS = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp"}
"""Pillow's format names of the pictures Claude reads, and their MIME types."""
DEFAULT_DECODE_MB = 400
"""BOTKIT_IMAGE_MEMORY_MB's default: two 16-megapixel RGBA pictures decoded at a time."""
DECODE_WAIT_SECONDS = 60.0
"""How long a picture waits for room in the budget before it is refused."""
_DECODE_OVERHEAD = 2.3
"""What decoding and scaling hold, over the decoded picture's bytes (measured with Pillow:
a 60-megapixel RGBA PNG takes 550 MB, its pixels 240 MB)."""


class ImageDecodeBusy(Exception):
    """A picture could not be decoded now: its pixels do not fit in the decode budget beside
    the pictures being decoded."""


class ImageTooLargeToDecode(ImageDecodeBusy):
    """A picture whose decoding would take more than the whole budget: it never fits."""

    def __init__(self, need: int, total: int) -> None:
        super().__init__(f"needs {need} bytes, more than the budget of {total}")
        self.need = need
        self.total = total


class DecodeBudget:
    """Bytes of decoded pixels the whole process may hold at once, shared by every thread."""

    def __init__(self, megabytes: float = DEFAULT_DECODE_MB) -> None:
        self.total = int(megabytes * 1024 * 1024)
        self.used = 0
        self.peak = 0
        """The most reserved at once so far (for tests and the bench)."""
        self._room = threading.Condition()

    def resize(self, megabytes: float) -> None:
        """Set the budget to ``megabytes`` (BOTKIT_IMAGE_MEMORY_MB)."""
        with self._room:
            self.total = int(megabytes * 1024 * 1024)
            self._room.notify_all()

    @contextmanager
    def reserve(self, need: int, timeout: float = DECODE_WAIT_SECONDS) -> Iterator[None]:
        """Hold ``need`` bytes while the block decodes; ``ImageDecodeBusy`` when they never
        fit, or do not fit within ``timeout`` seconds."""
        if need > self.total:
            raise ImageTooLargeToDecode(need, self.total)
        with self._room:
            if not self._room.wait_for(lambda: self.used + need <= self.total, timeout):
                raise ImageDecodeBusy(f"no room for {need} bytes within {timeout:g} s")
            self.used += need
            self.peak = max(self.peak, self.used)
        try:
            yield
        finally:
            _give_back_memory()
            with self._room:
                self.used -= need
                self._room.notify_all()


def _give_back_memory() -> None:
    """Return freed memory to the system (glibc keeps it per thread otherwise, so pictures
    decoded one after another on different threads would add up)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


DECODE_BUDGET = DecodeBudget()
"""The process's budget (set from BOTKIT_IMAGE_MEMORY_MB when a bot is made)."""


def decoded_bytes(size: tuple[int, int], mode: str) -> int:
    """What decoding (and scaling) a picture of ``size`` in ``mode`` holds in memory."""
    bands = {"1": 1, "L": 1, "P": 1, "LA": 2, "I;16": 2, "RGB": 3}.get(mode, 4)
    return int(size[0] * size[1] * bands * _DECODE_OVERHEAD)


_JPEG_STEPS = ((1.0, 85), (1.0, 70), (0.75, 70), (0.5, 70), (0.35, 60), (0.25, 50))
"""(scale, quality) tried in turn for a picture too large for the API as it is."""


def image_size(data: bytes) -> tuple[int, int] | None:
    """A picture's width and height, read from its header (nothing is decoded); ``None`` when
    it is not a picture Pillow knows."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                return image.size
    except Exception:  # Pillow raises many kinds for a bad file: it is just unreadable
        return None


def scale_image(
    data: bytes,
    max_side: int = MAX_IMAGE_SIDE,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    budget: DecodeBudget | None = None,
) -> bytes | None:
    """The picture with its long side at most ``max_side`` and at most 5 MB, as JPEG, PNG, GIF
    or WebP.

    A picture in another format (BMP, TIFF…) becomes PNG (JPEG if that is too large); ``None``
    when it cannot be read, or has more than ``max_pixels`` pixels (refused undecoded).
    Decoding draws on ``budget`` (the process's): ``ImageDecodeBusy`` when it has no room.
    """
    budget = budget or DECODE_BUDGET
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image: Image.Image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > max_pixels:
                log.info("files.image_too_many_pixels", width=width, height=height)
                return None
            fmt = image.format if image.format in IMAGE_FORMATS else None
            fits = fmt is not None and max(image.size) <= max_side and len(data) <= MAX_IMAGE_BYTES
            if not fits:
                image.draft("RGB", _target(image.size, max_side))  # JPEG: decoded at 1/2…1/8
            with budget.reserve(decoded_bytes(image.size, image.mode)):
                if fits:
                    image.load()  # a damaged file fails here, not at the API
                    return data
                image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
                scaled = image.size != (width, height) or fmt is None
                return _fitted(image, fmt, same_bytes=None if scaled else data)
    except ImageDecodeBusy:
        raise
    except Exception as e:  # Pillow raises many kinds for a bad file: it is just unreadable
        log.info("files.image_unreadable", error=type(e).__name__)
        return None


def _target(size: tuple[int, int], max_side: int) -> tuple[int, int]:
    """``size`` scaled (keeping its ratio) so that its long side is ``max_side``."""
    scale = min(1.0, max_side / max(size))
    return max(1, round(size[0] * scale)), max(1, round(size[1] * scale))


def _fitted(image: Image.Image, fmt: str | None, same_bytes: bytes | None = None) -> bytes:
    """The scaled picture encoded in its format, or as JPEG in steps until it is 5 MB or less
    (``same_bytes``: the picture as it came, unscaled and already too large in its format)."""
    if fmt == "JPEG" and image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    encoded = same_bytes or _encoded(image, fmt or "PNG", quality=85)
    if len(encoded) <= MAX_IMAGE_BYTES:
        return encoded
    flat = _flattened(image)
    for scale, quality in _JPEG_STEPS:
        smaller = flat
        if scale < 1:
            size = (max(1, round(flat.width * scale)), max(1, round(flat.height * scale)))
            smaller = flat.resize(size)
        encoded = _encoded(smaller, "JPEG", quality=quality)
        if len(encoded) <= MAX_IMAGE_BYTES:
            log.info("files.image_reencoded", size=len(encoded), quality=quality, scale=scale)
            break
    return encoded


def _flattened(image: Image.Image) -> Image.Image:
    """The picture as RGB, transparent parts on white (JPEG has no transparency)."""
    from PIL import Image

    if image.mode in ("RGB", "L"):
        return image
    rgba = image.convert("RGBA")
    background = Image.new("RGB", rgba.size, (255, 255, 255))
    background.paste(rgba, mask=rgba.getchannel("A"))
    return background


def _encoded(image: Image.Image, fmt: str, *, quality: int) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **({"quality": quality} if fmt == "JPEG" else {}))
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
