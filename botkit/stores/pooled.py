"""A connection from the user store's PostgreSQL pool, for a feature's store that shares it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from botkit.errors import StoreError

__all__ = ["pooled_connection"]


@asynccontextmanager
async def pooled_connection(pool: Any, database: str, doing: str) -> AsyncIterator[Any]:
    """A connection from ``pool``, asyncpg's errors as ``StoreError``: a missing table says to
    migrate, the rest name the ``database`` ("the payments database") and what it was ``doing``."""
    import asyncpg  # type: ignore[import-untyped]

    try:
        async with pool.acquire() as conn:
            yield conn
    except asyncpg.UndefinedTableError as e:
        raise StoreError(f"{e}: run `python -m botkit migrate`") from e
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
        raise StoreError(f"the {database} failed while {doing}: {type(e).__name__}") from e
