"""Pictures and documents of session entries, stored once by content hash and referenced.

A conversation holds its media inline (base64, or a text file's text), as the Messages API
wants them. Written as they are, one photo would make every session line after it megabytes
long to re-read and export. So before an entry is stored its media become references, a source
``{"type": "stored", "media_type": …, "sha256": …}``, and their bytes are kept once under
``<sha256>.<ext>`` (in ``<sessions>/media/`` beside the JSONL files, or in PostgreSQL's
``botkit_session_media``). Reading puts the bytes back; media that are gone leave a short text
in their place, so a conversation still loads. Lines written with inline media still load.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog

from botkit.types import (
    ContentBlock,
    DocumentBlock,
    DocumentSource,
    ImageBlock,
    ImageSource,
    TextBlock,
    ToolResultBlock,
)

__all__ = [
    "MEDIA_DIR",
    "MISSING_MEDIA_TEXT",
    "MediaFiles",
    "externalize",
    "references",
    "resolve",
    "write_all",
]

MEDIA_DIR = "media"
"""The folder beside the session files holding their media."""
MISSING_MEDIA_TEXT = "[{what} sent here is no longer stored]"
_EXTENSIONS = {
    "image/jpeg": "jpg",
    "image/png": "png",
    "image/gif": "gif",
    "image/webp": "webp",
    "application/pdf": "pdf",
    "text/plain": "txt",
}
_PRIVATE_DIR = 0o700
_HASH = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[0-9a-f]{64}\.[a-z]{3,4}")
_PRIVATE_FILE = 0o600

log = structlog.get_logger(__name__)

Blobs = dict[str, bytes]
"""Media file names (``<sha256>.<ext>``) and their bytes."""


def media_name(sha256: str, media_type: str | None) -> str:
    """The stored name of media with this hash and type: ``<sha256>.<ext>``.

    A reference whose hash is not 64 hex digits (a hand-made or imported line, say
    ``../../secret``) gets the empty name, which nothing is stored under: it reads as missing
    media, never as a path.
    """
    if not _HASH.fullmatch(sha256):
        return ""
    return f"{sha256}.{_EXTENSIONS.get(media_type or '', 'bin')}"


def externalize(content: list[ContentBlock]) -> tuple[list[ContentBlock], Blobs]:
    """``content`` with its inline media replaced by references, and the media to store."""
    blobs: Blobs = {}
    out = [_externalized(block, blobs) for block in content]
    return out, blobs


def references(content: Iterable[ContentBlock]) -> set[str]:
    """The media names ``content`` refers to."""
    names: set[str] = set()
    for block in content:
        for source in _sources(block):
            if source.type == "stored" and source.sha256:
                names.add(media_name(source.sha256, source.media_type))
    return names


def resolve(
    content: list[ContentBlock], fetch: Callable[[str], bytes | None]
) -> list[ContentBlock]:
    """``content`` with its references filled in from ``fetch``; missing media become a note."""
    if not references(content):
        return content
    return [_resolved(block, fetch) for block in content]


class MediaFiles:
    """Media as files, ``<directory>/<sha256>.<ext>``: only their owner may read them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._private = False

    def put(self, blobs: Blobs) -> None:
        """Write each blob not stored whole yet (via a temporary file: never half a file).

        A file already there with the wrong size (cut short by a full disk before botkit
        checked its writes) is written again; a write that fails raises ``OSError`` and leaves
        nothing behind.
        """
        for name, data in blobs.items():
            path = self.directory / name
            if not _holds(path, len(data)):
                self._write(path, data)

    def get(self, name: str) -> bytes | None:
        """The bytes stored under ``name``; ``None`` (and a log line) when they are gone.

        Only ``<sha256>.<ext>`` names are read: anything else is missing, never a path.
        """
        if not _NAME.fullmatch(name):
            log.warning("session.media_name_refused", media=name[:80])
            return None
        try:
            return (self.directory / name).read_bytes()
        except OSError as e:
            log.warning("session.media_missing", media=name, error=type(e).__name__)
            return None

    def size(self, name: str) -> int:
        """The bytes stored under ``name`` (0 when it is gone, or not a media name)."""
        if not _NAME.fullmatch(name):
            return 0
        try:
            return (self.directory / name).stat().st_size
        except OSError:
            return 0

    def _write(self, path: Path, data: bytes) -> None:
        self.directory.mkdir(mode=_PRIVATE_DIR, parents=True, exist_ok=True)
        if not self._private:  # once a run: a folder left readable by others is made private
            if stat.S_IMODE(self.directory.stat().st_mode) & 0o077:
                os.chmod(self.directory, _PRIVATE_DIR)
            self._private = True
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _PRIVATE_FILE)
        try:
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(temporary, path)
        except OSError:
            temporary.unlink(missing_ok=True)
            raise


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``: ``os.write`` may write less (a full disk, a size limit)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "nothing could be written")
        view = view[written:]


