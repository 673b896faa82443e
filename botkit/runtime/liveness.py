"""Workers' liveness locks: a worker process that dies gives its jobs back within a second.

Each procrastinate worker of a process holds a session-level advisory lock keyed on its id,
on one connection the process keeps open for nothing else, and records the id in
``botkit_worker_locks`` once the lock is held. PostgreSQL drops the lock the moment the
process's socket closes (SIGKILL, a crash, the out-of-memory killer), so any other worker's
sweep (one query reading ``pg_locks``) finds a recorded id whose lock is gone and puts its
jobs back. A process that is alive keeps its socket, hence its lock, however long its event
loop is blocked. What the lock cannot see (a lost machine, whose socket never closes; a worker
of an older botkit, which records no id) is left to the heartbeats.

A lock lost while its process lives (the connection reset, an operator's
``pg_terminate_backend``) looks like a death: the jobs it was running may run again elsewhere
(at least once, as after any retry); the process logs it and takes the lock again. A server
restart drops every lock at once: a recorded id counts only on the server that recorded it
(``pg_postmaster_start_time()``), until its process takes it again there. A crash-restart
(a backend killed, the postmaster resetting shared memory) drops every lock too but keeps
that start time: so a sweep judges others' locks only once its own process's lock connection
(the witness) has lasted ``SETTLE`` seconds, longer than any live keeper waits between two
attempts to take its locks again (``LONGEST_RETRY``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
import structlog

__all__ = ["LOCK_SPACE", "WorkerLocks", "dead_workers_jobs"]

log = structlog.get_logger(__name__)

LOCK_SPACE = 0x626F746B  # b"botk": the first key of every liveness lock
"""The first of an advisory lock's two keys for workers' liveness locks (the second is the
worker's id): two-key locks never collide with botkit's one-key ones."""
FIRST_RETRY = 0.5
"""Seconds before the locks' connection is tried again when it could not be opened (doubling
while PostgreSQL cannot be reached, up to ``LONGEST_RETRY``)."""
LONGEST_RETRY = 2.0
"""The longest wait between two attempts to open the locks' connection (short: after a
crash-restart every live process must hold its locks again within ``SETTLE``)."""
SETTLE = 4.0
"""Seconds a process's own lock connection must have lasted before its sweeps judge other
workers' locks (the heartbeats are judged regardless)."""
RECHECK = 1.0
"""Seconds between two checks that this process's held ids are still recorded."""
SYNC_PATIENCE = 5.0
"""Seconds registering or unregistering a worker waits for its lock to be taken or let go."""

_KEY = "mod(%(worker_id)s::bigint, 2147483648)::int"
_TAKE = f"""
    WITH locked AS (SELECT pg_try_advisory_lock(%(space)s, {_KEY}) AS ok)
    INSERT INTO botkit_worker_locks (worker_id, server_started)
    SELECT %(worker_id)s, pg_postmaster_start_time() FROM locked WHERE ok
    ON CONFLICT (worker_id) DO UPDATE SET server_started = EXCLUDED.server_started
    RETURNING worker_id"""
# A sweep that read pg_locks before a reconnecting keeper's _TAKE may delete the row that
# _TAKE just upserted (its DELETE re-checks the updated row, not pg_locks): record it again.
_RESTORE = """
    INSERT INTO botkit_worker_locks (worker_id, server_started)
    SELECT t.id, pg_postmaster_start_time() FROM unnest(%(ids)s::bigint[]) AS t(id)
    WHERE EXISTS (SELECT FROM procrastinate_workers p WHERE p.id = t.id)
    ON CONFLICT (worker_id) DO NOTHING
    RETURNING worker_id"""
_FORGET = "DELETE FROM botkit_worker_locks WHERE worker_id = %(worker_id)s"
_LET_GO = f"SELECT pg_advisory_unlock(%(space)s, {_KEY})"
_NO_IDLE_TIMEOUT = """
    SELECT set_config(name, '0', false) FROM pg_settings WHERE name = 'idle_session_timeout'"""
_DEAD_JOBS = """
    WITH held AS (
        SELECT objid::bigint AS key FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = %(space)s::oid
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    ), settled AS (
        SELECT EXISTS (
            SELECT FROM pg_stat_activity
            WHERE pid = %(witness)s
              AND backend_start <= clock_timestamp() - make_interval(secs => %(settle)s)
        ) AS ok
    ), dead AS (
        DELETE FROM botkit_worker_locks w
        WHERE ((SELECT ok FROM settled)
               AND w.server_started = pg_postmaster_start_time()
               AND mod(w.worker_id, 2147483648) NOT IN (SELECT key FROM held))
           OR NOT EXISTS (SELECT FROM procrastinate_workers p WHERE p.id = w.worker_id)
        RETURNING w.worker_id
    )
    SELECT job.id, status, task_name, priority, lock, queueing_lock,
           args, scheduled_at, queue_name, attempts, job.worker_id
    FROM procrastinate_jobs job JOIN dead ON dead.worker_id = job.worker_id
    WHERE job.status = 'doing' AND job.queue_name = %(queue)s"""


