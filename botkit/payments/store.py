"""Where payments are kept: one row per Telegram charge, so each is granted exactly once.

The table lives beside the users: in the SQLite file of the user store (made on first use),
or in PostgreSQL (migration ``014_payments.sql``). ``grant`` inserts a payment under its
``telegram_payment_charge_id``, the primary key: a second insert of the same charge (the update
delivered again, retried after a crash, or run by two workers at once) inserts nothing.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from botkit.errors import StoreError
from botkit.payments.plans import SUBSCRIPTION_PERIOD, Plan
from botkit.stores.base import UserStore
from botkit.stores.changes import ChangeFeed
from botkit.stores.pooled import pooled_connection, store_beside

__all__ = [
    "UNKNOWN_PLAN",
    "Grant",
    "NewPayment",
    "PaymentStore",
    "PostgresPayments",
    "SqlitePayments",
    "payment_store_for",
]

_COLUMNS = (
    "charge_id, user_id, plan_id, stars, daily_tokens, role, subscription, paid_at, ends_at, "
    "refunded_at"
)
UNKNOWN_PLAN = "unknown"
"""The plan recorded for a payment whose plan is not configured (``unknown:<its id>``)."""
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width, so text order is time order
_REFUNDS = (
    "SELECT plan_id, count(*) FROM botkit_payments WHERE refunded_at IS NOT NULL GROUP BY plan_id"
)


@dataclass(frozen=True, slots=True)
class Grant:
    """One payment and the plan it granted."""

    charge_id: str
    """Telegram's ``telegram_payment_charge_id``."""
    user_id: int
    plan_id: str
    stars: int
    """What the user paid, in Stars."""
    daily_tokens: int
    """The daily budget the plan granted."""
    role: str | None
    subscription: bool
    paid_at: datetime
    ends_at: datetime
    """The plan lasts until this moment (UTC)."""
    refunded_at: datetime | None = None
    """Set once refunded: the grant no longer counts."""

    def active(self, now: datetime) -> bool:
        """Whether this grant counts at ``now``: not refunded, not yet ended."""
        return self.refunded_at is None and self.ends_at > now


@dataclass(frozen=True, slots=True)
class NewPayment:
    """A payment to record, and what it buys."""

    charge_id: str
    user_id: int
    plan: Plan | None
    """What it buys; ``None`` for a plan no longer configured: the payment is recorded (so it
    can be refunded) and grants nothing."""
    stars: int
    paid_at: datetime
    paid_until: datetime | None = None
    """For a subscription: the end of the paid period, as Telegram says."""
    paid_for: str = ""
    """The plan id the invoice named, when ``plan`` is ``None`` (empty if it named none)."""

    @property
    def plan_id(self) -> str:
        """The plan recorded: its id, or ``unknown:<the id paid for>`` for no known plan."""
        if self.plan is not None:
            return self.plan.id
        return f"{UNKNOWN_PLAN}:{self.paid_for}" if self.paid_for else UNKNOWN_PLAN

    def ends_after(self, current_end: datetime | None) -> datetime:
        """When the plan ends: Telegram's period end, or its length after the later of now
        and the end of the same plan already held (a renewal, or a second purchase, extends)."""
        if self.plan is None:  # nothing granted: it ends as it is paid
            return self.paid_at
        if self.paid_until is not None:
            return max(self.paid_until, current_end or self.paid_until)
        start = max(self.paid_at, current_end or self.paid_at)
        length = timedelta(seconds=SUBSCRIPTION_PERIOD) if self.plan.subscription else None
        return start + (length or timedelta(days=self.plan.days))


class PaymentStore(Protocol):
    """Payments and the plans they granted."""

    async def grant(self, payment: NewPayment) -> Grant | None:
        """Record ``payment`` and its plan; ``None`` when its charge was recorded before."""
        ...

    async def active(self, user_id: int, now: datetime) -> Grant | None:
        """The user's current plan at ``now`` (the largest budget among those that count)."""
        ...

    async def get(self, charge_id: str) -> Grant | None:
        """The payment ``charge_id``, if recorded."""
        ...

    async def revoke(self, charge_id: str, now: datetime) -> Grant | None:
        """Mark a payment refunded (its plan ends); ``None`` if unknown or refunded before."""
        ...

    async def recent(self, limit: int = 50, offset: int = 0) -> list[Grant]:
        """The latest payments, newest first (``offset`` skips the newest ones)."""
        ...

    async def refunds(self) -> dict[str, int]:
        """How many payments were refunded, by plan."""
        ...

    async def close(self) -> None:
        """Release what the store opened."""
        ...


