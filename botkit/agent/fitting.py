"""Requests the Messages API accepts: the oldest media are left out of one that would not fit.

The API refuses a whole request over 32 MB, with more than 100 PDF pages or 100 pictures, or
holding a picture over 5 MB; a conversation that once got such a file would then fail at every
later call. So each request carries the newest media that fit these limits and, in place of
the older ones, a short note saying they were left out. The session keeps every file: only
the request is trimmed.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from botkit.pdfpages import declared_pages
from botkit.types import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
)

__all__ = [
    "MAX_REQUEST_BYTES",
    "MAX_REQUEST_IMAGES",
    "MAX_REQUEST_PDF_PAGES",
    "MediaLimits",
    "fit_media",
    "remember_pages",
]

MB = 1024 * 1024
MAX_REQUEST_BYTES = 32 * MB
"""The largest request body the Messages API takes (413 above it)."""
MAX_REQUEST_PDF_PAGES = 100
MAX_REQUEST_IMAGES = 100
MAX_IMAGE_BYTES = 5 * MB
"""The largest picture (its decoded bytes) the API takes."""
_RESERVED = 2 * MB
"""Kept free for the system prompt, the tools and the conversation's text."""
_NOTE = "[{what} sent earlier is left out of this request: too large to send again.]"
_PAGES: OrderedDict[str, int] = OrderedDict()
_PAGES_KEPT = 256


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """What one request may carry."""

    max_bytes: int = MAX_REQUEST_BYTES - _RESERVED
    """The base64 of its media together."""
    max_pdf_pages: int = MAX_REQUEST_PDF_PAGES
    max_images: int = MAX_REQUEST_IMAGES
    max_image_bytes: int = MAX_IMAGE_BYTES


def remember_pages(data: str, pages: int) -> None:
    """Note the page count of the PDF whose base64 is ``data`` (counted when it was read)."""
    _PAGES[data] = pages
    while len(_PAGES) > _PAGES_KEPT:
        _PAGES.popitem(last=False)


def fit_media(
    messages: Sequence[Message], limits: MediaLimits | None = None, *, newest_only: bool = False
) -> list[Message]:
    """``messages`` with the oldest media left out (a note in their place) until the rest fit
    ``limits``; with ``newest_only``, only the last message keeps its media."""
    budget = _Budget(limits or MediaLimits())
    out: list[Message] = []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not message.has_media:  # nearly every message: nothing to fit
            out.append(message)
            continue
        keep = not newest_only or index == len(messages) - 1
        content = [budget.fitted(block, keep) for block in reversed(message.content)]
        content.reverse()
        if all(new is old for new, old in zip(content, message.content, strict=True)):
            out.append(message)
        else:
            out.append(Message(role=message.role, content=content, usage=message.usage))
    out.reverse()
    return out


class _Budget:
    """What is left of a request's limits, spent from the newest media back; once one does
    not fit, every older one is left out too."""

    def __init__(self, limits: MediaLimits) -> None:
        self.limits = limits
        self.bytes = 0
        self.pages = 0
        self.images = 0
        self.full = False

    def fitted(self, block: ContentBlock, keep: bool) -> ContentBlock:
        if isinstance(block, ImageBlock | DocumentBlock):
            return block if keep and self.take(block) else _note(block)
        if isinstance(block, ToolResultBlock) and block.images:
            fits = [(image, keep and self.take(image)) for image in reversed(block.images)]
            fits.reverse()
            if all(ok for _, ok in fits):
                return block
            kept = tuple(image for image, ok in fits if ok)
            notes = [_note(image).text for image, ok in fits if not ok]
            content = "\n".join([block.content, *notes] if block.content else notes)
            return block.model_copy(update={"images": kept or None, "content": content})
        return block

    def take(self, block: ImageBlock | DocumentBlock) -> bool:
        """Whether ``block`` still fits (and, if so, count it)."""
        data = block.source.data or ""
        size, pages, images = len(data), 0, 0
        if isinstance(block, ImageBlock):
            images = 1
            if _decoded_size(data) > self.limits.max_image_bytes:
                return False  # never sendable, whatever else the request holds
        elif block.source.type == "base64":
            pages = _pages(data)
        limits = self.limits
        if self.full or (
            self.bytes + size > limits.max_bytes
            or self.pages + pages > limits.max_pdf_pages
            or self.images + images > limits.max_images
        ):
            self.full = True
            return False
        self.bytes, self.pages, self.images = (
            self.bytes + size,
            self.pages + pages,
            self.images + images,
        )
        return True


def _note(block: ImageBlock | DocumentBlock) -> TextBlock:
    what = "A picture"
    if isinstance(block, DocumentBlock):
        what = f"The document {block.title or ''}".strip()
    return TextBlock(text=_NOTE.format(what=what))


def _decoded_size(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=")


def _pages(data: str) -> int:
    """A base64 PDF's pages: as counted when it was read, else as its page tree declares."""
    pages = _PAGES.get(data)
    if pages is None:
        try:
            pages = declared_pages(base64.b64decode(data)) or 1
        except ValueError:
            pages = 1
        remember_pages(data, pages)
    return pages
