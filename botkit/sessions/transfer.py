"""Moving sessions between JSONL files and PostgreSQL (``python -m botkit sessions``).

An export writes each conversation's rows as they are stored, so exporting what was imported
gives back the very bytes of the files (botkit's own lines are stored as written), with the
pictures and documents they refer to in ``media/``. An import never adds to a conversation that
already has entries: running it twice duplicates nothing.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from structlog.testing import capture_logs

from botkit.errors import SessionError
from botkit.sessions.base import is_conversation_key
from botkit.sessions.jsonl import SessionEntry, parse_entry, read_session_file
from botkit.sessions.media import MEDIA_DIR, MediaFiles, references
from botkit.sessions.postgres import PostgresSessionStore

__all__ = ["TransferReport", "export_sessions", "import_sessions", "transfer"]

_PRIVATE_DIR = 0o700
_PRIVATE_FILE = 0o600


@dataclass(slots=True)
class TransferReport:
    """What an export or import did: conversations moved, and what it left out and why."""

    verb: str
    """``exported`` or ``imported``."""
    conversations: int = 0
    entries: int = 0
    notes: list[str] = field(default_factory=list)
    """One line for each file or conversation skipped, and for each damaged line."""
    skipped: int = 0

    def skip(self, what: str, why: str) -> None:
        """Note that a file or conversation was left out, and why."""
        self.skipped += 1
        self.notes.append(f"skipped {what}: {why}")

    @property
    def summary(self) -> str:
        """``imported 3 conversations (120 entries), 1 skipped``."""
        plural = "" if self.conversations == 1 else "s"
        text = f"{self.verb} {self.conversations} conversation{plural} ({self.entries} entries)"
        return text + (f", {self.skipped} skipped" if self.skipped else "")


async def export_sessions(store: PostgresSessionStore, directory: Path) -> TransferReport:
    """Write each conversation in ``store`` to ``<directory>/<key>.jsonl``; never overwrite one."""
    report = TransferReport("exported")
    _make_dir(directory)
    for key in await store.conversations():
        path = directory / f"{key}.jsonl"
        if not is_conversation_key(key):
            report.skip(f"conversation {key!r}", "not a session file name")
        elif path.exists():
            report.skip(key, f"{path} already exists")
        else:
            lines = await store.lines(key)
            _write_new(path, b"".join(lines))
            await _export_media(store, lines, directory)
            report.conversations += 1
            report.entries += len(lines)
    return report


async def import_sessions(store: PostgresSessionStore, directory: Path) -> TransferReport:
    """Load each ``<key>.jsonl`` in ``directory`` into ``store``; damaged lines are left out."""
    report = TransferReport("imported")
    for path in _session_files(directory):
        await _import_file(store, path, report)
    return report


async def _import_file(store: PostgresSessionStore, path: Path, report: TransferReport) -> None:
    """One session file into ``store``, unless its conversation is there already."""
    key = path.stem
    if not is_conversation_key(key):
        report.skip(path.name, "not a session file (<user id>.jsonl)")
        return
    with capture_logs():  # the reader logs each damaged line; the report says it instead
        file = read_session_file(path)
    report.notes += [f"{path.name} line {n}: {why} (skipped)" for n, why in file.problems]
    if not file.entries:
        report.skip(path.name, "no entries")
        return
    existing = await store.import_entries(key, file.entries)
    if existing:
        report.skip(path.name, f"the database already has {existing} entries for {key}")
        return
    report.conversations += 1
    report.entries += len(file.entries)


async def _export_media(store: PostgresSessionStore, lines: list[bytes], directory: Path) -> None:
    """Write the media these lines refer to into ``<directory>/media/``."""
    names: set[str] = set()
    for line in lines:
        with contextlib.suppress(ValueError):  # a damaged row: exported as it is, nothing to add
            entry = parse_entry(line)
            if isinstance(entry, SessionEntry):
                names |= references(entry.content)
    if names:
        try:
            MediaFiles(directory / MEDIA_DIR).put(await store.media(names))
        except OSError as e:
            raise SessionError(f"cannot write media in {directory}: {e}") from e


def _make_dir(directory: Path) -> None:
    """Make ``directory`` if need be; a new one only its owner may enter."""
    try:
        directory.mkdir(mode=_PRIVATE_DIR, parents=True, exist_ok=True)
    except OSError as e:
        raise SessionError(f"cannot make {directory}: {e}") from e


def _session_files(directory: Path) -> list[Path]:
    """The ``*.jsonl`` files in ``directory``, sorted by name."""
    if not directory.is_dir():
        raise SessionError(f"no such directory: {directory}")
    return sorted(directory.glob("*.jsonl"))


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (only its owner may read it) holding ``data``."""
    try:
        with open(path, "xb", opener=lambda p, flags: os.open(p, flags, _PRIVATE_FILE)) as f:
            f.write(data)
    except OSError as e:
        raise SessionError(f"cannot write {path}: {e}") from e


async def transfer(action: str, dsn: str, directory: Path) -> TransferReport:
    """``export`` the database at ``dsn`` to ``directory``, or ``import`` it from there."""
    store = await PostgresSessionStore.connect(dsn)
    try:
        if action == "export":
            return await export_sessions(store, directory)
        return await import_sessions(store, directory)
    finally:
        await store.close()