async def dead_workers_jobs(
    connector: Any, queue: str, witness: int | None, settle: float = SETTLE
) -> list[dict[str, Any]]:
    """The running jobs in ``queue`` of workers whose liveness lock is gone (their records
    forgotten in the same query, so one sweep alone sees them), judged only if the server
    process ``witness`` (this process's lock connection) started ``settle`` s ago or more:
    a younger one may follow a crash-restart that live keepers have not caught up with."""
    rows = await connector.execute_query_all_async(
        _DEAD_JOBS, space=LOCK_SPACE, queue=queue, witness=witness, settle=settle
    )
    return list(rows)


class WorkerLocks:
    """This process's liveness locks, on a connection of their own kept open (and opened
    again when lost) by a background task started at the first worker."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.wanted: set[int] = set()
        """Ids of this process's workers, whose locks should be held."""
        self.taken: set[int] = set()
        """Ids whose lock the current connection holds (and that are recorded)."""
        self._changed = asyncio.Event()
        self._synced = asyncio.Condition()
        self._keeper: asyncio.Task[None] | None = None
        self.witness: int | None = None
        """The server process of the locks' current connection (``None`` while there is
        none): the sweep judges others' locks only once it has lasted ``SETTLE`` s."""

    async def take(self, worker_id: int) -> None:
        """Hold worker ``worker_id``'s lock (waiting ``SYNC_PATIENCE`` s at most: without it,
        the worker is only watched by its heartbeats)."""
        self.wanted.add(worker_id)
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.create_task(self._keep(), name="botkit-liveness-locks")
        await self._until(lambda: worker_id in self.taken)

    async def release(self, worker_id: int) -> None:
        """Forget worker ``worker_id`` and let its lock go (it stopped)."""
        self.wanted.discard(worker_id)
        if self._keeper is not None and not self._keeper.done():
            await self._until(lambda: worker_id not in self.taken)

    async def close(self) -> None:
        """Stop keeping the locks; closing their connection lets them all go."""
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None

    async def _until(self, done: Any) -> None:
        self._changed.set()
        async with self._synced:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._synced.wait_for(done), SYNC_PATIENCE)

    async def _keep(self) -> None:
        """Connect, hold the wanted locks, watch the connection; on loss, start again (one
        line logged per loss: the outage itself, if any, is the other connections' to log)."""
        delay, told = FIRST_RETRY, False
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
            except (psycopg.Error, OSError) as e:
                if not told:  # a lost lock was told already; else once, e.g. max_connections
                    log.warning("queue.liveness_lock_unavailable", error=_first_line(e))
                    told = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, LONGEST_RETRY)
                continue
            delay, told = FIRST_RETRY, False
            try:
                async with conn:
                    self.witness = conn.info.backend_pid
                    await conn.execute(_NO_IDLE_TIMEOUT)  # an idle lock is the point
                    await self._hold(conn)
            except Exception as e:  # whatever broke it, the locks are kept on
                if self.taken:
                    log.warning(
                        "queue.liveness_lock_lost",
                        workers=sorted(self.taken),
                        error=_first_line(e),
                        note="their running jobs may be run again by another worker",
                    )
                    told = True
            finally:
                self.taken, self.witness = set(), None
            await asyncio.sleep(0.1)  # soon: until then this process's workers look dead

    async def _hold(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Take and let go of locks as workers come and go, until the connection breaks."""
        while True:
            self._changed.clear()
            for worker_id in sorted(self.wanted - self.taken):
                await self._take_on(conn, worker_id)
            for worker_id in sorted(self.taken - self.wanted):
                await conn.execute(_FORGET, {"worker_id": worker_id})
                await conn.execute(_LET_GO, {"space": LOCK_SPACE, "worker_id": worker_id})
                self.taken.discard(worker_id)
            async with self._synced:
                self._synced.notify_all()
            # Also tries again a lock still held by this process's previous, half-closed session.
            await _until_changed_or_lost(conn, self._changed, RECHECK)
            await self._restore(conn)

    async def _restore(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Record again the held ids whose record a sweep deleted (see ``_RESTORE``)."""
        if not self.taken:
            return
        cursor = await conn.execute(_RESTORE, {"ids": sorted(self.taken)})
        if restored := [row[0] for row in await cursor.fetchall()]:
            log.warning("queue.liveness_record_restored", workers=restored)

    async def _take_on(self, conn: psycopg.AsyncConnection[Any], worker_id: int) -> None:
        cursor = await conn.execute(_TAKE, {"space": LOCK_SPACE, "worker_id": worker_id})
        if await cursor.fetchone() is not None:
            self.taken.add(worker_id)


async def _until_changed_or_lost(
    conn: psycopg.AsyncConnection[Any], changed: asyncio.Event, patience: float | None
) -> None:
    """Wait for ``changed`` (or ``patience`` seconds); raise if the connection breaks
    meanwhile. It is watched without a query: the server's closing it wakes the wait for
    notifications."""
    lost = asyncio.create_task(_drain(conn))
    wanted = asyncio.create_task(changed.wait())
    try:
        await asyncio.wait({lost, wanted}, timeout=patience, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (lost, wanted):
            task.cancel()
        await asyncio.gather(wanted, return_exceptions=True)
        with contextlib.suppress(asyncio.CancelledError):
            await lost  # raises the connection's error if it broke


async def _drain(conn: psycopg.AsyncConnection[Any]) -> None:
    async for _ in conn.notifies():
        pass
    raise psycopg.OperationalError("the connection ended")


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
