"""Moving a bot from SQLite to PostgreSQL: users, invites, usage, time zones, reminders and
scheduled tasks (``python -m botkit migrate --from-sqlite``; the conversations move with
``botkit.sessions.transfer``).

Each table is copied row by row in one transaction and upserted on its key, so a second run
leaves the same rows; schedule ids are kept, and the id sequence moved past them.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import structlog

from botkit.errors import StoreError
from botkit.stores.migrate import _DRIVER_ERRORS, without_password
from botkit.stores.sqlite import SqliteUserStore

__all__ = ["TABLES", "CopyReport", "copy_from_sqlite"]

log = structlog.get_logger(__name__)

TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("botkit_users", ("user_id",)),
    ("botkit_invites", ("code_hash",)),
    ("botkit_usage", ("user_id", "day")),
    ("botkit_model_usage", ("user_id", "day", "model")),
    ("botkit_timezones", ("user_id",)),
    ("botkit_schedules", ("id",)),
    ("botkit_task_runs", ("schedule_id", "due_at")),
)
"""The tables moved, in an order that keeps references whole, with their keys."""

_COLUMNS = """SELECT column_name, data_type FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position"""
_SEQUENCE = """SELECT setval(pg_get_serial_sequence('botkit_schedules', 'id'),
    GREATEST((SELECT max(id) FROM botkit_schedules), 1))"""


@dataclass(slots=True)
class CopyReport:
    """Rows copied per table."""

    rows: dict[str, int] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """``copied 3 users, 1 invites, …`` as one line."""
        parts = [f"{n} {table.removeprefix('botkit_')}" for table, n in self.rows.items()]
        return "copied from SQLite: " + ", ".join(parts)


async def copy_from_sqlite(path: Path, dsn: str) -> CopyReport:
    """Copy the SQLite user store at ``path`` into the (migrated) PostgreSQL at ``dsn``."""
    if not await asyncio.to_thread(path.is_file):
        raise StoreError(f"no SQLite file at {path}: give the bot's botkit.db")
    await (await SqliteUserStore.connect(path)).close()  # an older file's schema brought up
    report = CopyReport()
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction():
                for table, key in TABLES:
                    report.rows[table] = await _copy_table(source, conn, table, key)
                await conn.execute(_SEQUENCE)
        finally:
            await conn.close()
    except _DRIVER_ERRORS as e:
        reason = without_password(f"{type(e).__name__}: {e}", dsn)
        raise StoreError(f"cannot copy into the database: {reason}") from e
    finally:
        source.close()
    log.info("migrate.copied_from_sqlite", path=str(path), **report.rows)
    return report


async def _copy_table(
    source: sqlite3.Connection, conn: Any, table: str, key: tuple[str, ...]
) -> int:
    """Upsert every row of ``table`` on ``key``; the number of rows."""
    types = {name: kind for name, kind in await conn.fetch(_COLUMNS, table)}
    have = {row[1] for row in source.execute(f"PRAGMA table_info({table})")}
    columns = [name for name in types if name in have]
    if not columns:
        return 0
    rows = source.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
    values = [[_value(v, types[c]) for c, v in zip(columns, row, strict=True)] for row in rows]
    if values:
        await conn.executemany(_upsert(table, columns, key), values)
    return len(values)


def _upsert(table: str, columns: list[str], key: tuple[str, ...]) -> str:
    """An INSERT that updates the row with the same ``key`` instead."""
    places = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
    rest = [c for c in columns if c not in key]
    action = (
        "DO UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in rest) if rest else "DO NOTHING"
    )
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({places}) "
        f"ON CONFLICT ({', '.join(key)}) {action}"
    )


def _value(value: Any, kind: str) -> Any:
    """A SQLite value as the PostgreSQL column of type ``kind`` takes it."""
    if value is None:
        return None
    if kind == "timestamp with time zone":
        moment = datetime.fromisoformat(str(value))
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if kind == "date":
        return date.fromisoformat(str(value))
    if kind == "boolean":
        return bool(value)
    return value
