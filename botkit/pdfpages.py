"""A PDF's page count, read in a child process with a time limit.

pypdf is pure Python: a crafted 10 MB PDF of 100,000 pages costs it seconds of CPU, and in a
thread of the bot's process it would hold the GIL and stall every other user's turn. So the
count is taken in a fresh interpreter running this file as a script (it imports nothing of
botkit), killed when it runs over its time: first from the page tree's declared ``/Count``
(a regular expression over the bytes, refusing at once a PDF that declares too many pages),
then by pypdf for the rest. The child may use at most 1 GiB of memory.
"""

from __future__ import annotations

import asyncio
import io
import re
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass

__all__ = ["PageCount", "count_pages", "declared_pages"]

_PAGES_COUNT = re.compile(
    rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)|/Count\s+(\d+)[^>]*?/Type\s*/Pages\b"
)
"""``/Count`` in a page tree node's dictionary (outlines have a ``/Count`` of their own)."""
_UNREADABLE = -1
_MEMORY_LIMIT = 1 << 30


@dataclass(frozen=True, slots=True)
class PageCount:
    """What counting found: ``pages`` (``None``: damaged or encrypted), or that it ran out of
    time."""

    pages: int | None
    timed_out: bool = False


async def count_pages(data: bytes, most: int, seconds: float) -> PageCount:
    """How many pages ``data`` has (stopping early above ``most``), counted in a child process
    that is killed after ``seconds``.

    The child is started and waited for from a thread: starting a process blocks until it runs,
    tens of milliseconds on a busy machine that the event loop should not lose.
    """
    return await asyncio.to_thread(_count_in_child, data, most, seconds)


def _count_in_child(data: bytes, most: int, seconds: float) -> PageCount:
    # -P: this file's folder (botkit/) is not put on sys.path, where types.py would shadow types
    command = [sys.executable, "-P", __file__, str(most)]
    try:
        done = subprocess.run(
            command, input=data, capture_output=True, timeout=seconds, check=False
        )
    except subprocess.TimeoutExpired:  # run() has killed it
        return PageCount(None, timed_out=True)
    try:
        pages = int(done.stdout.strip() or _UNREADABLE)
    except ValueError:
        pages = _UNREADABLE
    return PageCount(None if pages < 0 else pages)


def declared_pages(data: bytes) -> int:
    """The largest page count a page tree node of ``data`` declares (0 when none is visible,
    e.g. inside compressed object streams)."""
    found = (int(a or b) for a, b in _PAGES_COUNT.findall(data))
    return max(found, default=0)


def _counted(data: bytes, most: int) -> int:
    """The page count, or -1 for a damaged or encrypted PDF; a declared count above ``most``
    is answered before pypdf parses anything."""
    declared = declared_pages(data)
    if declared > most:
        return declared
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        return _UNREADABLE if reader.is_encrypted else len(reader.pages)
    except Exception:  # pypdf raises many kinds for a bad file: it is just unreadable
        return _UNREADABLE


def _main() -> None:
    """The child: the PDF on stdin, the page count (or -1) on stdout."""
    import resource

    with suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT, _MEMORY_LIMIT))
    data = sys.stdin.buffer.read()
    print(_counted(data, int(sys.argv[1])))


if __name__ == "__main__":
    _main()