def payment_store_for(users: UserStore) -> PaymentStore:
    """The payment store beside ``users``: in its SQLite file, or its PostgreSQL pool."""
    pool, path = store_beside(users, "payments")
    if path is None:
        return PostgresPayments(pool, getattr(users, "changes", None))
    return SqlitePayments(path)


_PAYERS = "SELECT DISTINCT user_id FROM botkit_payments"


class SqlitePayments:
    """Payments in the user store's SQLite file (a connection of its own; every write a
    ``BEGIN IMMEDIATE`` transaction, so processes sharing the file grant a charge once)."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        self._busy_timeout = busy_timeout
        self._db: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()
        self._payers: set[int] | None = None
        """Users with a payment recorded: read once, then kept (payments come to the serving
        process, the file's only writer that adds one), so anyone else's turn asks nothing."""

    async def grant(self, payment: NewPayment) -> Grant | None:
        """Record ``payment`` and its plan; ``None`` when its charge was recorded before."""
        if self._payers is not None:
            self._payers.add(payment.user_id)
        grant: Grant | None = await self._run("recording a payment", _sqlite_grant, payment)
        return grant

    async def active(self, user_id: int, now: datetime) -> Grant | None:
        """The user's current plan at ``now``."""
        if self._payers is None:
            rows = await self._run("reading who paid", _fetch, _PAYERS, ())
            self._payers = {row[0] for row in rows}
        if user_id not in self._payers:
            return None
        sql = f"""SELECT {_COLUMNS} FROM botkit_payments
            WHERE user_id = ? AND refunded_at IS NULL AND ends_at > ?
            ORDER BY daily_tokens DESC, ends_at DESC LIMIT 1"""
        rows = await self._run("reading a plan", _fetch, sql, (user_id, _to_db(now)))
        return _sqlite_row(rows[0]) if rows else None

    async def get(self, charge_id: str) -> Grant | None:
        """The payment ``charge_id``, if recorded."""
        sql = f"SELECT {_COLUMNS} FROM botkit_payments WHERE charge_id = ?"
        rows = await self._run("reading a payment", _fetch, sql, (charge_id,))
        return _sqlite_row(rows[0]) if rows else None

    async def revoke(self, charge_id: str, now: datetime) -> Grant | None:
        """Mark a payment refunded, and take the days it granted off the same plan's later
        grants stacked after it; ``None`` if unknown or refunded before."""
        return await self._run("revoking a payment", _sqlite_revoke, charge_id, now)  # type: ignore[no-any-return]

    async def recent(self, limit: int = 50, offset: int = 0) -> list[Grant]:
        """The latest payments, newest first (``offset`` skips the newest ones)."""
        sql = (
            f"SELECT {_COLUMNS} FROM botkit_payments ORDER BY paid_at DESC, charge_id "
            "LIMIT ? OFFSET ?"
        )
        rows = await self._run("listing payments", _fetch, sql, (limit, offset))
        return [_sqlite_row(row) for row in rows]

    async def refunds(self) -> dict[str, int]:
        """How many payments were refunded, by plan."""
        rows = await self._run("counting refunds", _fetch, _REFUNDS, ())
        return {plan_id: count for plan_id, count in rows}

    async def close(self) -> None:
        """Close the connection."""
        async with self._lock:
            if self._db is not None:
                db, self._db = self._db, None
                await asyncio.to_thread(db.close)

    async def _run(self, doing: str, work: Any, *args: Any) -> Any:
        """``work(connection, *args)`` on a worker thread, SQLite's errors as StoreError."""
        async with self._lock:
            try:
                if self._db is None:
                    self._db = await asyncio.to_thread(_open, self.path, self._busy_timeout)
                return await asyncio.to_thread(work, self._db, *args)
            except sqlite3.Error as e:
                raise StoreError(
                    f"the payments in {self.path} failed while {doing}: {type(e).__name__}: {e}"
                ) from e


_SQLITE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS botkit_payments (
        charge_id    TEXT    PRIMARY KEY,
        user_id      INTEGER NOT NULL,
        plan_id      TEXT    NOT NULL,
        stars        INTEGER NOT NULL CHECK (stars >= 0),
        daily_tokens INTEGER NOT NULL CHECK (daily_tokens > 0),
        role         TEXT,
        subscription INTEGER NOT NULL DEFAULT 0,
        paid_at      TEXT    NOT NULL,
        ends_at      TEXT    NOT NULL,
        refunded_at  TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS botkit_payments_user_idx ON botkit_payments (user_id, ends_at)",
)


def _open(path: str, busy_timeout: float) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA secure_delete = ON")  # deleted rows are zeroed, not left
    _use_wal(db, time.monotonic() + busy_timeout)
    for statement in _SQLITE_SCHEMA:
        db.execute(statement)
    return db


def _use_wal(db: sqlite3.Connection, deadline: float) -> None:
    """Put the file in WAL mode (once for all its users): switching takes a lock that SQLite
    does not wait for, so while another process opens the same file, try again a moment later."""
    while db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _fetch(db: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[Any]:
    return db.execute(sql, params).fetchall()


def _write(db: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[Any]:
    db.execute("BEGIN IMMEDIATE")
    try:
        rows = db.execute(sql, params).fetchall()
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return rows


def _sqlite_grant(db: sqlite3.Connection, payment: NewPayment) -> Grant | None:
    """The grant, in one ``BEGIN IMMEDIATE`` transaction: the charge is checked, the end
    computed from the plan already held, and the row inserted, with no writer in between."""
    db.execute("BEGIN IMMEDIATE")
    try:
        seen = db.execute(
            "SELECT 1 FROM botkit_payments WHERE charge_id = ?", (payment.charge_id,)
        ).fetchone()
        if seen is not None:
            db.execute("COMMIT")
            return None
        current = db.execute(
            """SELECT max(ends_at) FROM botkit_payments
            WHERE user_id = ? AND plan_id = ? AND refunded_at IS NULL AND ends_at > ?""",
            (payment.user_id, payment.plan_id, _to_db(payment.paid_at)),
        ).fetchone()[0]
        grant = _new_grant(payment, _from_db(current) if current else None)
        db.execute(
            f"INSERT INTO botkit_payments ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _sqlite_values(grant),
        )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return grant


def _sqlite_revoke(db: sqlite3.Connection, charge_id: str, now: datetime) -> Grant | None:
    """The refund, in one ``BEGIN IMMEDIATE`` transaction: the payment marked, the same
    plan's later grants moved earlier by the days it had granted."""
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute(
            f"""UPDATE botkit_payments SET refunded_at = ?
            WHERE charge_id = ? AND refunded_at IS NULL RETURNING {_COLUMNS}""",
            (_to_db(now), charge_id),
        ).fetchone()
        revoked = _sqlite_row(row) if row is not None else None
        if revoked is not None:
            others = db.execute(
                f"""SELECT {_COLUMNS} FROM botkit_payments
                WHERE user_id = ? AND plan_id = ? AND refunded_at IS NULL""",
                (revoked.user_id, revoked.plan_id),
            ).fetchall()
            for stacked, ends_at in stacked_after(revoked, [_sqlite_row(r) for r in others]):
                db.execute(
                    "UPDATE botkit_payments SET ends_at = ? WHERE charge_id = ?",
                    (_to_db(ends_at), stacked),
                )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return revoked


def stacked_after(revoked: Grant, others: Sequence[Grant]) -> list[tuple[str, datetime]]:
    """The new end of each of the same plan's grants stacked after ``revoked`` (bought while
    it ran, so they began where it ended): each loses exactly the days ``revoked`` granted.

    ``others`` are the user's unrefunded grants of that plan. A subscription's period is
    Telegram's and is not moved.
    """
    if revoked.subscription:
        return []
    earlier = [
        g.ends_at
        for g in others
        if g.charge_id != revoked.charge_id
        and g.paid_at <= revoked.paid_at
        and revoked.paid_at < g.ends_at <= revoked.ends_at
    ]
    length = revoked.ends_at - max([revoked.paid_at, *earlier])
    return [
        (g.charge_id, g.ends_at - length)
        for g in others
        if g.charge_id != revoked.charge_id and not g.subscription and g.ends_at > revoked.ends_at
    ]


def _new_grant(payment: NewPayment, current_end: datetime | None) -> Grant:
    plan = payment.plan
    if plan is None:
        return _nothing_granted(payment)
    return Grant(
        charge_id=payment.charge_id,
        user_id=payment.user_id,
        plan_id=plan.id,
        stars=payment.stars,
        daily_tokens=plan.daily_tokens,
        role=plan.role,
        subscription=plan.subscription,
        paid_at=payment.paid_at,
        ends_at=payment.ends_after(current_end),
    )


def _nothing_granted(payment: NewPayment) -> Grant:
    """The record of a payment for no known plan: it ends as it is paid, so it never counts."""
    return Grant(
        charge_id=payment.charge_id,
        user_id=payment.user_id,
        plan_id=payment.plan_id,
        stars=payment.stars,
        daily_tokens=1,  # the least the table takes; never used, as the grant never counts
        role=None,
        subscription=payment.paid_until is not None,
        paid_at=payment.paid_at,
        ends_at=payment.ends_after(None),
    )


def _sqlite_values(grant: Grant) -> tuple[object, ...]:
    return (
        grant.charge_id,
        grant.user_id,
        grant.plan_id,
        grant.stars,
        grant.daily_tokens,
        grant.role,
        int(grant.subscription),
        _to_db(grant.paid_at),
        _to_db(grant.ends_at),
        _to_db(grant.refunded_at) if grant.refunded_at else None,
    )


def _sqlite_row(row: Sequence[Any]) -> Grant:
    charge_id, user_id, plan_id, stars, tokens, role, subscription, paid, ends, refunded = row
    return Grant(
        charge_id,
        user_id,
        plan_id,
        stars,
        tokens,
        role,
        bool(subscription),
        _from_db(paid),
        _from_db(ends),
        _from_db(refunded) if refunded else None,
    )


def _to_db(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_TIME_FORMAT)


def _from_db(text: str) -> datetime:
    return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)


class PostgresPayments:
    """Payments in PostgreSQL (``botkit_payments``, migration 014), on the user store's pool.

    With the user store's :class:`~botkit.stores.changes.ChangeFeed` live, who ever paid is
    read once and kept (a payment anyone records is heard): a turn of anyone else asks nothing.
    """

    def __init__(self, pool: Any, changes: ChangeFeed | None = None) -> None:
        self.pool = pool
        self._changes = changes
        self._payers: set[int] | None = None
        self._payers_epoch = -1
        self._heard: set[int] = set()
        """Users a payment was heard of since the feed started listening."""
        if changes is not None:
            changes.on("botkit_payments", self._paid)

    def _paid(self, user_id: str) -> None:
        with suppress(ValueError):
            self._heard.add(int(user_id))

    async def _may_hold(self, user_id: int) -> bool:
        """Whether the user may hold a plan (``True`` whenever the feed is not live)."""
        feed = self._changes
        if feed is None or not await feed.watching():
            return True
        if self._payers is None or self._payers_epoch != feed.epoch:
            epoch = feed.epoch
            self._heard = set()
            async with self._connection("reading who paid") as conn:
                rows = await conn.fetch(_PAYERS)
            if feed.epoch != epoch:
                return True
            self._payers, self._payers_epoch = {row[0] for row in rows}, epoch
        return user_id in self._payers or user_id in self._heard

    async def grant(self, payment: NewPayment) -> Grant | None:
        """Record ``payment`` and its plan; ``None`` when its charge was recorded before.

        The user's payments are locked for the transaction (an advisory lock), so two
        charges of one user at once extend one after the other."""
        self._heard.add(payment.user_id)  # its own payment: known at once, heard or not
        async with self._connection("recording a payment") as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('botkit_payments'), hashtext($1::text))",
                str(payment.user_id),
            )
            current = await conn.fetchval(
                """SELECT max(ends_at) FROM botkit_payments
                WHERE user_id = $1 AND plan_id = $2 AND refunded_at IS NULL AND ends_at > $3""",
                payment.user_id,
                payment.plan_id,
                payment.paid_at,
            )
            grant = _new_grant(payment, current)
            row = await conn.fetchrow(
                f"""INSERT INTO botkit_payments ({_COLUMNS})
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                ON CONFLICT (charge_id) DO NOTHING RETURNING {_COLUMNS}""",
                *_postgres_values(grant),
            )
        return None if row is None else _postgres_row(row)

    async def active(self, user_id: int, now: datetime) -> Grant | None:
        """The user's current plan at ``now``."""
        if not await self._may_hold(user_id):
            return None
        async with self._connection("reading a plan") as conn:
            row = await conn.fetchrow(
                f"""SELECT {_COLUMNS} FROM botkit_payments
                WHERE user_id = $1 AND refunded_at IS NULL AND ends_at > $2
                ORDER BY daily_tokens DESC, ends_at DESC LIMIT 1""",
                user_id,
                now,
            )
        return None if row is None else _postgres_row(row)

    async def get(self, charge_id: str) -> Grant | None:
        """The payment ``charge_id``, if recorded."""
        async with self._connection("reading a payment") as conn:
            sql = f"SELECT {_COLUMNS} FROM botkit_payments WHERE charge_id = $1"
            row = await conn.fetchrow(sql, charge_id)
        return None if row is None else _postgres_row(row)

    async def revoke(self, charge_id: str, now: datetime) -> Grant | None:
        """Mark a payment refunded, and take the days it granted off the same plan's later
        grants stacked after it; ``None`` if unknown or refunded before."""
        async with self._connection("revoking a payment") as conn, conn.transaction():
            row = await conn.fetchrow(
                f"""UPDATE botkit_payments SET refunded_at = $2
                WHERE charge_id = $1 AND refunded_at IS NULL RETURNING {_COLUMNS}""",
                charge_id,
                now,
            )
            if row is None:
                return None
            revoked = _postgres_row(row)
            rows = await conn.fetch(
                f"""SELECT {_COLUMNS} FROM botkit_payments WHERE user_id = $1 AND plan_id = $2
                AND refunded_at IS NULL FOR UPDATE""",
                revoked.user_id,
                revoked.plan_id,
            )
            for stacked, ends_at in stacked_after(revoked, [_postgres_row(r) for r in rows]):
                await conn.execute(
                    "UPDATE botkit_payments SET ends_at = $2 WHERE charge_id = $1",
                    stacked,
                    ends_at,
                )
        return revoked

    async def recent(self, limit: int = 50, offset: int = 0) -> list[Grant]:
        """The latest payments, newest first (``offset`` skips the newest ones)."""
        async with self._connection("listing payments") as conn:
            sql = (
                f"SELECT {_COLUMNS} FROM botkit_payments ORDER BY paid_at DESC, charge_id "
                "LIMIT $1 OFFSET $2"
            )
            rows = await conn.fetch(sql, limit, offset)
        return [_postgres_row(row) for row in rows]

    async def refunds(self) -> dict[str, int]:
        """How many payments were refunded, by plan."""
        async with self._connection("counting refunds") as conn:
            rows = await conn.fetch(_REFUNDS)
        return {row["plan_id"]: row["count"] for row in rows}

    async def close(self) -> None:
        """Nothing of its own: the pool is the user store's."""

    def _connection(self, doing: str) -> AbstractAsyncContextManager[Any]:
        return pooled_connection(self.pool, "payments database", doing)


def _postgres_values(grant: Grant) -> tuple[object, ...]:
    return (
        grant.charge_id,
        grant.user_id,
        grant.plan_id,
        grant.stars,
        grant.daily_tokens,
        grant.role,
        grant.subscription,
        grant.paid_at,
        grant.ends_at,
        grant.refunded_at,
    )


def _postgres_row(row: Any) -> Grant:
    return Grant(*(row[name] for name in _COLUMNS.split(", ")))
