"""Where each conversation's choices are kept: its model, persona and standing instructions.

One row per conversation (a private chat's user id, or a group's key), beside the users: in
the SQLite file of the user store (made on first use), or in PostgreSQL (migration
``023_choices.sql``). ``user_id`` is whoever chose last: the user of a private chat, a group's
admin; so ``users export`` includes the row and ``users forget`` erases it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, cast

from botkit.errors import StoreError
from botkit.stores.base import UserStore
from botkit.stores.changes import ChangeFeed, KeptRows
from botkit.stores.pooled import pooled_connection, store_beside

__all__ = [
    "Choice",
    "ChoiceField",
    "ChoiceStore",
    "PostgresChoices",
    "SqliteChoices",
    "choice_store_for",
]

ChoiceField = Literal["model", "persona", "instructions"]
_FIELDS: tuple[ChoiceField, ...] = ("model", "persona", "instructions")
_COLUMNS = "conversation, user_id, model, persona, instructions, updated_at"


@dataclass(frozen=True, slots=True)
class Choice:
    """What one conversation chose (``None``: the bot's default)."""

    conversation: str
    """A private conversation's user id, or a group's key (``chat_<id>...``)."""
    user_id: int
    """Who chose last: their plan unlocks what a plan unlocks."""
    model: str | None = None
    persona: str | None = None
    instructions: str | None = None
    """The user's standing instructions, in their words."""
    updated_at: datetime | None = None


class ChoiceStore(Protocol):
    """Each conversation's choices."""

    async def get(self, conversation: str) -> Choice | None:
        """The conversation's choices, if it made any."""
        ...

    async def set(
        self, conversation: str, user_id: int, changes: dict[ChoiceField, str | None]
    ) -> Choice:
        """Set these fields (``None``: back to the default), made by ``user_id``."""
        ...

    async def of_user(self, user_id: int) -> list[Choice]:
        """The choices ``user_id`` made last, in every conversation, by conversation."""
        ...

    async def close(self) -> None:
        """Release what the store opened."""
        ...


def choice_store_for(users: UserStore) -> ChoiceStore:
    """The choice store beside ``users``: in its SQLite file, or its PostgreSQL pool."""
    pool, path = store_beside(users, "choices")
    if path is None:
        return PostgresChoices(pool, getattr(users, "changes", None))
    return SqliteChoices(path)


def _checked(changes: dict[ChoiceField, str | None]) -> list[ChoiceField]:
    unknown = set(changes) - set(_FIELDS)
    if unknown or not changes:
        raise ValueError(f"a choice sets some of {', '.join(_FIELDS)}, not {sorted(unknown)}")
    return [name for name in _FIELDS if name in changes]  # a fixed order, names from the list


CACHED = 10_000
"""Conversations whose choices a SQLite store keeps in memory (the least recently read go)."""


class SqliteChoices:
    """Choices in the user store's SQLite file (a connection of its own).

    What it read or wrote is kept in memory, and stands while no other connection changed
    the file (``PRAGMA data_version``, read on the event loop: no thread, no disk): a turn
    reads its conversation's choice without a round trip, and one made elsewhere (``users
    choose``, ``users forget`` in another process) is seen at the next turn.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        self._busy_timeout = busy_timeout
        self._db: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()
        self._cache: OrderedDict[str, Choice | None] = OrderedDict()
        self._version: int | None = None
        """The file's ``data_version`` the cache is current at."""

    async def get(self, conversation: str) -> Choice | None:
        """The conversation's choices, if it made any."""
        async with self._lock:
            if conversation in self._cache and self._current():
                self._cache.move_to_end(conversation)
                return self._cache[conversation]
            sql = f"SELECT {_COLUMNS} FROM botkit_choices WHERE conversation = ?"
            version, rows = await self._call(
                "reading a choice", _fetch_versioned, sql, (conversation,)
            )
            if version != self._version:  # another connection wrote: what was kept may be old
                self._cache.clear()
                self._version = version
            choice = _row(rows[0]) if rows else None
            self._keep(conversation, choice)
            return choice

    def _current(self) -> bool:
        """Whether no other connection changed the file since the cache was filled."""
        if self._db is None:
            return False
        try:
            return bool(self._version == _data_version(self._db))
        except sqlite3.Error:
            return False

    def _keep(self, conversation: str, choice: Choice | None) -> None:
        self._cache[conversation] = choice
        self._cache.move_to_end(conversation)
        if len(self._cache) > CACHED:
            self._cache.popitem(last=False)

    async def set(
        self, conversation: str, user_id: int, changes: dict[ChoiceField, str | None]
    ) -> Choice:
        """Set these fields, made by ``user_id`` (one statement: an upsert)."""
        names = _checked(changes)
        columns = ", ".join(names)
        marks = ", ".join("?" for _ in names)
        updates = ", ".join(f"{name} = excluded.{name}" for name in names)
        sql = f"""INSERT INTO botkit_choices (conversation, user_id, {columns}, updated_at)
            VALUES (?, ?, {marks}, ?) ON CONFLICT (conversation) DO UPDATE SET
            user_id = excluded.user_id, {updates}, updated_at = excluded.updated_at
            RETURNING {_COLUMNS}"""
        values = (conversation, user_id, *(changes[n] for n in names), _now())
        async with self._lock:
            rows = await self._call("saving a choice", _write, sql, values)
            choice = _row(rows[0])
            self._keep(conversation, choice)  # its own writes leave data_version as it was
        return choice

    async def of_user(self, user_id: int) -> list[Choice]:
        """The choices ``user_id`` made last, by conversation."""
        sql = f"SELECT {_COLUMNS} FROM botkit_choices WHERE user_id = ? ORDER BY conversation"
        return [_row(r) for r in await self._run("listing choices", _fetch, sql, (user_id,))]

    async def close(self) -> None:
        """Close the connection."""
        async with self._lock:
            self._cache.clear()  # a new connection's data_version starts over
            self._version = None
            if self._db is not None:
                db, self._db = self._db, None
                await asyncio.to_thread(db.close)

    async def _run(self, doing: str, work: Any, *args: Any) -> Any:
        async with self._lock:
            return await self._call(doing, work, *args)

    async def _call(self, doing: str, work: Any, *args: Any) -> Any:
        """``work(connection, *args)`` on a thread (call with the lock held)."""
        try:
            if self._db is None:
                self._db = await asyncio.to_thread(_open, self.path, self._busy_timeout)
            return await asyncio.to_thread(work, self._db, *args)
        except sqlite3.Error as e:
            raise StoreError(
                f"the choices in {self.path} failed while {doing}: {type(e).__name__}: {e}"
            ) from e


_SQLITE_SCHEMA = """CREATE TABLE IF NOT EXISTS botkit_choices (
    conversation TEXT    PRIMARY KEY,
    user_id      INTEGER NOT NULL,
    model        TEXT,
    persona      TEXT,
    instructions TEXT,
    updated_at   TEXT    NOT NULL
)"""


def _open(path: str, busy_timeout: float) -> sqlite3.Connection:
    from botkit.payments.store import _use_wal

    db = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA secure_delete = ON")  # erased instructions are zeroed, not left
    _use_wal(db, time.monotonic() + busy_timeout)
    db.execute(_SQLITE_SCHEMA)
    db.execute("CREATE INDEX IF NOT EXISTS botkit_choices_user_idx ON botkit_choices (user_id)")
    return db


def _fetch(db: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[Any]:
    return db.execute(sql, params).fetchall()


def _data_version(db: sqlite3.Connection) -> int:
    """Changes when another connection commits to the file (not this one's own writes)."""
    version: int = db.execute("PRAGMA data_version").fetchone()[0]
    return version


def _fetch_versioned(
    db: sqlite3.Connection, sql: str, params: Sequence[object]
) -> tuple[int, list[Any]]:
    """The file's ``data_version``, then the rows: a change after the first is seen next."""
    return _data_version(db), db.execute(sql, params).fetchall()


def _write(db: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[Any]:
    db.execute("BEGIN IMMEDIATE")
    try:
        rows = db.execute(sql, params).fetchall()
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return rows


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _row(row: Sequence[Any]) -> Choice:
    conversation, user_id, model, persona, instructions, updated = row
    when = updated if isinstance(updated, datetime) else datetime.fromisoformat(updated)
    return Choice(conversation, user_id, model, persona, instructions, when)


class PostgresChoices:
    """Choices in PostgreSQL (``botkit_choices``, migration 023), on the user store's pool.

    With the user store's :class:`~botkit.stores.changes.ChangeFeed` live, what it read of a
    conversation is kept until anyone changes that conversation's row: a turn asks nothing.
    """

    def __init__(self, pool: Any, changes: ChangeFeed | None = None) -> None:
        self.pool = pool
        self._kept = KeptRows(changes, "botkit_choices")

    async def get(self, conversation: str) -> Choice | None:
        """The conversation's choices, if it made any."""
        if await self._kept.usable():
            known, kept = self._kept.get(conversation)
            if known:
                return cast(Choice | None, kept)
        read_at = self._kept.changes
        sql = f"SELECT {_COLUMNS} FROM botkit_choices WHERE conversation = $1"
        async with self._connection("reading a choice") as conn:
            row = await conn.fetchrow(sql, conversation)
        choice = None if row is None else _row(tuple(row))
        self._kept.keep(conversation, choice, read_at)
        return choice

    async def set(
        self, conversation: str, user_id: int, changes: dict[ChoiceField, str | None]
    ) -> Choice:
        """Set these fields, made by ``user_id`` (one statement: an upsert)."""
        names = _checked(changes)
        columns = ", ".join(names)
        marks = ", ".join(f"${i + 3}" for i in range(len(names)))
        updates = ", ".join(f"{name} = excluded.{name}" for name in names)
        sql = f"""INSERT INTO botkit_choices (conversation, user_id, {columns}, updated_at)
            VALUES ($1, $2, {marks}, now()) ON CONFLICT (conversation) DO UPDATE SET
            user_id = excluded.user_id, {updates}, updated_at = excluded.updated_at
            RETURNING {_COLUMNS}"""
        self._kept.forget(conversation)
        async with self._connection("saving a choice") as conn:
            row = await conn.fetchrow(sql, conversation, user_id, *(changes[n] for n in names))
        choice = _row(tuple(row))
        self._kept.keep(conversation, choice, self._kept.changes)  # its own write, seen at once
        return choice

    async def of_user(self, user_id: int) -> list[Choice]:
        """The choices ``user_id`` made last, by conversation."""
        sql = f"SELECT {_COLUMNS} FROM botkit_choices WHERE user_id = $1 ORDER BY conversation"
        async with self._connection("listing choices") as conn:
            rows = await conn.fetch(sql, user_id)
        return [_row(tuple(row)) for row in rows]

    async def close(self) -> None:
        """Nothing of its own: the pool is the user store's."""

    def _connection(self, doing: str) -> AbstractAsyncContextManager[Any]:
        return pooled_connection(self.pool, "choices database", doing)
