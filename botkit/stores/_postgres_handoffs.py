"""Handoffs in the PostgreSQL user store (the table from migration 012)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botkit.stores.handoffs import Handoff

__all__ = ["PostgresHandoffs"]

_COLUMNS = "user_id, chat_id, topic_id, name, opened_at, is_open, first_reply_at"
_OPEN = f"""
    INSERT INTO botkit_handoffs (user_id, chat_id, topic_id, name, opened_at, is_open)
    VALUES ($1, $2, $3, $4, now(), true)
    ON CONFLICT (user_id) DO UPDATE SET chat_id = excluded.chat_id,
        topic_id = excluded.topic_id, name = excluded.name, opened_at = excluded.opened_at,
        is_open = true, first_reply_at = NULL
    RETURNING {_COLUMNS}"""
_CLOSE = f"""
    UPDATE botkit_handoffs SET is_open = false WHERE user_id = $1 AND is_open
    RETURNING {_COLUMNS}"""
_FIRST_REPLY = f"""
    UPDATE botkit_handoffs SET first_reply_at = $2
    WHERE user_id = $1 AND is_open AND first_reply_at IS NULL
    RETURNING {_COLUMNS}"""


def _handoff(row: Any) -> Handoff | None:
    return None if row is None else Handoff(**dict(row))


class PostgresHandoffs:
    """The :class:`~botkit.stores.handoffs.HandoffStore` part of ``PostgresUserStore``."""

    if TYPE_CHECKING:

        def _connection(self, doing: str) -> AbstractAsyncContextManager[Any]: ...

    async def handoff_of(self, user_id: int) -> Handoff | None:
        """The user's handoff, open or closed (its topic is reused), or ``None``."""
        sql = f"SELECT {_COLUMNS} FROM botkit_handoffs WHERE user_id = $1"
        async with self._connection("reading a handoff") as conn:
            return _handoff(await conn.fetchrow(sql, user_id))

    async def handoff_in_topic(self, topic_id: int) -> Handoff | None:
        """The handoff whose topic is ``topic_id``, open or closed, or ``None``."""
        sql = f"""SELECT {_COLUMNS} FROM botkit_handoffs WHERE topic_id = $1
            ORDER BY is_open DESC LIMIT 1"""
        async with self._connection("reading a handoff") as conn:
            return _handoff(await conn.fetchrow(sql, topic_id))

    async def open_handoff(self, user_id: int, chat_id: int, topic_id: int, name: str) -> Handoff:
        """Mark the user's conversation handed over (again) in topic ``topic_id`` from now."""
        async with self._connection("opening a handoff") as conn:
            handoff = _handoff(await conn.fetchrow(_OPEN, user_id, chat_id, topic_id, name))
        assert handoff is not None
        return handoff

    async def close_handoff(self, user_id: int) -> Handoff | None:
        """End the user's open handoff; ``None`` if none was open (so one caller ends it)."""
        async with self._connection("closing a handoff") as conn:
            return _handoff(await conn.fetchrow(_CLOSE, user_id))

    async def first_reply(self, user_id: int, at: datetime) -> Handoff | None:
        """Note the operators' first answer at ``at``; ``None`` if it was noted before."""
        async with self._connection("noting an operator's reply") as conn:
            return _handoff(await conn.fetchrow(_FIRST_REPLY, user_id, at))

    async def open_handoffs(self) -> list[Handoff]:
        """Every open handoff, oldest first."""
        sql = f"SELECT {_COLUMNS} FROM botkit_handoffs WHERE is_open ORDER BY opened_at"
        async with self._connection("listing handoffs") as conn:
            return [Handoff(**dict(row)) for row in await conn.fetch(sql)]
