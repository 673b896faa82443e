"""Session files: one JSON line per append, ``<sessions_dir>/<user_id>.jsonl``.

A group's conversation has a file of its own, ``chat_<chat id>[_<topic>].jsonl``, with the
same entries, each carrying its ``conversation`` key and, on user messages, the speaker.

Conversations are private: the folder is made ``0700`` and each file ``0600``, and the store
takes group and other permissions away from a folder or file an older botkit left open.
Pictures and documents are kept once each in ``media/`` beside the files (``0700``/``0600``
too) and referenced from the lines (``botkit.sessions.media``).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import stat
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import orjson
import structlog
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from botkit.errors import SessionError
from botkit.sessions.locks import KeyedLocks, SharedFlock, flock_async
from botkit.sessions.media import (
    MEDIA_DIR,
    Blobs,
    MediaFiles,
    externalize,
    references,
    resolve,
    write_all,
)
from botkit.sessions.usage import stored_media
from botkit.types import ContentBlock, Message, Role, Usage

__all__ = [
    "SCHEMA_VERSION",
    "AnyEntry",
    "CompactionEntry",
    "FeedbackEntry",
    "JsonlSessionStore",
    "ResetEntry",
    "SessionEntry",
    "SessionFile",
    "parse_entry",
    "read_session_file",
]

SCHEMA_VERSION = 1

_PRIVATE_DIR = 0o700
_PRIVATE_FILE = 0o600

log = structlog.get_logger(__name__)


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    version: int = SCHEMA_VERSION
    timestamp: datetime = Field(default_factory=lambda: datetime.now(UTC))
    user_id: int
    """Whose private conversation this is; in a group conversation, who spoke (or the chat)."""
    conversation: str | None = None
    """A group conversation's key (``chat_<chat id>[_<topic>]``); absent in private chats."""

    @property
    def key(self) -> str:
        """The conversation the entry belongs to: its session file's name without ``.jsonl``."""
        return self.conversation or str(self.user_id)

    def to_line(self) -> bytes:
        """The entry as one JSON line, newline included."""
        data = self.model_dump(mode="json", exclude_none=True)
        return orjson.dumps(data) + b"\n"


class SessionEntry(_Entry):
    """A message appended to a user's context."""

    type: Literal["message"] = "message"
    role: Role
    content: list[ContentBlock]
    update_id: int | None = None
    """The Telegram update that carried a user message."""
    message_id: int | None = None
    """The Telegram message id of a user message: a reaction to a reply finds its turn by it
    (absent on lines written before botkit recorded it)."""
    usage: Usage | None = None
    """What the LLM call cost, on assistant messages."""
    model: str | None = None
    stop_reason: str | None = None
    speaker: str | None = None
    """Who wrote a user message in a group conversation (their display name)."""
    sent_at: datetime | None = None
    """When the user sent a user message (the messenger's date; ``timestamp`` is when it was
    recorded): the conversation's pace, by which its prompt cache lifetime is chosen."""
    deferred: bool | None = None
    """Injected from outside the conversation (a relayed note): recorded at once, it joins the
    context at the start of the conversation's next turn, never inside a running one."""
    tools: list[str] | None = None
    """On an assistant message: the names of the tools the call offered, in order (absent on
    lines written before botkit recorded them)."""
    system_sha256: str | None = None
    """On an assistant message: the SHA-256 of the call's system prompt (hex), so a re-run can
    tell whether the prompt changed without keeping it."""
    approval: str | None = None
    """``waiting`` on an answer whose calls wait for a person's Allow; ``allowed``, ``denied``
    or ``expired`` on the results given once it was decided."""

    @classmethod
    def of(cls, user_id: int, message: Message, **meta: object) -> SessionEntry:
        """The entry recording ``message`` for ``user_id``."""
        return cls.model_validate(
            {
                "user_id": user_id,
                "role": message.role,
                "content": message.content,
                "usage": message.usage,
                "model": message.model,
                **meta,
            }
        )

    def to_message(self) -> Message:
        """The conversation message this entry recorded."""
        model = self.model if self.role == "assistant" else None
        return Message(role=self.role, content=self.content, usage=self.usage, model=model)


