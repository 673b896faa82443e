"""Schedules and time zones in the PostgreSQL user store (tables from migrations 004, 009, 015).

A claim locks the due rows ``FOR UPDATE SKIP LOCKED`` and marks them in the same
``UPDATE … RETURNING``, so several processes (runtimes, queue workers) may fire schedules at
once and never deliver the same one.
"""

from __future__ import annotations

import secrets
from contextlib import AbstractAsyncContextManager
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botkit.stores.schedules import NewSchedule, Schedule

__all__ = ["PostgresSchedules"]

_COLUMNS = (
    "id, user_id, chat_id, thread_id, chat_type, kind, text, due_at, repeat, timezone, "
    "status, created_at, fired, claim, last_fired_at, paused_until IS NOT NULL AS paused, "
    "traceparent, urgent, batch_id, batch_at, batch_digest"
)
_LISTED = (
    "s.id, s.user_id, s.chat_id, s.thread_id, s.chat_type, s.kind, s.text, s.due_at, s.repeat, "
    "s.timezone, s.status, s.created_at, s.fired, s.claim, s.last_fired_at, "
    "(s.paused_until IS NOT NULL OR coalesce(u.blocked, false)) AS paused, s.traceparent, "
    "s.urgent, s.batch_id, s.batch_at, s.batch_digest"
)
_ACTIVE = "status IN ('pending', 'firing')"
# One user's inserts take turns, so two at once cannot both pass the limit.
_LOCK_USER = "SELECT pg_advisory_xact_lock(hashtextextended('botkit_schedules:' || $1, 0))"
_COUNT_ACTIVE = f"SELECT count(*) FROM botkit_schedules WHERE user_id = $1 AND {_ACTIVE}"
_INSERT = f"""
    INSERT INTO botkit_schedules
        (user_id, chat_id, thread_id, chat_type, kind, text, due_at, repeat, timezone, created_at,
         traceparent, urgent)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
    RETURNING {_COLUMNS}"""
_PENDING = f"""
    SELECT {_LISTED} FROM botkit_schedules s LEFT JOIN botkit_users u ON u.user_id = s.user_id
    WHERE s.status IN ('pending', 'firing') AND ($1::bigint IS NULL OR s.user_id = $1)
        AND ($2::bigint IS NULL OR s.chat_id = $2)
    ORDER BY s.due_at, s.id"""
_CANCEL = f"""
    UPDATE botkit_schedules SET status = 'cancelled', claim = NULL, claimed_until = NULL
    WHERE id = $1 AND {_ACTIVE} AND ($2::bigint IS NULL OR user_id = $2)
        AND ($3::bigint IS NULL OR chat_id = $3)
    RETURNING {_COLUMNS}"""
_CLAIM = f"""
    UPDATE botkit_schedules SET status = 'firing', claim = $2, claimed_until = $3
    WHERE id IN (
        SELECT s.id FROM botkit_schedules s LEFT JOIN botkit_users u ON u.user_id = s.user_id
        WHERE ((s.status = 'pending' AND s.due_at <= $1
                AND (s.paused_until IS NULL OR s.paused_until <= $1))
               OR (s.status = 'firing' AND s.claimed_until <= $1))
          AND NOT coalesce(u.blocked, false)
        ORDER BY s.due_at, s.id LIMIT $4
        FOR UPDATE OF s SKIP LOCKED)
    RETURNING {_COLUMNS}"""
_FINISH = """
    UPDATE botkit_schedules SET
        status = $3, due_at = coalesce($4, due_at), fired = fired + $5::int,
        last_fired_at = CASE WHEN $5::int = 1 THEN $6 ELSE last_fired_at END,
        claim = NULL, claimed_until = NULL, paused_until = NULL,
        batch_id = NULL, batch_at = NULL, batch_digest = NULL
    WHERE id = $1 AND claim = $2 AND status = 'firing'
    RETURNING id"""
_HOLD_FOR_BATCH = """
    UPDATE botkit_schedules SET batch_id = $3, batch_digest = $4, batch_at = $5, claimed_until = $6
    WHERE id = $1 AND claim = $2 AND status = 'firing'
    RETURNING id"""
