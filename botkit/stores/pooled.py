"""A feature's store beside the user store: in its SQLite file, or on its PostgreSQL pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from botkit.errors import StoreError

__all__ = ["pooled_connection", "store_beside"]


@asynccontextmanager
async def pooled_connection(pool: Any, database: str, doing: str) -> AsyncIterator[Any]:
    """A connection from ``pool``, asyncpg's errors as ``StoreError``: a missing table says to
    migrate, the rest name the ``database`` ("the payments database") and what it was ``doing``.
    Released without asyncpg's reset query (no session lock, cursor or setting is left)."""
    import asyncpg  # type: ignore[import-untyped]

    from botkit.stores.postgres import own_queries

    try:
        # botkit's single statements and transactions leave nothing for the pool's reset
        with own_queries():
            async with pool.acquire() as conn:
                yield conn
    except asyncpg.UndefinedTableError as e:
        raise StoreError(f"{e}: run `python -m botkit migrate`") from e
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
        raise StoreError(f"the {database} failed while {doing}: {type(e).__name__}") from e


def store_beside(users: object, what: str) -> tuple[Any, Path | None]:
    """Where ``what``'s store beside ``users`` lives: the user store's PostgreSQL pool (and no
    path), or no pool and its SQLite file (``StoreError`` for any other user store)."""
    pool = getattr(users, "pool", None)
    if pool is not None:
        return pool, None
    path = getattr(users, "path", None)
    if path is None:
        raise StoreError(f"{what} need a SQLite or PostgreSQL user store, not {type(users)}")
    return None, path