class ResetEntry(_Entry):
    """The context was cleared (``/clear``): what came before no longer counts."""

    type: Literal["reset"] = "reset"
    reason: str | None = None


class CompactionEntry(_Entry):
    """Older messages were replaced by a summary; the last ``kept`` messages stayed."""

    type: Literal["compaction"] = "compaction"
    summary: str
    kept: int
    """How many of the messages before this line stay in the context after the summary."""
    usage: Usage | None = None
    """What the summarising call cost (absent when it fell back to plain truncation)."""
    model: str | None = None


class FeedbackEntry(_Entry):
    """A user's reaction to one of the bot's replies: feedback on the turn that reply answers.

    A later entry for the same turn and person replaces it (a changed reaction); no emoji
    means the reaction was taken back."""

    type: Literal["feedback"] = "feedback"
    update_id: int
    """The turn: the update of the user message the reply answers."""
    message_id: int
    """The bot's message that was reacted to."""
    emoji: list[str]
    """The reactions now set on it by that person (custom emoji as ``custom:<id>``)."""
    kind: Literal["positive", "negative", "other", "removed"]
    """👍 is positive, 👎 negative, any other reaction other; none left: removed."""
    by: int
    """Who reacted."""


AnyEntry = Annotated[
    SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry, Field(discriminator="type")
]
_ENTRY: TypeAdapter[SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry] = TypeAdapter(
    AnyEntry
)


def parse_entry(line: bytes | str) -> SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry:
    """One session-file line as an entry (raises on a torn or invalid line)."""
    return _ENTRY.validate_python(orjson.loads(line))


@dataclass(frozen=True, slots=True)
class SessionFile:
    """What a session file held: its readable entries and the lines that were not."""

    entries: list[SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry]
    problems: list[tuple[int, str]] = field(default_factory=list)
    """(line number, what was wrong) for each line that was skipped."""

    @property
    def messages(self) -> list[Message]:
        """Every recorded message, in order (resets and compactions not applied)."""
        return [e.to_message() for e in self.entries if isinstance(e, SessionEntry)]


