"""Conversations' memories in PostgreSQL (``botkit_memory``, migration 013): shared by every
worker, so the next turn sees what the last one wrote, on whichever process it runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from botkit.errors import ConfigError, SessionError
from botkit.stores.migrate import without_password

__all__ = ["PostgresMemoryStore"]

_UPSERT = """
    INSERT INTO botkit_memory (conversation, path, content) VALUES ($1, $2, $3)
    ON CONFLICT (conversation, path) DO UPDATE SET content = excluded.content, updated_at = now()
"""


async def _kept(conn: Any) -> None:
    """A released connection's reset: none (asyncpg's default costs a query per release; this
    store leaves no session state behind, and asyncpg still rolls back an open transaction)."""


class PostgresMemoryStore:
    """A :class:`~botkit.memory.MemoryStore` on its own small pool, made on first use."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._pool: Any = None
        self._connecting = asyncio.Lock()

    async def load(self, key: str) -> dict[str, str]:
        """Every file of the conversation's memory."""
        async with self._connection() as conn:
            rows = await conn.fetch(
                "SELECT path, content FROM botkit_memory WHERE conversation = $1", key
            )
        return {row["path"]: row["content"] for row in rows}

    async def save(self, key: str, changes: Mapping[str, str | None]) -> None:
        """Apply ``changes`` in one transaction."""
        async with self._connection() as conn, conn.transaction():
            for path, text in changes.items():
                if text is None:
                    await conn.execute(
                        "DELETE FROM botkit_memory WHERE conversation = $1 AND path = $2", key, path
                    )
                else:
                    await conn.execute(_UPSERT, key, path, text)

    async def clear(self, key: str) -> None:
        """Delete the conversation's rows."""
        async with self._connection() as conn:
            await conn.execute("DELETE FROM botkit_memory WHERE conversation = $1", key)

    async def keys(self) -> list[str]:
        """The conversations with at least one memory file."""
        async with self._connection() as conn:
            rows = await conn.fetch("SELECT DISTINCT conversation FROM botkit_memory ORDER BY 1")
        return [row["conversation"] for row in rows]

    async def close(self) -> None:
        """Close the pool, if it was made."""
        async with self._connecting:
            if self._pool is not None:
                pool, self._pool = self._pool, None
                await pool.close()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        async with self._connecting:
            if self._pool is None:
                self._pool = await self._errors_converted(
                    asyncpg.create_pool(self._dsn, min_size=0, max_size=4, reset=_kept)
                )
        try:
            async with self._pool.acquire() as conn:
                yield conn
        except asyncpg.UndefinedTableError as e:
            raise ConfigError(f"{e}: run `python -m botkit migrate`") from e
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            raise SessionError(f"memory database: {without_password(str(e), self._dsn)}") from e

    async def _errors_converted(self, opening: Any) -> Any:
        try:
            return await opening
        except (OSError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            message = without_password(str(e), self._dsn)
            raise SessionError(f"cannot connect to the memory database: {message}") from e
