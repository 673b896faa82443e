"""Handoffs in the SQLite user store (the table is made on first use)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botkit.stores.handoffs import Handoff

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["HANDOFF_SCHEMA", "SqliteHandoffs"]

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

HANDOFF_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS botkit_handoffs (
        user_id        INTEGER PRIMARY KEY,
        chat_id        INTEGER NOT NULL,
        topic_id       INTEGER NOT NULL,
        name           TEXT    NOT NULL,
        opened_at      TEXT    NOT NULL,
        is_open        INTEGER NOT NULL DEFAULT 1,
        first_reply_at TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS botkit_handoffs_topic_idx ON botkit_handoffs (topic_id)",
)

_COLUMNS = "user_id, chat_id, topic_id, name, opened_at, is_open, first_reply_at"
_OPEN = f"""
    INSERT INTO botkit_handoffs (user_id, chat_id, topic_id, name, opened_at, is_open)
    VALUES (?, ?, ?, ?, ?, 1)
    ON CONFLICT (user_id) DO UPDATE SET chat_id = excluded.chat_id,
        topic_id = excluded.topic_id, name = excluded.name, opened_at = excluded.opened_at,
        is_open = 1, first_reply_at = NULL
    RETURNING {_COLUMNS}"""
_CLOSE = f"""
    UPDATE botkit_handoffs SET is_open = 0 WHERE user_id = ? AND is_open = 1
    RETURNING {_COLUMNS}"""
_FIRST_REPLY = f"""
    UPDATE botkit_handoffs SET first_reply_at = ?
    WHERE user_id = ? AND is_open = 1 AND first_reply_at IS NULL
    RETURNING {_COLUMNS}"""


def _to_db(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_TIME_FORMAT)


def _from_db(text: str | None) -> datetime | None:
    return None if text is None else datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)


def _handoff(row: Sequence[Any]) -> Handoff:
    user_id, chat_id, topic_id, name, opened, is_open, replied = row
    opened_at = _from_db(opened)
    assert opened_at is not None
    return Handoff(user_id, chat_id, topic_id, name, opened_at, bool(is_open), _from_db(replied))


def _first(rows: Iterable[Sequence[Any]]) -> Handoff | None:
    return next((_handoff(row) for row in rows), None)


class SqliteHandoffs:
    """The :class:`~botkit.stores.handoffs.HandoffStore` part of ``SqliteUserStore``."""

    if TYPE_CHECKING:

        def _read(self, doing: str) -> AbstractAsyncContextManager[aiosqlite.Connection]: ...

        def _transaction(self, doing: str) -> AbstractAsyncContextManager[aiosqlite.Connection]: ...

        async def _point_read(
            self, sql: str, params: Sequence[object], doing: str
        ) -> Iterable[Sequence[Any]]: ...

    async def handoff_of(self, user_id: int) -> Handoff | None:
        """The user's handoff, open or closed (its topic is reused), or ``None``."""
        sql = f"SELECT {_COLUMNS} FROM botkit_handoffs WHERE user_id = ?"
        return _first(await self._point_read(sql, (user_id,), "reading a handoff"))

    async def handoff_in_topic(self, topic_id: int) -> Handoff | None:
        """The handoff whose topic is ``topic_id``, open or closed, or ``None``."""
        sql = f"SELECT {_COLUMNS} FROM botkit_handoffs WHERE topic_id = ? ORDER BY is_open DESC"
        return _first(await self._point_read(sql, (topic_id,), "reading a handoff"))

    async def open_handoff(self, user_id: int, chat_id: int, topic_id: int, name: str) -> Handoff:
        """Mark the user's conversation handed over (again) in topic ``topic_id`` from now."""
        values = (user_id, chat_id, topic_id, name, _to_db(datetime.now(UTC)))
        async with self._transaction("opening a handoff") as db:
            rows = await db.execute_fetchall(_OPEN, values)
        handoff = _first(rows)
        assert handoff is not None
        return handoff

    async def close_handoff(self, user_id: int) -> Handoff | None:
        """End the user's open handoff; ``None`` if none was open (so one caller ends it)."""
        async with self._transaction("closing a handoff") as db:
            return _first(await db.execute_fetchall(_CLOSE, (user_id,)))

    async def first_reply(self, user_id: int, at: datetime) -> Handoff | None:
        """Note the operators' first answer at ``at``; ``None`` if it was noted before."""
        async with self._transaction("noting an operator's reply") as db:
            return _first(await db.execute_fetchall(_FIRST_REPLY, (_to_db(at), user_id)))

    async def open_handoffs(self) -> list[Handoff]:
        """Every open handoff, oldest first."""
        sql = f"SELECT {_COLUMNS} FROM botkit_handoffs WHERE is_open = 1 ORDER BY opened_at"
        async with self._read("listing handoffs") as db:
            return [_handoff(row) for row in await db.execute_fetchall(sql)]