def read_session_file(path: Path, *, media: bool = True) -> SessionFile:
    """Read a session file, skipping (and reporting) torn or corrupt lines.

    ``media=False`` leaves pictures and documents as references (``{"type": "stored"}``).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return SessionFile(entries=[])
    except OSError as e:
        raise SessionError(f"cannot read session file {path}: {e}") from e
    entries: list[SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry] = []
    problems: list[tuple[int, str]] = []
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        torn = number == len(lines)  # the last line has no newline: a write was cut off
        try:
            entries.append(parse_entry(line))
        except (orjson.JSONDecodeError, ValidationError) as e:
            reason = "torn last line (no newline)" if torn else _short(e)
            problems.append((number, reason))
            log.warning("session.line_skipped", path=str(path), line=number, reason=reason)
    if not media:
        return SessionFile(entries=entries, problems=problems)
    files = MediaFiles(path.parent / MEDIA_DIR)
    return SessionFile(entries=[with_media(e, files.get) for e in entries], problems=problems)


def with_media(entry: AnyEntry, fetch: Callable[[str], bytes | None]) -> AnyEntry:
    """The entry with the media it refers to put back (a note where they are gone)."""
    if not isinstance(entry, SessionEntry) or not references(entry.content):
        return entry
    return entry.model_copy(update={"content": resolve(entry.content, fetch)})


def _short(e: Exception) -> str:
    text = str(e).splitlines()
    return text[0] if text else type(e).__name__


class JsonlSessionStore:
    """Appends entries to ``<directory>/<user_id>.jsonl`` and reads them back.

    An append writes its line whole or not at all, under the file's ``flock``, which
    ``python -m botkit prune`` also takes while it rewrites the file; a file prune replaced is
    opened again before the next append. An entry with media holds the media folder's shared
    lock from storing them to writing its line, so prune never deletes media just referred to.
    """

    def __init__(self, directory: Path | str, *, open_files: int = 128) -> None:
        self.directory = Path(directory)
        self._folder = str(self.directory)
        self._directory_ready = False
        self._checked: set[str] = set()
        self._open_files = open_files
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._written: dict[str, tuple[int, int]] = {}
        """Per open file, its version (device, inode) as the last append found it current."""
        self._media = MediaFiles(self.directory / MEDIA_DIR)
        self._media_lock = SharedFlock(self._open_media_dir)
        self._order = KeyedLocks()

    def path_for(self, key: int | str) -> Path:
        """The session file of a conversation: a user id, or a group's ``chat_…`` key."""
        return self.directory / f"{key}.jsonl"

    def generation(self, key: int | str) -> tuple[int, int] | None:
        """Which file a conversation has (``None``: none): another after a rewrite or erasure."""
        try:
            status = os.stat(self._file(key))
        except FileNotFoundError:
            return None
        return status.st_dev, status.st_ino

    def written_generation(self, key: int | str) -> tuple[int, int] | None:
        """The version of the file this process's last append to the conversation wrote to
        (read under the append's lock, so no ``stat`` of the path is needed)."""
        written = self._written.get(str(key))
        return written if written is not None else self.generation(key)

    def _file(self, key: int | str) -> str:
        """``path_for`` as a string (``pathlib`` costs more than the write it names)."""
        return os.path.join(self._folder, f"{key}.jsonl")

    async def append(
        self, entry: SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry
    ) -> None:
        """Write ``entry`` as one line at the end of its conversation's file (whole, or not)."""
        key = entry.key
        path = self._file(key)
        try:
            if not self._directory_ready:
                _make_private_dir(self.directory)
                self._directory_ready = True
            entry, blobs = _media_apart(entry)
            line = entry.to_line()
            if blobs or key in self._order or not self._append_now(key, path, line):
                await self._append_in_turn(key, path, line, blobs)
        except OSError as e:
            log.error("session.write_failed", path=str(path), error=str(e))
            raise SessionError(f"cannot write session file {path}: {e}") from e

    def _append_now(self, key: str, path: str, line: bytes) -> bool:
        """Append at once if the file's lock is free and prune did not replace it (the usual)."""
        fd = self._fd_for(key, path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        size = self._size_if_current(key, fd)
        if size is None:
            return False
        self._write_locked(key, fd, size, line)
        return True

    async def _append_in_turn(self, key: str, path: str, line: bytes, blobs: Blobs) -> None:
        """Append after this conversation's appends that wait before it, awaiting the locks."""
        async with self._order.holding(key):
            if not blobs:
                await self._write_line(key, path, line)
                return
            self._media.directory.mkdir(mode=_PRIVATE_DIR, exist_ok=True)
            async with self._media_lock.held():
                self._media.put(blobs)
                await self._write_line(key, path, line)

    async def _write_line(self, key: str, path: str, line: bytes) -> None:
        """Append ``line`` once the file's lock is ours (the file reopened if prune replaced it)."""
        while True:
            fd = self._fd_for(key, path)
            await flock_async(fd, fcntl.LOCK_EX)
            size = self._size_if_current(key, fd)
            if size is not None:
                self._write_locked(key, fd, size, line)
                return

    def _size_if_current(self, key: str, fd: int) -> int | None:
        """The locked file's size; ``None`` (unlocked, closed) when prune replaced it."""
        status = os.fstat(fd)
        if status.st_nlink > 0:
            self._written[key] = (status.st_dev, status.st_ino)
            return status.st_size
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(self._fds.pop(key))
        self._written.pop(key, None)
        self._checked.discard(key)
        return None

    def _write_locked(self, key: str, fd: int, size: int, line: bytes) -> None:
        """Write ``line`` at the end and unlock; on failure the file is cut back to ``size``."""
        try:
            if key not in self._checked:
                line = _torn_tail_end(fd, size) + line
            try:
                write_all(fd, line)
            except OSError:
                self._checked.discard(key)
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # a line whole or not at all
                raise
            self._checked.add(key)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _fd_for(self, key: str, path: str) -> int:
        """An open descriptor for the conversation's file; the least recently used are closed."""
        fd = self._fds.get(key)
        if fd is not None:
            self._fds.move_to_end(key)
            return fd
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, _PRIVATE_FILE)
        _restrict(fd, _PRIVATE_FILE, path)
        self._fds[key] = fd
        self._close_unused()
        return fd

    def _close_unused(self) -> None:
        """Close the least recently used descriptors beyond ``open_files`` (none in use)."""
        excess = len(self._fds) - self._open_files
        if excess <= 0:
            return
        for old in list(itertools.islice(self._fds, excess)):
            if old not in self._order:
                os.close(self._fds.pop(old))
                self._written.pop(old, None)

    def _open_media_dir(self) -> int:
        return os.open(self._media.directory, os.O_RDONLY | os.O_DIRECTORY)

    async def close(self) -> None:
        """Close the files kept open for appending."""
        while self._fds:
            os.close(self._fds.popitem()[1])
        self._written.clear()
        self._media_lock.close()

    async def load(self, key: int | str) -> SessionFile:
        """Everything recorded for a conversation (a user id, or a group's key)."""
        return read_session_file(self.path_for(key))

    async def load_stored(self, key: int | str) -> SessionFile:
        """Everything recorded for a conversation, its media left as references."""
        return read_session_file(self.path_for(key), media=False)

    async def media(self, names: Iterable[str]) -> dict[str, bytes]:
        """The stored media of these names (those that are gone are left out, and logged)."""
        found = {name: self._media.get(name) for name in set(names)}
        return {name: data for name, data in found.items() if data is not None}

    async def user_media_bytes(self, user_id: int) -> int:
        """The bytes of the media ``user_id`` has stored in every conversation they write in
        (their private one and the groups'), each file once: the quota is per user."""
        paths = [self.path_for(user_id), *sorted(self.directory.glob("chat_*.jsonl"))]
        names: set[str] = set()
        for path in paths:
            try:
                lines = path.read_bytes().splitlines()
            except FileNotFoundError:
                continue
            except OSError as e:
                raise SessionError(f"cannot read session file {path}: {e}") from e
            names |= stored_media((line for line in lines if b'"stored"' in line), user_id)
        return sum(self._media.size(name) for name in names)

    async def media_bytes(self, key: int | str, user_id: int) -> int:
        """The bytes of the media ``user_id`` has stored in a conversation (for the quota)."""
        try:
            lines = self.path_for(key).read_bytes().splitlines()
        except FileNotFoundError:
            return 0
        except OSError as e:
            raise SessionError(f"cannot read session file {self.path_for(key)}: {e}") from e
        return sum(self._media.size(name) for name in stored_media(lines, user_id))