_BATCHED = f"""
    SELECT {_COLUMNS} FROM botkit_schedules
    WHERE status = 'firing' AND batch_id IS NOT NULL ORDER BY batch_at, id LIMIT $1"""
_PAUSE = """
    UPDATE botkit_schedules SET
        status = 'pending', paused_until = $3, claim = NULL, claimed_until = NULL
    WHERE id = $1 AND claim = $2 AND status = 'firing'
    RETURNING id"""
# One user's runs are counted one at a time, so two at once cannot both pass the limit.
_LOCK_RUNS = "SELECT pg_advisory_xact_lock(hashtextextended('botkit_task_runs:' || $1, 0))"
_FORGET_OLD_RUNS = "DELETE FROM botkit_task_runs WHERE user_id = $1 AND day < $2"
_RUN_COUNTED = "SELECT 1 FROM botkit_task_runs WHERE schedule_id = $1 AND due_at = $2"
_RUNS_ON = "SELECT count(*) FROM botkit_task_runs WHERE user_id = $1 AND day = $2"
_COUNT_RUN = """
    INSERT INTO botkit_task_runs (schedule_id, due_at, user_id, day) VALUES ($1, $2, $3, $4)"""
_TAKE = f"""
    UPDATE botkit_schedules SET claim = $3, claimed_until = $4
    WHERE id = $1 AND fired = $2 AND status = 'firing'
    RETURNING {_COLUMNS}"""
_NEXT_DUE = """
    SELECT min(CASE s.status
        WHEN 'pending' THEN greatest(s.due_at, s.paused_until) ELSE s.claimed_until END)
    FROM botkit_schedules s LEFT JOIN botkit_users u ON u.user_id = s.user_id
    WHERE s.status IN ('pending', 'firing') AND NOT coalesce(u.blocked, false)"""
_SET_TIMEZONE = """
    INSERT INTO botkit_timezones (user_id, timezone, updated_at) VALUES ($1, $2, now())
    ON CONFLICT (user_id) DO UPDATE SET timezone = excluded.timezone, updated_at = now()"""


def _schedule(row: Any) -> Schedule:
    return Schedule(**dict(row))


