"""Console sign-in links in the SQLite user store (the table is made on first use)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from botkit.stores.console_links import ConsoleLink

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["CONSOLE_SCHEMA", "SqliteConsoleLinks"]

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

CONSOLE_SCHEMA: Sequence[str] = (
    """CREATE TABLE IF NOT EXISTS botkit_console_links (
        token_hash TEXT    PRIMARY KEY CHECK (length(token_hash) = 64),
        user_id    INTEGER NOT NULL,
        expires_at TEXT    NOT NULL
    )""",
)


def _to_db(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_TIME_FORMAT)


class SqliteConsoleLinks:
    """The :class:`~botkit.stores.console_links.ConsoleLinkStore` part of ``SqliteUserStore``."""

    if TYPE_CHECKING:

        def _transaction(self, doing: str) -> AbstractAsyncContextManager[aiosqlite.Connection]: ...

    async def add_console_link(self, token_hash: str, user_id: int, expires_at: datetime) -> None:
        """Keep a new link's hash (and drop links expired by now)."""
        now = _to_db(datetime.now(UTC))
        async with self._transaction("keeping a console link") as db:
            await db.execute("DELETE FROM botkit_console_links WHERE expires_at <= ?", (now,))
            await db.execute(
                "INSERT INTO botkit_console_links (token_hash, user_id, expires_at) "
                "VALUES (?, ?, ?)",
                (token_hash, user_id, _to_db(expires_at)),
            )

    async def take_console_link(self, token_hash: str) -> ConsoleLink | None:
        """Delete the link with this hash and return it; ``None`` if there is none."""
        sql = "DELETE FROM botkit_console_links WHERE token_hash = ? RETURNING user_id, expires_at"
        async with self._transaction("taking a console link") as db:
            rows = list(await db.execute_fetchall(sql, (token_hash,)))
        if not rows:
            return None
        user_id, expires = rows[0]
        return ConsoleLink(
            int(user_id), datetime.strptime(expires, _TIME_FORMAT).replace(tzinfo=UTC)
        )
