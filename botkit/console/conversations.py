"""Pages of conversations for the console, from the session files or from PostgreSQL.

A page is bounded: PostgreSQL sorts its heads by the time of their last entry and returns one
page; in the files' folder a listing reads each file's size and time, never its contents,
except to search for a text, which reads at most ``SEARCHED_FILES`` files, the newest first.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from botkit.sessions import is_conversation_key
from botkit.sessions.base import SessionStore

__all__ = ["ConversationPage", "ConversationRow", "Conversations", "conversations_of"]

SEARCHED_FILES = 2000
"""The most session files a text search reads (the newest ones)."""


@dataclass(frozen=True, slots=True)
class ConversationRow:
    """One conversation in a listing."""

    key: str
    """A user id, or a group's ``chat_…`` key."""
    last_at: datetime | None
    """When its last entry was written."""
    size: str
    """How much it holds: entries (PostgreSQL) or bytes (a file)."""


@dataclass(frozen=True, slots=True)
class ConversationPage:
    """A page of conversations, and whether there are more after it."""

    rows: list[ConversationRow]
    more: bool
    note: str = ""
    """Said under the listing (e.g. how far a search looked)."""


class Conversations(Protocol):
    """Where the console lists conversations from."""

    async def page(
        self,
        *,
        offset: int,
        limit: int,
        user: str | None = None,
        text: str | None = None,
        since: datetime | None = None,
    ) -> ConversationPage:
        """The conversations from ``offset``, the latest written to first; only those whose
        key holds ``user``, that hold ``text``, written to ``since``, when given."""
        ...


def conversations_of(sessions: SessionStore, directory: Path) -> Conversations:
    """The listing of ``sessions``: its PostgreSQL tables, else the files in ``directory``."""
    from botkit.sessions.postgres import PostgresSessionStore

    if isinstance(sessions, PostgresSessionStore):
        return _DatabaseConversations(sessions)
    return _FileConversations(directory)


class _DatabaseConversations:
    def __init__(self, store: object) -> None:
        from botkit.sessions.postgres import PostgresSessionStore

        assert isinstance(store, PostgresSessionStore)
        self.store = store

    async def page(
        self,
        *,
        offset: int,
        limit: int,
        user: str | None = None,
        text: str | None = None,
        since: datetime | None = None,
    ) -> ConversationPage:
        rows = await self.store.conversation_page(
            offset=offset, limit=limit + 1, key_part=user, text=text, since=since
        )
        found = [ConversationRow(key, when, f"{last:,} entries") for key, last, when in rows]
        return ConversationPage(found[:limit], more=len(found) > limit)


class _FileConversations:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def page(
        self,
        *,
        offset: int,
        limit: int,
        user: str | None = None,
        text: str | None = None,
        since: datetime | None = None,
    ) -> ConversationPage:
        return await asyncio.to_thread(self._page, offset, limit, user, text, since)

    def _page(
        self,
        offset: int,
        limit: int,
        user: str | None,
        text: str | None,
        since: datetime | None,
    ) -> ConversationPage:
        files = self._files(user)
        if since is not None:
            latest = -since.timestamp()  # the list holds minus the time: the newest first
            files = [f for f in files if f[0] <= latest]
        note = ""
        if text:
            if len(files) > SEARCHED_FILES:
                note = f"The search read the newest {SEARCHED_FILES:,} conversations."
            needle = text.casefold()
            files = [f for f in files[:SEARCHED_FILES] if _holds(self.directory / f[1], needle)]
        chosen = files[offset : offset + limit]
        rows = [
            ConversationRow(
                name.removesuffix(".jsonl"), datetime.fromtimestamp(-when, UTC), _size(size)
            )
            for when, name, size in chosen
        ]
        return ConversationPage(rows, more=len(files) > offset + limit, note=note)

    def _files(self, user: str | None) -> list[tuple[float, str, int]]:
        """(minus the time, name, size) of each session file, the latest written first."""
        found: list[tuple[float, str, int]] = []
        try:
            entries = os.scandir(self.directory)
        except FileNotFoundError:
            return []
        with entries:
            for entry in entries:
                name = entry.name
                if not name.endswith(".jsonl") or (user and user not in name):
                    continue
                if not is_conversation_key(name[: -len(".jsonl")]):
                    continue
                try:
                    status = entry.stat()
                except FileNotFoundError:
                    continue
                found.append((-status.st_mtime, name, status.st_size))
        found.sort()
        return found


def _holds(path: Path, needle: str) -> bool:
    try:
        return needle in path.read_text("utf-8", errors="replace").casefold()
    except OSError:
        return False


def _size(n: int) -> str:
    return f"{n:,} B" if n < 1024 else f"{n / 1024:,.0f} KB"
