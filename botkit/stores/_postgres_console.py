"""Console sign-in links in the PostgreSQL user store (the table from migration 027)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botkit.stores.console_links import ConsoleLink

__all__ = ["PostgresConsoleLinks"]


class PostgresConsoleLinks:
    """The :class:`~botkit.stores.console_links.ConsoleLinkStore` part of
    ``PostgresUserStore``."""

    if TYPE_CHECKING:

        def _connection(self, doing: str) -> AbstractAsyncContextManager[Any]: ...

    async def add_console_link(self, token_hash: str, user_id: int, expires_at: datetime) -> None:
        """Keep a new link's hash (and drop links expired by now)."""
        async with self._connection("keeping a console link") as conn, conn.transaction():
            await conn.execute("DELETE FROM botkit_console_links WHERE expires_at <= now()")
            await conn.execute(
                "INSERT INTO botkit_console_links (token_hash, user_id, expires_at) "
                "VALUES ($1, $2, $3)",
                token_hash,
                user_id,
                expires_at,
            )

    async def take_console_link(self, token_hash: str) -> ConsoleLink | None:
        """Delete the link with this hash and return it; ``None`` if there is none."""
        sql = """DELETE FROM botkit_console_links WHERE token_hash = $1
            RETURNING user_id, expires_at"""
        async with self._connection("taking a console link") as conn:
            row = await conn.fetchrow(sql, token_hash)
        return None if row is None else ConsoleLink(row["user_id"], row["expires_at"])
