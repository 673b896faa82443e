"""Schedules and time zones in the SQLite user store (the tables are made on first use).

Every write is one ``BEGIN IMMEDIATE`` transaction, so a claim (``UPDATE … RETURNING``) is
atomic across every process sharing the file: two never deliver the same schedule.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from botkit.stores.schedules import NewSchedule, Schedule, ScheduleKind, ScheduleStatus

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["SCHEDULE_SCHEMA", "SqliteSchedules", "upgrade_schedule_table"]

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width, so text order is time order

SCHEDULE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS botkit_schedules (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        user_id       INTEGER NOT NULL,
        chat_id       INTEGER NOT NULL,
        thread_id     INTEGER,
        chat_type     TEXT    NOT NULL,
        kind          TEXT    NOT NULL CHECK (kind IN ('reminder', 'task')),
        text          TEXT    NOT NULL,
        due_at        TEXT    NOT NULL,
        repeat        TEXT,
        timezone      TEXT    NOT NULL,
        status        TEXT    NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'firing', 'done', 'cancelled', 'failed')),
        created_at    TEXT    NOT NULL,
        fired         INTEGER NOT NULL DEFAULT 0,
        claim         TEXT,
        claimed_until TEXT,
        last_fired_at TEXT,
        paused_until  TEXT,
        traceparent   TEXT,
        urgent        INTEGER NOT NULL DEFAULT 1,
        batch_id      TEXT,
        batch_at      TEXT,
        batch_digest  TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS botkit_schedules_due_idx ON botkit_schedules (status, due_at)",
    "CREATE INDEX IF NOT EXISTS botkit_schedules_user_idx ON botkit_schedules (user_id, status)",
    """CREATE TABLE IF NOT EXISTS botkit_task_runs (
        schedule_id INTEGER NOT NULL,
        due_at      TEXT    NOT NULL,
        user_id     INTEGER NOT NULL,
        day         TEXT    NOT NULL,
        PRIMARY KEY (schedule_id, due_at)
    )""",
    "CREATE INDEX IF NOT EXISTS botkit_task_runs_user_day_idx ON botkit_task_runs (user_id, day)",
    """CREATE TABLE IF NOT EXISTS botkit_timezones (
        user_id    INTEGER PRIMARY KEY,
        timezone   TEXT    NOT NULL,
        updated_at TEXT    NOT NULL
    )""",
)

_COLUMNS = (
    "id, user_id, chat_id, thread_id, chat_type, kind, text, due_at, repeat, timezone, "
    "status, created_at, fired, claim, last_fired_at, paused_until IS NOT NULL, traceparent, "
    "urgent, batch_id, batch_at, batch_digest"
)
_LISTED = (
    "s.id, s.user_id, s.chat_id, s.thread_id, s.chat_type, s.kind, s.text, s.due_at, s.repeat, "
    "s.timezone, s.status, s.created_at, s.fired, s.claim, s.last_fired_at, "
    "s.paused_until IS NOT NULL OR coalesce(u.blocked, 0) = 1, s.traceparent, "
    "s.urgent, s.batch_id, s.batch_at, s.batch_digest"
)
_ACTIVE = "status IN ('pending', 'firing')"
_COUNT_ACTIVE = f"SELECT count(*) FROM botkit_schedules WHERE user_id = ? AND {_ACTIVE}"
_INSERT = f"""
    INSERT INTO botkit_schedules
        (user_id, chat_id, thread_id, chat_type, kind, text, due_at, repeat, timezone, created_at,
         traceparent, urgent)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    RETURNING {_COLUMNS}"""
_PENDING = f"""
    SELECT {_LISTED} FROM botkit_schedules s LEFT JOIN botkit_users u ON u.user_id = s.user_id
    WHERE s.status IN ('pending', 'firing') AND (?1 IS NULL OR s.user_id = ?1)
        AND (?2 IS NULL OR s.chat_id = ?2)
    ORDER BY s.due_at, s.id"""
_CANCEL = f"""
    UPDATE botkit_schedules SET status = 'cancelled', claim = NULL, claimed_until = NULL
    WHERE id = ?1 AND {_ACTIVE} AND (?2 IS NULL OR user_id = ?2) AND (?3 IS NULL OR chat_id = ?3)
    RETURNING {_COLUMNS}"""
_CLAIM = f"""
    UPDATE botkit_schedules SET status = 'firing', claim = ?2, claimed_until = ?3
    WHERE id IN (
        SELECT s.id FROM botkit_schedules s LEFT JOIN botkit_users u ON u.user_id = s.user_id
        WHERE ((s.status = 'pending' AND s.due_at <= ?1 AND coalesce(s.paused_until, '') <= ?1)
               OR (s.status = 'firing' AND s.claimed_until <= ?1))
          AND coalesce(u.blocked, 0) = 0
        ORDER BY s.due_at, s.id LIMIT ?4)
    RETURNING {_COLUMNS}"""
_FINISH = """
    UPDATE botkit_schedules SET
        status = ?3, due_at = coalesce(?4, due_at), fired = fired + ?5,
        last_fired_at = CASE WHEN ?5 = 1 THEN ?6 ELSE last_fired_at END,
        claim = NULL, claimed_until = NULL, paused_until = NULL,
        batch_id = NULL, batch_at = NULL, batch_digest = NULL
    WHERE id = ?1 AND claim = ?2 AND status = 'firing'
    RETURNING id"""
_HOLD_FOR_BATCH = """
    UPDATE botkit_schedules SET batch_id = ?3, batch_digest = ?4, batch_at = ?5, claimed_until = ?6
    WHERE id = ?1 AND claim = ?2 AND status = 'firing'
    RETURNING id"""
_BATCHED = f"""
    SELECT {_COLUMNS} FROM botkit_schedules
    WHERE status = 'firing' AND batch_id IS NOT NULL ORDER BY batch_at, id LIMIT ?"""
_PAUSE = """
    UPDATE botkit_schedules SET
        status = 'pending', paused_until = ?3, claim = NULL, claimed_until = NULL
    WHERE id = ?1 AND claim = ?2 AND status = 'firing'
    RETURNING id"""
_FORGET_OLD_RUNS = "DELETE FROM botkit_task_runs WHERE user_id = ? AND day < ?"
_RUN_COUNTED = "SELECT 1 FROM botkit_task_runs WHERE schedule_id = ? AND due_at = ?"
_RUNS_ON = "SELECT count(*) FROM botkit_task_runs WHERE user_id = ? AND day = ?"
_COUNT_RUN = "INSERT INTO botkit_task_runs (schedule_id, due_at, user_id, day) VALUES (?, ?, ?, ?)"
_TAKE = f"""
    UPDATE botkit_schedules SET claim = ?3, claimed_until = ?4
    WHERE id = ?1 AND fired = ?2 AND status = 'firing'
    RETURNING {_COLUMNS}"""
_NEXT_DUE = """
    SELECT min(CASE s.status
        WHEN 'pending' THEN max(s.due_at, coalesce(s.paused_until, s.due_at))
        ELSE s.claimed_until END)
    FROM botkit_schedules s LEFT JOIN botkit_users u ON u.user_id = s.user_id
    WHERE s.status IN ('pending', 'firing') AND coalesce(u.blocked, 0) = 0"""
_SET_TIMEZONE = """
    INSERT INTO botkit_timezones (user_id, timezone, updated_at) VALUES (?, ?, ?)
    ON CONFLICT (user_id) DO UPDATE SET timezone = excluded.timezone,
        updated_at = excluded.updated_at"""


def _to_db(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError(f"expected a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(UTC).strftime(_TIME_FORMAT)


def _from_db(text: str | None) -> datetime | None:
    return None if text is None else datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)


def _schedule(row: Sequence[Any]) -> Schedule:
    (id_, user, chat, thread, chat_type, kind, text, due, repeat, zone, status, created) = row[:12]
    fired, claim, last, paused, traceparent, urgent, batch_id, batch_at, digest = row[12:]
    return Schedule(
        id=id_,
        user_id=user,
        chat_id=chat,
        thread_id=thread,
        chat_type=chat_type,
        kind=cast(ScheduleKind, kind),
        text=text,
        due_at=cast(datetime, _from_db(due)),
        repeat=repeat,
        timezone=zone,
        status=cast(ScheduleStatus, status),
        created_at=cast(datetime, _from_db(created)),
        fired=fired,
        claim=claim,
        last_fired_at=_from_db(last),
        paused=bool(paused),
        traceparent=traceparent,
        urgent=bool(urgent),
        batch_id=batch_id,
        batch_at=_from_db(batch_at),
        batch_digest=digest,
    )


async def upgrade_schedule_table(db: aiosqlite.Connection) -> None:
    """Add what later versions keep with a schedule to a file an earlier botkit made."""
    columns = {row[1] for row in await db.execute_fetchall("PRAGMA table_info(botkit_schedules)")}
    if "paused_until" not in columns:
        await db.execute("ALTER TABLE botkit_schedules ADD COLUMN paused_until TEXT")
    if "traceparent" not in columns:
        await db.execute("ALTER TABLE botkit_schedules ADD COLUMN traceparent TEXT")
    if "urgent" not in columns:  # scheduled tasks at half price (#49)
        await db.execute(
            "ALTER TABLE botkit_schedules ADD COLUMN urgent INTEGER NOT NULL DEFAULT 1"
        )
        for column in ("batch_id", "batch_at", "batch_digest"):
            await db.execute(f"ALTER TABLE botkit_schedules ADD COLUMN {column} TEXT")


class SqliteSchedules:
    """The :class:`~botkit.stores.schedules.ScheduleStore` half of ``SqliteUserStore``."""

    if TYPE_CHECKING:

        def _read(self, doing: str) -> AbstractAsyncContextManager[aiosqlite.Connection]: ...

        def _transaction(self, doing: str) -> AbstractAsyncContextManager[aiosqlite.Connection]: ...

        async def _point_read(
            self, sql: str, params: Sequence[object], doing: str
        ) -> Iterable[Sequence[Any]]: ...

    async def add_schedule(self, schedule: NewSchedule, *, max_pending: int) -> Schedule | None:
        """Store ``schedule`` as pending; ``None`` if the user already has ``max_pending``."""
        s = schedule
        values: tuple[object, ...] = (s.user_id, s.chat_id, s.thread_id, s.chat_type, s.kind)
        values += (s.text, _to_db(s.due_at), s.repeat, s.timezone, _to_db(datetime.now(UTC)))
        values += (s.traceparent, int(s.urgent))
        async with self._transaction("adding a schedule") as db:
            count = await db.execute_fetchall(_COUNT_ACTIVE, (s.user_id,))
            if next(iter(count))[0] >= max_pending:
                return None
            rows = await db.execute_fetchall(_INSERT, values)
        return _schedule(next(iter(rows)))

    async def pending_schedules(
        self, user_id: int | None = None, *, chat_id: int | None = None
    ) -> list[Schedule]:
        """Schedules that will still fire (of one user, in one chat, or all), soonest first."""
        async with self._read("listing schedules") as db:
            rows = await db.execute_fetchall(_PENDING, (user_id, chat_id))
        return [_schedule(row) for row in rows]

    async def cancel_schedule(
        self, schedule_id: int, user_id: int | None = None, *, chat_id: int | None = None
    ) -> Schedule | None:
        """Cancel a schedule that would still fire (of ``user_id``, in ``chat_id``, if given)."""
        async with self._transaction("cancelling a schedule") as db:
            rows = await db.execute_fetchall(_CANCEL, (schedule_id, user_id, chat_id))
        row = next(iter(rows), None)
        return None if row is None else _schedule(row)

    async def claim_due_schedules(
        self, now: datetime, *, lease: timedelta, limit: int = 100
    ) -> list[Schedule]:
        """Atomically take due schedules for delivery, so no other process delivers them."""
        values = (_to_db(now), secrets.token_hex(8), _to_db(now + lease), limit)
        async with self._transaction("claiming due schedules") as db:
            rows = await db.execute_fetchall(_CLAIM, values)
        return sorted((_schedule(row) for row in rows), key=lambda s: (s.due_at, s.id))

    async def finish_schedule(
        self, schedule: Schedule, *, next_due: datetime | None, fired_at: datetime, delivered: bool
    ) -> bool:
        """Record a claimed schedule's delivery (or failure); ``False`` if no longer claimed."""
        status = "pending" if next_due is not None else ("done" if delivered else "failed")
        due = None if next_due is None else _to_db(next_due)
        values = (schedule.id, schedule.claim, status, due, int(delivered), _to_db(fired_at))
        async with self._transaction("recording a delivery") as db:
            rows = await db.execute_fetchall(_FINISH, values)
        return next(iter(rows), None) is not None

    async def pause_schedule(self, schedule: Schedule, *, until: datetime) -> bool:
        """Leave a claimed schedule pending but untaken until ``until``; ``False`` if no
        longer claimed."""
        values = (schedule.id, schedule.claim, _to_db(until))
        async with self._transaction("pausing a schedule") as db:
            rows = await db.execute_fetchall(_PAUSE, values)
        return next(iter(rows), None) is not None

    async def take_task_run(self, schedule: Schedule, day: date, *, limit: int) -> bool:
        """Count this occurrence of a task as one of its user's runs on ``day`` (once);
        ``False``, counting nothing, if they already have ``limit`` runs that day."""
        occurrence = (schedule.id, _to_db(schedule.due_at))
        async with self._transaction("counting a task run") as db:
            await db.execute_fetchall(_FORGET_OLD_RUNS, (schedule.user_id, day.isoformat()))
            if next(iter(await db.execute_fetchall(_RUN_COUNTED, occurrence)), None):
                return True
            runs = await db.execute_fetchall(_RUNS_ON, (schedule.user_id, day.isoformat()))
            if next(iter(runs))[0] >= limit:
                return False
            await db.execute_fetchall(_COUNT_RUN, (*occurrence, schedule.user_id, day.isoformat()))
        return True

    async def take_schedule(
        self, schedule_id: int, fired: int, *, until: datetime
    ) -> Schedule | None:
        """Take over a firing schedule at occurrence ``fired`` until ``until``; else ``None``."""
        values = (schedule_id, fired, secrets.token_hex(8), _to_db(until))
        async with self._transaction("taking over a schedule") as db:
            rows = await db.execute_fetchall(_TAKE, values)
        row = next(iter(rows), None)
        return None if row is None else _schedule(row)

    async def hold_for_batch(
        self, schedule: Schedule, *, batch_id: str, digest: str, at: datetime, until: datetime
    ) -> bool:
        """Keep a claimed occurrence waiting for a Message Batch, held until ``until``."""
        values = (schedule.id, schedule.claim, batch_id, digest, _to_db(at), _to_db(until))
        async with self._transaction("holding a schedule for its batch") as db:
            rows = await db.execute_fetchall(_HOLD_FOR_BATCH, values)
        return next(iter(rows), None) is not None

    async def batched_schedules(self, limit: int = 100) -> list[Schedule]:
        """Claimed tasks whose occurrence waits for a Message Batch, oldest batch first."""
        async with self._read("listing batched schedules") as db:
            rows = await db.execute_fetchall(_BATCHED, (limit,))
        return [_schedule(row) for row in rows]

    async def next_schedule_due(self) -> datetime | None:
        """When the next claim could take something (of unblocked users), or ``None``."""
        async with self._read("finding the next schedule") as db:
            row = next(iter(await db.execute_fetchall(_NEXT_DUE)))
        return _from_db(row[0])

    async def get_timezone(self, user_id: int) -> str | None:
        """The IANA time zone the user chose, or ``None``."""
        sql = "SELECT timezone FROM botkit_timezones WHERE user_id = ?"
        row = next(iter(await self._point_read(sql, (user_id,), "reading a time zone")), None)
        return None if row is None else str(row[0])

    async def set_timezone(self, user_id: int, timezone: str) -> None:
        """Remember ``timezone`` (an IANA name) as the user's."""
        values = (user_id, timezone, _to_db(datetime.now(UTC)))
        async with self._transaction("setting a time zone") as db:
            await db.execute_fetchall(_SET_TIMEZONE, values)
