"""Retention (``python -m botkit prune``): old session entries go, and media nothing refers to.

An entry is removed when it is older than the cut-off *and* no live context needs it. A context
is rebuilt (``ContextManager.restore``) from the conversation's last ``/clear`` on, and at its
last compaction from the messages that compaction kept: :func:`needed_from` finds the first
entry that rebuild reads, and that entry and all after it stay, whatever their age. Then every
picture or document no remaining entry refers to is removed.

A bot may run meanwhile. With files, each session file is rewritten under its ``flock``
(which an append takes too) into a temporary file renamed over it, so a crash leaves the old
file or the new one; the bot notices the new file and appends there. Media are swept under the
media folder's exclusive ``flock``, while an append with media holds it shared from storing
them to writing its line: a sweep never deletes media a line being written refers to. In
PostgreSQL, entries are deleted by number (appends only add higher ones), and media under an
advisory lock that appends with media hold shared (``botkit.sessions.postgres``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from pydantic import ValidationError

from botkit.config import Settings
from botkit.errors import SessionError
from botkit.extras import require_extra
from botkit.sessions.base import is_conversation_key
from botkit.sessions.jsonl import (
    CompactionEntry,
    FeedbackEntry,
    ResetEntry,
    SessionEntry,
    parse_entry,
)
from botkit.sessions.live import needed_from
from botkit.sessions.media import MEDIA_DIR, write_all

if TYPE_CHECKING:
    from botkit.sessions.postgres import PostgresSessionStore

__all__ = [
    "PruneReport",
    "needed_from",
    "prune",
    "prune_database",
    "prune_files",
    "rewrite_file",
    "sweep_media_files",
]

Entry = SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry

_REFERENCE = re.compile(rb'"sha256":"([0-9a-f]{64})"')
_MEDIA_NAME = re.compile(r"([0-9a-f]{64})\.[a-z]{3,4}")
_PRIVATE_FILE = 0o600


@dataclass(slots=True)
class PruneReport:
    """What a prune removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    entries: int = 0
    conversations: int = 0
    media: int = 0
    media_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    """One line per conversation that loses entries."""

    def removed(self, key: str, count: int) -> None:
        """Note that ``count`` entries of conversation ``key`` go."""
        if count:
            self.entries += count
            self.conversations += 1
            verb = "would remove" if self.dry_run else "removed"
            self.notes.append(f"{key}: {verb} {count} entries")

    @property
    def summary(self) -> str:
        """``removed 12 entries from 3 conversations and 4 media (1.2 MB)``."""
        verb = "would remove" if self.dry_run else "removed"
        plural = "" if self.conversations == 1 else "s"
        return (
            f"{verb} {self.entries} entries from {self.conversations} conversation{plural}"
            f" and {self.media} media ({self.media_bytes / 1e6:.1f} MB)"
        )


def _doomed(entries: Sequence[Entry], cutoff: datetime) -> list[int]:
    """Indexes of the entries to remove: older than ``cutoff``, and before what is needed."""
    needed = needed_from(entries)
    return [i for i, entry in enumerate(entries[:needed]) if _stamp(entry) < cutoff]


def _stamp(entry: Entry) -> datetime:
    stamp = entry.timestamp
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


async def prune(settings: Settings, days: float, *, dry_run: bool) -> PruneReport:
    """Prune the sessions ``settings`` point at (PostgreSQL, or files) to the last ``days``."""
    cutoff = datetime.now(UTC) - timedelta(days=days)
    if settings.database_url is None:
        try:
            return prune_files(settings.sessions_dir, cutoff, dry_run=dry_run)
        except OSError as e:
            raise SessionError(f"cannot prune the session files: {e}") from e
    require_extra("asyncpg", "postgres", "BOTKIT_DATABASE_URL")
    from botkit.sessions.postgres import PostgresSessionStore

    store = await PostgresSessionStore.connect(settings.database_url.get_secret_value())
    try:
        return await prune_database(store, cutoff, dry_run=dry_run)
    finally:
        await store.close()


# --- files --------------------------------------------------------------------------------------