def _media_apart(entry: AnyEntry) -> tuple[AnyEntry, Blobs]:
    """The entry with references for its media, and the media's bytes to store."""
    if not isinstance(entry, SessionEntry):
        return entry, {}
    content, blobs = externalize(entry.content)
    return (entry.model_copy(update={"content": content}) if blobs else entry), blobs


def _torn_tail_end(fd: int, size: int) -> bytes:
    """A newline to end a torn last line, so the next entry starts on its own line."""
    if size == 0:
        return b""
    return b"" if os.pread(fd, 1, size - 1) == b"\n" else b"\n"


def _make_private_dir(directory: Path) -> None:
    """Make ``directory`` (and its parents) if need be; only its owner may enter it."""
    directory.mkdir(mode=_PRIVATE_DIR, parents=True, exist_ok=True)
    _restrict(directory, _PRIVATE_DIR, directory)


def _restrict(target: Path | int, mode: int, path: Path | str) -> None:
    """Set ``mode`` on ``target`` (a path or an open descriptor) if others may use it."""
    if not stat.S_IMODE(os.stat(target).st_mode) & 0o077:
        return
    try:
        os.chmod(target, mode)
    except PermissionError as e:  # not ours to change: say so, and keep the bot running
        log.warning("session.permissions_not_restricted", path=str(path), error=str(e))
