"""Moving a bot from SQLite to PostgreSQL (``python -m botkit migrate --from-sqlite``): users,
invites, usage, time zones, reminders and scheduled tasks, handoffs and payments from
``botkit.db``; approvals waiting for a decision and the messages held behind them from
``approvals.db``; the memory files under ``memory/``. The conversations move with
``botkit.sessions.transfer``.

Everything is copied in one transaction and upserted on its key, so a second run leaves the
same rows; ids are kept, and the id sequences moved past them. Columns are matched by name, so
a column PostgreSQL has and an older SQLite file lacks takes its default.
"""

from __future__ import annotations

import asyncio
import json
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

__all__ = ["APPROVAL_TABLES", "TABLES", "CopyReport", "copy_from_sqlite"]

log = structlog.get_logger(__name__)

TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("botkit_users", ("user_id",)),
    ("botkit_invites", ("code_hash",)),
    ("botkit_usage", ("user_id", "day")),
    ("botkit_model_usage", ("user_id", "day", "model")),
    ("botkit_timezones", ("user_id",)),
    ("botkit_schedules", ("id",)),
    ("botkit_task_runs", ("schedule_id", "due_at")),
    ("botkit_handoffs", ("user_id",)),
    ("botkit_payments", ("charge_id",)),
    ("botkit_choices", ("conversation",)),
)
"""The tables of ``botkit.db`` moved, in an order that keeps references whole, with their keys."""

APPROVAL_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("botkit_approvals", ("id",)),
    ("botkit_held_messages", ("seq",)),
)
"""The tables of ``approvals.db`` (beside ``botkit.db``) moved, with their keys."""

MEMORY_TABLE = "botkit_memory"
"""Where the memory files (``memory/<conversation>.json``, path to text) go."""

_COLUMNS = """SELECT column_name, data_type FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position"""
_SEQUENCES = (("botkit_schedules", "id"), ("botkit_held_messages", "seq"))
"""Serial columns whose copied ids the sequence must move past."""


@dataclass(slots=True)
class CopyReport:
    """Rows copied per table."""

    rows: dict[str, int] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """``copied 3 users, 1 invites, …`` as one line."""
        parts = [f"{n} {table.removeprefix('botkit_')}" for table, n in self.rows.items()]
        return "copied from SQLite: " + ", ".join(parts)


async def copy_from_sqlite(path: Path, dsn: str, folder: Path | None = None) -> CopyReport:
    """Copy the SQLite user store at ``path``, and ``approvals.db`` and the memory files of
    ``folder`` (``path``'s folder unless given), into the (migrated) PostgreSQL at ``dsn``."""
    if not await asyncio.to_thread(path.is_file):
        raise StoreError(f"no SQLite file at {path}: give the bot's botkit.db")
    await (await SqliteUserStore.connect(path)).close()  # an older file's schema brought up
    folder = path.parent if folder is None else folder
    report = CopyReport()
    sources = [(path, TABLES)]
    if await asyncio.to_thread((folder / "approvals.db").is_file):
        sources.append((folder / "approvals.db", APPROVAL_TABLES))
    memories = await asyncio.to_thread(_memory_rows, folder / "memory")
    try:
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction():
                for source, tables in sources:
                    report.rows.update(await _copy_file(source, conn, tables))
                report.rows[MEMORY_TABLE] = await _copy_rows(
                    conn, MEMORY_TABLE, ("conversation", "path"), memories
                )
                for table, column in _SEQUENCES:
                    await conn.execute(_sequence_past(table, column))
        finally:
            await conn.close()
    except _DRIVER_ERRORS as e:
        reason = without_password(f"{type(e).__name__}: {e}", dsn)
        raise StoreError(f"cannot copy into the database: {reason}") from e
    log.info("migrate.copied_from_sqlite", path=str(path), **report.rows)
    return report


async def _copy_file(
    path: Path, conn: Any, tables: tuple[tuple[str, tuple[str, ...]], ...]
) -> dict[str, int]:
    """Copy ``tables`` of the SQLite file at ``path``; rows copied per table."""
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {table: await _copy_table(source, conn, table, key) for table, key in tables}
    finally:
        source.close()


def _memory_rows(directory: Path) -> list[dict[str, Any]]:
    """The rows of ``botkit_memory`` that the files of a ``FileMemoryStore`` hold."""
    if not directory.is_dir():
        return []
    rows: list[dict[str, Any]] = []
    for file in sorted(directory.glob("*.json")):
        changed = datetime.fromtimestamp(file.stat().st_mtime, UTC)
        for name, text in json.loads(file.read_bytes()).items():
            rows.append(
                {"conversation": file.stem, "path": name, "content": text, "updated_at": changed}
            )
    return rows


def _sequence_past(table: str, column: str) -> str:
    return f"""SELECT setval(pg_get_serial_sequence('{table}', '{column}'),
        GREATEST((SELECT max({column}) FROM {table}), 1))"""


async def _copy_table(
    source: sqlite3.Connection, conn: Any, table: str, key: tuple[str, ...]
) -> int:
    """Upsert every row of SQLite's ``table`` on ``key``; the number of rows."""
    have = [row[1] for row in source.execute(f"PRAGMA table_info({table})")]
    if not have:
        return 0
    cursor = source.execute(f"SELECT {', '.join(have)} FROM {table}")
    rows = [dict(zip(have, row, strict=True)) for row in cursor.fetchall()]
    return await _copy_rows(conn, table, key, rows)


async def _copy_rows(
    conn: Any, table: str, key: tuple[str, ...], rows: list[dict[str, Any]]
) -> int:
    """Upsert ``rows`` (column to value) into PostgreSQL's ``table`` on ``key``, each column
    the two sides share converted to the PostgreSQL type; the number of rows."""
    types = {name: kind for name, kind in await conn.fetch(_COLUMNS, table)}
    columns = [name for name in types if rows and name in rows[0]]
    if not columns:
        return 0
    values = [[_value(row[c], types[c]) for c in columns] for row in rows]
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
