"""The inbox journal: updates are written down before Telegram is told they were received.

Telegram forgets an update once ``getUpdates`` is called with a higher offset, and one call
returns at most 100 updates, so holding the offset back until turns finish would cap a bot
at 100 turns in flight. Instead every accepted update is appended here first; the offset is
confirmed after that; a finished turn appends ``done``. After a crash the updates accepted
but not done are read back and handled again. An update that could not be read at all is
journaled as ``unparseable`` (raw, with the reason) so an operator can see what was dropped.

Each start of a turn appends ``started`` before the turn runs, and a turn cut short by a
shutdown appends ``interrupted``: what is left counts the starts whose process died during
them, so an update that kills the process at every start is given up (``given_up``, written
before its sender is told, so a restart never tells them twice; see ``runtime.poison``).
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog

from botkit.errors import SessionError
from botkit.sessions.media import write_all

__all__ = ["Inbox", "InboxItem"]

log = structlog.get_logger(__name__)

COMPACT_AFTER = 10_000
"""Lines written since the last compaction before the journal is rewritten."""
REMEMBERED = 1_000
"""Accepted ids kept across compactions: Telegram re-delivers at most one batch of 100."""
UNPARSEABLE_KEPT = 100
"""Unparseable updates kept across compactions, the newest, for an operator to look at."""


@dataclass(frozen=True, slots=True)
class InboxItem:
    """An accepted update: its id and its raw payload as the messenger received it."""

    update_id: int
    payload: dict[str, Any]
    error: str | None = None
    """Why it could not be read, for an unparseable update."""


class Inbox:
    """An append-only journal of accepted and finished updates in one JSONL file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._open: dict[int, InboxItem] = {}
        self._starts: dict[int, int] = {}
        """Starts of open updates not seen to end: those whose process died, after a restart."""
        self._unparseable: deque[InboxItem] = deque(maxlen=UNPARSEABLE_KEPT)
        self._recent: deque[int] = deque(maxlen=REMEMBERED)
        self._seen: set[int] = set()
        self._lines = 0
        self._fd: int | None = None
        self._torn = False
        self._load()

    def pending(self) -> list[InboxItem]:
        """Accepted updates whose turn has not finished, oldest first."""
        return sorted(self._open.values(), key=lambda item: item.update_id)

    def seen(self, update_id: int) -> bool:
        """Whether ``update_id`` was accepted before (finished or not)."""
        return update_id in self._seen

    def accept(self, update_id: int, payload: dict[str, Any]) -> bool:
        """Journal an update; ``False`` if it was accepted before (a re-delivery)."""
        if update_id in self._seen:
            return False
        self._write({"accepted": update_id, "update": payload})
        self._open[update_id] = InboxItem(update_id, payload)
        self._remember(update_id)
        return True

    def starts(self, update_id: int) -> int:
        """How often the turn of open ``update_id`` started and was not seen to end."""
        return self._starts.get(update_id, 0)

    def started(self, update_ids: Iterable[int]) -> None:
        """Journal that a turn of these open updates starts now (before it runs)."""
        for update_id in update_ids:
            if update_id in self._open:
                self._write({"started": update_id})
                self._starts[update_id] = self._starts.get(update_id, 0) + 1

    def interrupted(self, update_ids: Iterable[int]) -> None:
        """Take back the start of a turn cut short by a shutdown: its process did not die."""
        for update_id in update_ids:
            if self._starts.get(update_id, 0) > 0:
                self._write({"interrupted": update_id})
                self._starts[update_id] -= 1

    def give_up(self, update_ids: Iterable[int]) -> bool:
        """Close these updates unanswered; ``False`` if none was open (given up before)."""
        closed = False
        for update_id in update_ids:
            if self._open.pop(update_id, None) is not None:
                self._starts.pop(update_id, None)
                self._write({"given_up": update_id})
                closed = True
        return closed

    def reject(self, update_id: int, payload: dict[str, Any], error: str) -> None:
        """Journal an update that could not be read: kept for an operator, never handled."""
        if update_id in self._seen:
            return
        self._write({"unparseable": update_id, "update": payload, "error": error})
        self._unparseable.append(InboxItem(update_id, payload, error))
        self._remember(update_id)

    def unparseable(self) -> list[InboxItem]:
        """The most recent updates that could not be read, oldest first."""
        return list(self._unparseable)

    def _remember(self, update_id: int) -> None:
        if len(self._recent) == self._recent.maxlen:
            self._seen.discard(self._recent[0])
        self._recent.append(update_id)
        self._seen.add(update_id)

    def done(self, update_id: int) -> None:
        """Mark the turn of ``update_id`` finished: its reply was sent."""
        if self._open.pop(update_id, None) is None:
            return
        self._starts.pop(update_id, None)
        self._write({"done": update_id})
        if self._lines >= COMPACT_AFTER:
            self.compact()

    def compact(self) -> None:
        """Rewrite the journal with only the unfinished updates."""
        temporary = self.path.with_suffix(".tmp")
        lines = [_line({"recent": list(self._recent)})]
        lines += [_unparseable_line(item) for item in self._unparseable]
        lines += [self._accepted_line(item) for item in self.pending()]
        _write_private(temporary, b"".join(lines))
        self.close()
        os.replace(temporary, self.path)
        self._lines = len(lines)

    def _accepted_line(self, item: InboxItem) -> bytes:
        record: dict[str, Any] = {"accepted": item.update_id, "update": item.payload}
        if starts := self.starts(item.update_id):
            record["starts"] = starts
        return _line(record)

    def close(self) -> None:
        """Close the journal file (it is reopened by the next write)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, record: dict[str, Any]) -> None:
        # After a write cut short (a full disk), the next line starts on its own: the torn one
        # is then one unreadable line, not glued to a record that must be kept.
        line = b"\n" + _line(record) if self._torn else _line(record)
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            write_all(self._fd, line)
        except OSError as e:
            self._torn = True
            raise SessionError(f"cannot write the inbox journal {self.path}: {e}") from e
        self._torn = False
        self._lines += 1

    def _load(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        for number, line in enumerate(raw.splitlines(), start=1):
            self._apply(number, line)
        self.compact()  # also ends a torn last line

    def _apply(self, number: int, line: bytes) -> None:
        try:
            record = orjson.loads(line)
            if "accepted" in record:
                item = InboxItem(int(record["accepted"]), dict(record["update"]))
                self._open[item.update_id] = item
                self._starts[item.update_id] = int(record.get("starts", 0))
                self._remember(item.update_id)
            elif "started" in record:
                update_id = int(record["started"])
                self._starts[update_id] = self._starts.get(update_id, 0) + 1
            elif "interrupted" in record:
                update_id = int(record["interrupted"])
                self._starts[update_id] = max(self._starts.get(update_id, 0) - 1, 0)
            elif "unparseable" in record:
                item = InboxItem(int(record["unparseable"]), record["update"], record["error"])
                self._unparseable.append(item)
                self._remember(item.update_id)
            elif "recent" in record:
                for update_id in record["recent"]:
                    self._remember(int(update_id))
            else:  # done, or given up
                update_id = int(record["done"] if "done" in record else record["given_up"])
                self._open.pop(update_id, None)
                self._starts.pop(update_id, None)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("inbox.line_skipped", path=str(self.path), line=number)


def _line(record: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(record) + b"\n"
    except TypeError:  # an integer past 64 bits in a raw update: orjson refuses, json does not
        return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def _unparseable_line(item: InboxItem) -> bytes:
    return _line({"unparseable": item.update_id, "update": item.payload, "error": item.error})


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, readable by this user only (the journal holds messages)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file was left behind with wider permissions
    with os.fdopen(fd, "wb") as file:
        file.write(data)