def prune_files(directory: Path, cutoff: datetime, *, dry_run: bool) -> PruneReport:
    """Prune the session files in ``directory`` and their ``media/``."""
    report = PruneReport(dry_run)
    used: set[str] = set()
    for path in sorted(directory.glob("*.jsonl")):
        if is_conversation_key(path.stem):
            with _locked(path) as fd:
                if fd is not None:
                    used |= _prune_file(path, fd, cutoff, report)
    media = directory / MEDIA_DIR
    if media.is_dir():
        _sweep_media(directory, media, None if dry_run else set(), used, report)
    return report


def sweep_media_files(directory: Path) -> int:
    """Delete the media in ``directory``'s media folder no session file refers to; how many."""
    report = PruneReport(dry_run=False)
    if (directory / MEDIA_DIR).is_dir():
        _sweep_media(directory, directory / MEDIA_DIR, set(), set(), report)
    return report.media


def rewrite_file(path: Path, change: Callable[[bytes], bytes | None]) -> bool:
    """Replace ``path`` with ``change(its bytes)`` under its ``flock``, atomically, as prune
    does (a running bot reopens it); ``None`` from ``change`` leaves it. Whether it changed."""
    with _locked(path) as fd:
        if fd is None:
            return False
        changed = change(_read_all(fd))
        if changed is None:
            return False
        _replace(path, changed)
        return True


def _prune_file(path: Path, fd: int, cutoff: datetime, report: PruneReport) -> set[str]:
    """Remove the file's old entries (locked as ``fd``); the media hashes of what stays."""
    lines = _read_all(fd).splitlines(keepends=True)
    entries: list[Entry] = []
    numbered: list[int] = []  # the line of each entry
    for number, line in enumerate(lines):
        with contextlib.suppress(orjson.JSONDecodeError, ValidationError):
            entries.append(parse_entry(line))
            numbered.append(number)
    doomed = {numbered[i] for i in _doomed(entries, cutoff)}  # damaged lines always stay
    kept = [line if line.endswith(b"\n") else line + b"\n" for n, line in enumerate(lines)]
    kept = [line for n, line in enumerate(kept) if n not in doomed]
    report.removed(path.stem, len(doomed))
    if doomed and not report.dry_run:
        _replace(path, b"".join(kept))
    return {m.decode() for line in kept for m in _REFERENCE.findall(line)}


def _replace(path: Path, data: bytes) -> None:
    """Put ``data`` in ``path`` at once: a temporary file renamed over it (or no file at all)."""
    if not data:
        path.unlink()
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.prune")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _PRIVATE_FILE)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int | None]:
    """``path`` open and under its exclusive ``flock`` (``None`` if it is gone)."""
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            yield None
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, path):
                yield fd
                return
        finally:
            os.close(fd)  # closing releases the lock


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (another prune may replace it)."""
    opened = os.fstat(fd)
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    return (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _sweep_media(
    directory: Path, media: Path, rescan: set[str] | None, used: set[str], report: PruneReport
) -> None:
    """Remove media no session line refers to (``rescan`` None: only count them, from ``used``).

    Held under the media folder's exclusive lock, the rescan of every session file sees each
    line that refers to media: an append with media holds the lock shared until it is written.
    """
    fd = os.open(media, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if rescan is not None:
            for path in directory.glob("*.jsonl"):
                with contextlib.suppress(FileNotFoundError):
                    rescan |= {m.decode() for m in _REFERENCE.findall(path.read_bytes())}
            used = rescan
        for item in sorted(media.iterdir()):
            match = _MEDIA_NAME.fullmatch(item.name)
            if match and match[1] not in used:
                report.media += 1
                report.media_bytes += item.stat().st_size
                if rescan is not None:
                    item.unlink()
    finally:
        os.close(fd)


# --- PostgreSQL ---------------------------------------------------------------------------------


async def prune_database(
    store: PostgresSessionStore, cutoff: datetime, *, dry_run: bool
) -> PruneReport:
    """Prune the conversations in ``store`` and the media none refers to any more."""
    report = PruneReport(dry_run)
    doomed_rows: list[tuple[str, int]] = []
    for key in await store.conversations():
        file = await store.load_stored(key)
        seqs = [file.numbers[i] for i in _doomed(file.entries, cutoff)]
        report.removed(key, len(seqs))
        if dry_run:
            doomed_rows += [(key, seq) for seq in seqs]
        elif seqs:
            await store.delete_entries(key, seqs)
    for _name, size in await store.unreferenced_media(excluding=doomed_rows, delete=not dry_run):
        report.media += 1
        report.media_bytes += size
    return report