def _holds(path: Path, size: int) -> bool:
    """Whether ``path`` is there with ``size`` bytes (its name is its hash: then it is whole)."""
    try:
        return path.stat().st_size == size
    except FileNotFoundError:
        return False


def _sources(block: ContentBlock) -> list[ImageSource | DocumentSource]:
    if isinstance(block, ImageBlock | DocumentBlock):
        return [block.source]
    if isinstance(block, ToolResultBlock):
        return [image.source for image in block.images or ()]
    return []


def _externalized(block: ContentBlock, blobs: Blobs) -> ContentBlock:
    if isinstance(block, ImageBlock | DocumentBlock):
        return block.model_copy(update={"source": _stored(block.source, blobs)})
    if isinstance(block, ToolResultBlock) and block.images:
        images = tuple(_externalized(image, blobs) for image in block.images)
        return block.model_copy(update={"images": images})
    return block


def _stored(source: ImageSource | DocumentSource, blobs: Blobs) -> ImageSource | DocumentSource:
    """A reference for inline media (recording its bytes in ``blobs``); others as they are."""
    if source.data is None or source.type not in ("base64", "text"):
        return source
    media_type: str | None = "text/plain"
    if source.type == "text":
        data = source.data.encode()
    else:
        data, media_type = base64.b64decode(source.data), source.media_type
    sha256 = hashlib.sha256(data).hexdigest()
    blobs[media_name(sha256, media_type)] = data
    return source.model_copy(
        update={"type": "stored", "data": None, "sha256": sha256, "media_type": media_type}
    )


def _resolved(block: ContentBlock, fetch: Callable[[str], bytes | None]) -> ContentBlock:
    if isinstance(block, ImageBlock | DocumentBlock):
        source = _inline(block.source, fetch)
        if source is None:
            what = "A picture"
            if isinstance(block, DocumentBlock):
                what = f"The document {block.title or ''}".strip()
            return TextBlock(text=MISSING_MEDIA_TEXT.format(what=what))
        return block.model_copy(update={"source": source})
    if isinstance(block, ToolResultBlock) and block.images:
        images = [_resolved(image, fetch) for image in block.images]
        kept = tuple(image for image in images if isinstance(image, ImageBlock))
        return block.model_copy(update={"images": kept or None})
    return block


def _inline(
    source: ImageSource | DocumentSource, fetch: Callable[[str], bytes | None]
) -> ImageSource | DocumentSource | None:
    if source.type != "stored" or not source.sha256:
        return source
    data = fetch(media_name(source.sha256, source.media_type))
    if data is None:
        return None
    if isinstance(source, DocumentSource) and source.media_type == "text/plain":
        return source.model_copy(
            update={"type": "text", "data": data.decode(errors="replace"), "sha256": None}
        )
    encoded = base64.b64encode(data).decode("ascii")
    return source.model_copy(update={"type": "base64", "data": encoded, "sha256": None})
