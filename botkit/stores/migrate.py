"""Apply botkit's numbered SQL migrations to a PostgreSQL database, each exactly once."""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]
import structlog

from botkit.errors import ConfigError, StoreError

__all__ = [
    "LOCK_KEY",
    "MIGRATIONS",
    "Migration",
    "apply_migrations",
    "load_migrations",
    "migrate",
    "pending_migrations",
    "without_password",
]

MIGRATIONS: Traversable = files("botkit.stores") / "migrations"
"""botkit's own migrations, shipped inside the package."""

LOCK_KEY = 0x626F746B6974  # b"botkit": the advisory lock held while migrating
_FILE_NAME = re.compile(r"(\d+)_[A-Za-z0-9_]+\.sql")
PROCRASTINATE_SCHEMA = "-- botkit:procrastinate-schema"
"""A line in a migration that stands for the installed procrastinate's schema (the job queue)."""

_CREATE_LEDGER = """
    CREATE TABLE IF NOT EXISTS botkit_migrations (
        name       text        PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
    )"""

log = structlog.get_logger(__name__)

_DRIVER_ERRORS = (
    OSError,  # refused, reset, timed out
    ValueError,  # a DSN asyncpg cannot parse
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)

_Directory = Traversable | str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered SQL file."""

    number: int
    name: str
    """The file name without ``.sql``, e.g. ``"001_users_and_invites"``; recorded once applied."""
    sql: str


def load_migrations(directory: _Directory | None = None) -> list[Migration]:
    """The ``NNN_name.sql`` files in ``directory`` (botkit's own by default), in number order."""
    folder = _folder(directory)
    found = [_migration(entry) for entry in folder.iterdir() if entry.name.endswith(".sql")]
    found.sort(key=lambda m: m.number)
    for before, after in itertools.pairwise(found):
        if before.number == after.number:
            raise ConfigError(
                f"two migrations share number {after.number}: {before.name}, {after.name}"
            )
    return found


async def pending_migrations(conn: Any, migrations: list[Migration] | None = None) -> list[str]:
    """The names of the migrations not yet applied to the database ``conn`` is connected to."""
    wanted = load_migrations() if migrations is None else migrations
    if await conn.fetchval("SELECT to_regclass('botkit_migrations')") is None:
        return [m.name for m in wanted]
    applied = {row["name"] for row in await conn.fetch("SELECT name FROM botkit_migrations")}
    return [m.name for m in wanted if m.name not in applied]


async def apply_migrations(conn: Any, migrations: list[Migration] | None = None) -> list[str]:
    """Apply the pending migrations over an open asyncpg connection; their names, in order.

    Each migration runs in a transaction of its own, with its name recorded in
    ``botkit_migrations``. An advisory lock keeps concurrent runs from colliding: the later
    one waits, then finds nothing left to do.
    """
    wanted = load_migrations() if migrations is None else migrations
    await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
    try:
        await conn.execute(_CREATE_LEDGER)
        pending = set(await pending_migrations(conn, wanted))
        applied: list[str] = []
        for migration in wanted:
            if migration.name in pending:
                await _apply(conn, migration)
                applied.append(migration.name)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)


async def migrate(dsn: str, *, directory: _Directory | None = None) -> list[str]:
    """Bring the database at ``dsn`` up to date; the names of the migrations applied.

    A database that cannot be reached or refuses a migration raises :class:`StoreError` (a
    failed migration leaves nothing of itself behind).
    """
    migrations = load_migrations(directory)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            return await apply_migrations(conn, migrations)
        finally:
            await conn.close()
    except _DRIVER_ERRORS as e:
        where = "".join(f" ({note}, which was rolled back)" for note in getattr(e, "__notes__", []))
        reason = without_password(f"{type(e).__name__}: {e}", dsn)
        raise StoreError(f"cannot migrate the database{where}: {reason}") from e


def without_password(text: str, dsn: str) -> str:
    """``text`` with the DSN's password, if it shows, replaced by ``***``."""
    try:
        password = urlsplit(dsn).password
    except ValueError:
        return text
    return text.replace(password, "***") if password else text


async def _apply(conn: Any, migration: Migration) -> None:
    try:
        async with conn.transaction():
            await conn.execute(migration.sql)
            await conn.execute("INSERT INTO botkit_migrations (name) VALUES ($1)", migration.name)
    except Exception as e:
        e.add_note(f"while applying migration {migration.name}")
        raise
    log.info("migration applied", migration=migration.name)


def _folder(directory: _Directory | None) -> Traversable:
    if directory is None:
        return MIGRATIONS
    if isinstance(directory, str | os.PathLike):
        return Path(directory)
    return directory


def _migration(entry: Traversable) -> Migration:
    match = _FILE_NAME.fullmatch(entry.name)
    if match is None:
        raise ConfigError(f"migration file {entry.name!r} is not named like 001_what_it_does.sql")
    sql = entry.read_text("utf-8")
    if PROCRASTINATE_SCHEMA in sql:
        sql = sql.replace(PROCRASTINATE_SCHEMA, _procrastinate_schema(), 1)
    return Migration(int(match[1]), entry.name.removesuffix(".sql"), sql)


def _procrastinate_schema() -> str:
    """procrastinate's own schema SQL, as its ``schema --apply`` would run it."""
    from procrastinate.schema import SchemaManager

    return SchemaManager.get_schema()