class PostgresSchedules:
    """The :class:`~botkit.stores.schedules.ScheduleStore` half of ``PostgresUserStore``."""

    if TYPE_CHECKING:

        def _connection(self, doing: str) -> AbstractAsyncContextManager[Any]: ...

    async def add_schedule(self, schedule: NewSchedule, *, max_pending: int) -> Schedule | None:
        """Store ``schedule`` as pending; ``None`` if the user already has ``max_pending``."""
        s = schedule
        values: tuple[object, ...] = (s.user_id, s.chat_id, s.thread_id, s.chat_type, s.kind)
        values += (s.text, s.due_at, s.repeat, s.timezone, datetime.now(UTC), s.traceparent)
        values += (s.urgent,)
        async with self._connection("adding a schedule") as conn, conn.transaction():
            await conn.execute(_LOCK_USER, str(s.user_id))
            if await conn.fetchval(_COUNT_ACTIVE, s.user_id) >= max_pending:
                return None
            row = await conn.fetchrow(_INSERT, *values)
        return _schedule(row)

    async def pending_schedules(
        self, user_id: int | None = None, *, chat_id: int | None = None
    ) -> list[Schedule]:
        """Schedules that will still fire (of one user, in one chat, or all), soonest first."""
        async with self._connection("listing schedules") as conn:
            rows = await conn.fetch(_PENDING, user_id, chat_id)
        return [_schedule(row) for row in rows]

    async def cancel_schedule(
        self, schedule_id: int, user_id: int | None = None, *, chat_id: int | None = None
    ) -> Schedule | None:
        """Cancel a schedule that would still fire (of ``user_id``, in ``chat_id``, if given)."""
        async with self._connection("cancelling a schedule") as conn:
            row = await conn.fetchrow(_CANCEL, schedule_id, user_id, chat_id)
        return None if row is None else _schedule(row)

    async def claim_due_schedules(
        self, now: datetime, *, lease: timedelta, limit: int = 100
    ) -> list[Schedule]:
        """Atomically take due schedules for delivery, so no other process delivers them."""
        values = (now, secrets.token_hex(8), now + lease, limit)
        async with self._connection("claiming due schedules") as conn:
            rows = await conn.fetch(_CLAIM, *values)
        return sorted((_schedule(row) for row in rows), key=lambda s: (s.due_at, s.id))

    async def finish_schedule(
        self, schedule: Schedule, *, next_due: datetime | None, fired_at: datetime, delivered: bool
    ) -> bool:
        """Record a claimed schedule's delivery (or failure); ``False`` if no longer claimed."""
        status = "pending" if next_due is not None else ("done" if delivered else "failed")
        values = (schedule.id, schedule.claim, status, next_due, int(delivered), fired_at)
        async with self._connection("recording a delivery") as conn:
            row = await conn.fetchrow(_FINISH, *values)
        return row is not None

    async def pause_schedule(self, schedule: Schedule, *, until: datetime) -> bool:
        """Leave a claimed schedule pending but untaken until ``until``; ``False`` if no
        longer claimed."""
        async with self._connection("pausing a schedule") as conn:
            row = await conn.fetchrow(_PAUSE, schedule.id, schedule.claim, until)
        return row is not None

    async def take_task_run(self, schedule: Schedule, day: date, *, limit: int) -> bool:
        """Count this occurrence of a task as one of its user's runs on ``day`` (once);
        ``False``, counting nothing, if they already have ``limit`` runs that day."""
        user, occurrence = schedule.user_id, (schedule.id, schedule.due_at)
        async with self._connection("counting a task run") as conn, conn.transaction():
            await conn.execute(_LOCK_RUNS, str(user))
            await conn.execute(_FORGET_OLD_RUNS, user, day)
            if await conn.fetchval(_RUN_COUNTED, *occurrence) is not None:
                return True
            if await conn.fetchval(_RUNS_ON, user, day) >= limit:
                return False
            await conn.execute(_COUNT_RUN, *occurrence, user, day)
        return True

    async def take_schedule(
        self, schedule_id: int, fired: int, *, until: datetime
    ) -> Schedule | None:
        """Take over a firing schedule at occurrence ``fired`` until ``until``; else ``None``."""
        values = (schedule_id, fired, secrets.token_hex(8), until)
        async with self._connection("taking over a schedule") as conn:
            row = await conn.fetchrow(_TAKE, *values)
        return None if row is None else _schedule(row)

    async def hold_for_batch(
        self, schedule: Schedule, *, batch_id: str, digest: str, at: datetime, until: datetime
    ) -> bool:
        """Keep a claimed occurrence waiting for a Message Batch, held until ``until``."""
        values = (schedule.id, schedule.claim, batch_id, digest, at, until)
        async with self._connection("holding a schedule for its batch") as conn:
            row = await conn.fetchrow(_HOLD_FOR_BATCH, *values)
        return row is not None

    async def batched_schedules(self, limit: int = 100) -> list[Schedule]:
        """Claimed tasks whose occurrence waits for a Message Batch, oldest batch first."""
        async with self._connection("listing batched schedules") as conn:
            rows = await conn.fetch(_BATCHED, limit)
        return [_schedule(row) for row in rows]

    async def next_schedule_due(self) -> datetime | None:
        """When the next claim could take something (of unblocked users), or ``None``."""
        async with self._connection("finding the next schedule") as conn:
            due: datetime | None = await conn.fetchval(_NEXT_DUE)
        return due

    async def get_timezone(self, user_id: int) -> str | None:
        """The IANA time zone the user chose, or ``None``."""
        sql = "SELECT timezone FROM botkit_timezones WHERE user_id = $1"
        async with self._connection("reading a time zone") as conn:
            zone = await conn.fetchval(sql, user_id)
        return None if zone is None else str(zone)

    async def set_timezone(self, user_id: int, timezone: str) -> None:
        """Remember ``timezone`` (an IANA name) as the user's."""
        async with self._connection("setting a time zone") as conn:
            await conn.execute(_SET_TIMEZONE, user_id, timezone)
