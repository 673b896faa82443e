"""The job queue of the scale-out runtimes: procrastinate on PostgreSQL, one job per update.

A receiver defers each Telegram update as a job locked on its conversation (``user:<id>``, or
``chat:<key>`` for a group's), so procrastinate runs one conversation's turns one at a time,
in order, on whichever worker is free. A queueing lock on the update refuses a second copy
while the first waits; ``botkit_updates`` remembers which job claimed an update, so a copy
delivered after the first ran is skipped, while the same job re-run after its worker died
runs again. A worker process that ends (SIGKILL, a crash) lets go of its liveness lock
(``runtime.liveness``): any other worker puts its jobs back within ``lock_check`` seconds.
Workers also beat every ``heartbeat`` seconds; jobs of a worker silent for ``stalled_after``
seconds (a lost machine, a worker of an older botkit) are put back too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC
from typing import Any, cast
from weakref import WeakKeyDictionary

import orjson
import psycopg
import structlog
from procrastinate import App, PsycopgConnector, RetryStrategy
from procrastinate.exceptions import AlreadyEnqueued, ConnectorException
from procrastinate.job_context import JobContext, JobResult
from procrastinate.jobs import Job, Status
from procrastinate.manager import JobManager
from procrastinate.worker import Worker
from psycopg.types.json import set_json_dumps, set_json_loads
from psycopg_pool import AsyncConnectionPool

from botkit import tracing
from botkit.chats import conversation_of
from botkit.choices.store import Choice
from botkit.errors import ConfigError, StoreError
from botkit.messengers.base import Incoming
from botkit.runtime.liveness import SETTLE, WorkerLocks, dead_workers_jobs
from botkit.stores.base import UserRecord

__all__ = [
    "QUEUE",
    "TURN_TASK",
    "Behind",
    "Claim",
    "Fetched",
    "Outage",
    "PatientJobManager",
    "QueueTimings",
    "QuietWorker",
    "Sender",
    "TurnQueue",
    "describe",
    "lock_for",
]

log = structlog.get_logger(__name__)

TURN_TASK = "botkit.turn"
"""The name of the task that runs one update's turn."""
QUEUE = "botkit"
"""The procrastinate queue botkit's jobs go to."""
UPDATES_KEPT_DAYS = 2
"""Days an update's claim is kept: Telegram re-delivers an update for at most 24 hours."""
JOB_END_PATIENCE = 60.0
"""Seconds a worker keeps trying to record that a job ended while PostgreSQL is away."""
CHECK_RESTED_AFTER = 10.0
"""Seconds since a pooled connection was last lent after which it is checked (one round trip)
before it is lent again; one in steady use is not."""

# With the claim, the last entry number of the job's conversation (its lock without the
# ``user:``/``chat:`` prefix is its session key), so the turn need not read it again; and the
# sender's user record and time zone, which every turn reads too (#34).
_SENDER_COLUMNS = """sender.id AS sender_id, sender_user.user_id IS NOT NULL AS sender_stored,
           sender_user.role AS sender_role, sender_user.display_name AS sender_name,
           sender_user.joined_at AS sender_joined_at, sender_user.blocked AS sender_blocked,
           sender_zone.timezone AS sender_zone"""
# And the conversation's choices (model, persona, instructions: #47), which every turn of a
# bot that offers them reads too (#52); a choice's conversation is the session key.
_CHOICE_COLUMNS = """choice.conversation IS NOT NULL AS choice_stored,
           choice.user_id AS choice_user_id, choice.model AS choice_model,
           choice.persona AS choice_persona, choice.instructions AS choice_instructions,
           choice.updated_at AS choice_updated_at"""


def _waiting_column(key: str) -> str:
    """Whether the conversation of session key ``key`` waits for an approval or holds
    messages behind one (``claim_waiting``), so the turn need not ask (#52). The approvals'
    conversation is ``<owner>:<key>`` as ``Approvals.conversation`` names it: a private
    conversation's key is its user's id, a group's ``chat_<chat>[_<topic>]`` (owned by the
    chat) or ``…_user_<member>`` (BOTKIT_GROUP_CONTEXT=per_user, owned by the member)."""
    owner = f"""CASE WHEN {key} ~ '^-?[0-9]+$' THEN {key} || ':'
        WHEN {key} ~ '_user_-?[0-9]+$'
            THEN substring({key} from '_user_(-?[0-9]+)$') || ':' || {key}
        ELSE substring({key} from '^chat_(-?[0-9]+)') || ':' || {key} END"""
    return f"""(EXISTS (SELECT 1 FROM botkit_approvals waits
                    WHERE waits.conversation = {owner} AND waits.state <> 'done')
            OR EXISTS (SELECT 1 FROM botkit_held_messages held
                       WHERE held.conversation = {owner})) AS claim_waiting"""


def _sender_joins(on: str) -> str:
    """The joins that give ``_SENDER_COLUMNS``: the sender of the update of ``job`` when
    ``on`` holds, their user record and their time zone."""
    # An id that is no integer (an update botkit parsed leaving its sender out) reads no
    # sender: a cast of it would fail the statement, and with it every fetch.
    return f"""LEFT JOIN LATERAL (
        SELECT CASE WHEN given.id ~ '^-?[0-9]{{1,18}}$' THEN given.id::bigint END AS id
        FROM (SELECT coalesce(job.args #> '{{update,message,from}}',
                              job.args #> '{{update,edited_message,from}}',
                              job.args #> '{{update,callback_query,from}}')->>'id' AS id) AS given
    ) sender ON {on}
    LEFT JOIN botkit_users sender_user ON sender_user.user_id = sender.id
    LEFT JOIN botkit_timezones sender_zone ON sender_zone.user_id = sender.id"""


_CLAIM = f"""
    WITH claim AS (
        INSERT INTO botkit_updates (bot_id, update_id, job_id, starts)
        VALUES (%(bot_id)s, %(update_id)s, %(job_id)s, 1)
        ON CONFLICT (bot_id, update_id) DO UPDATE
        SET starts = botkit_updates.starts + (botkit_updates.job_id = EXCLUDED.job_id)::int
        RETURNING job_id AS claimed_by, starts AS claim_starts,
                  given_up_at IS NOT NULL AS claim_given_up
    ), job AS (
        SELECT CASE WHEN lock ~ '^(user|chat):' THEN substr(lock, strpos(lock, ':') + 1) END
                   AS conversation, args
        FROM procrastinate_jobs WHERE id = %(job_id)s
    )
    SELECT claim.*, job.conversation AS claim_conversation,
           coalesce(head.last_seq, 0) AS claim_head, {_waiting_column("job.conversation")},
           {_CHOICE_COLUMNS}, {_SENDER_COLUMNS}
    FROM claim
    LEFT JOIN job ON true
    LEFT JOIN botkit_session_heads head ON head.conversation = job.conversation
    LEFT JOIN botkit_choices choice ON choice.conversation = job.conversation
    {_sender_joins(on="true")}"""
# procrastinate's fetch_job (its columns as in its queries.sql) through botkit's fetch
# function, whose plan stays right at every queue size (migration 021).
_NEXT_JOB = "botkit_fetch_job(%(queues)s::varchar[], %(worker_id)s)"
# A job's end (procrastinate's finish_job) and then that fetch, in one call (migration 022).
_END_THEN_NEXT_JOB = """botkit_finish_then_fetch_job(
        %(job_id)s, %(status)s, %(delete_job)s, %(queues)s::varchar[], %(worker_id)s)"""


def _fetch(source: str) -> str:
    """A fetch of the job ``source`` (a call of a fetch function) takes."""
    return f"""
    SELECT id, status, task_name, priority, lock, queueing_lock, args, scheduled_at,
           queue_name, attempts, worker_id
    FROM {source}"""


def _fetch_and_claim(source: str) -> str:
    """``_fetch(source)`` and ``_CLAIM`` of the taken turn's update in one statement."""
    # One round trip a job less. A suspect (put back ``suspect_from`` times) is not claimed
    # here: it claims its update only once it entered the suspects' lane, so a death while it
    # waits is not its start.
    return f"""
    WITH job AS MATERIALIZED ({_fetch(source)}
    ), claim AS (
        INSERT INTO botkit_updates (bot_id, update_id, job_id, starts)
        SELECT %(bot_id)s, (args->'update'->>'update_id')::bigint, id, 1 FROM job
        WHERE task_name = %(task)s AND attempts < %(suspect_from)s
          AND args->'update' ? 'update_id'
        ON CONFLICT (bot_id, update_id) DO UPDATE
        SET starts = botkit_updates.starts + (botkit_updates.job_id = EXCLUDED.job_id)::int
        RETURNING update_id, job_id, starts, given_up_at IS NOT NULL AS given_up
    )
    SELECT job.*, claim.update_id AS claimed_update, claim.job_id AS claimed_by,
           claim.starts AS claim_starts, claim.given_up AS claim_given_up,
           conversation.key AS claim_conversation, coalesce(head.last_seq, 0) AS claim_head,
           {_waiting_column("conversation.key")}, {_CHOICE_COLUMNS}, {_SENDER_COLUMNS}
    FROM job
    LEFT JOIN claim ON true
    LEFT JOIN LATERAL (
        SELECT substr(job.lock, strpos(job.lock, ':') + 1) AS key
        WHERE job.lock ~ '^(user|chat):'
    ) conversation ON claim.job_id = job.id
    LEFT JOIN botkit_session_heads head ON head.conversation = conversation.key
    LEFT JOIN botkit_choices choice ON choice.conversation = conversation.key
    {_sender_joins(on="claim.job_id = job.id")}"""


_FETCH = _fetch(_NEXT_JOB)
_FETCH_AND_CLAIM = _fetch_and_claim(_NEXT_JOB)
_END_THEN_FETCH = _fetch(_END_THEN_NEXT_JOB)
_END_THEN_FETCH_AND_CLAIM = _fetch_and_claim(_END_THEN_NEXT_JOB)
_UNSTART = """
    UPDATE botkit_updates SET starts = starts - 1
    WHERE bot_id = %(bot_id)s AND update_id = %(update_id)s AND job_id = %(job_id)s
      AND starts > 0"""
# The job's update and those it gathered into its turn (claimed for it): a burst is given up
# whole, as ``run`` gives it up.
_GIVE_UP = """
    UPDATE botkit_updates SET given_up_at = now()
    WHERE bot_id = %(bot_id)s AND job_id = %(job_id)s AND given_up_at IS NULL
    RETURNING update_id"""
_REJECT = """
    INSERT INTO botkit_unparseable_updates (bot_id, update_id, payload, error)
    VALUES (%(bot_id)s, %(update_id)s, %(payload)s, %(error)s) ON CONFLICT DO NOTHING"""
_ALBUM_PARTS = """
    SELECT args FROM procrastinate_jobs
    WHERE queue_name = %(queue)s AND task_name = %(task)s AND lock = %(lock)s
      AND status = 'todo' AND args->'update'->'message'->>'media_group_id' = %(group)s
    ORDER BY id"""
# The jobs behind a running one on its lock, in order, with who claimed each one's update. An
# update's claim is read by its number, so a job without one (a scheduled task's) has none.
_BEHIND = """
    SELECT jobs.task_name, jobs.args, claims.job_id AS claimed_by
    FROM procrastinate_jobs jobs
    LEFT JOIN botkit_updates claims ON claims.bot_id = %(bot_id)s
      AND claims.update_id = (jobs.args->'update'->>'update_id')::bigint
    WHERE jobs.lock = %(lock)s AND jobs.status = 'todo' AND jobs.id > %(job_id)s
    ORDER BY jobs.id LIMIT %(limit)s"""
# The updates queued behind a running job on its lock that it claimed (gathered), in order.
_CLAIMED_BEHIND = """
    SELECT jobs.args->'update' AS update
    FROM procrastinate_jobs jobs
    JOIN botkit_updates claims ON claims.bot_id = %(bot_id)s
      AND claims.update_id = (jobs.args->'update'->>'update_id')::bigint
    WHERE jobs.lock = %(lock)s AND jobs.status = 'todo' AND jobs.id > %(job_id)s
      AND jobs.task_name = %(task)s AND claims.job_id = %(job_id)s
    ORDER BY jobs.id"""
# Updates gathered into another job's turn: claimed for it, their own starts left uncounted.
_CLAIM_FOR = """
    INSERT INTO botkit_updates (bot_id, update_id, job_id, starts)
    SELECT %(bot_id)s, update_id, %(job_id)s, 0 FROM unnest(%(update_ids)s::bigint[]) update_id
    ON CONFLICT (bot_id, update_id) DO UPDATE SET job_id = botkit_updates.job_id
    RETURNING update_id, job_id"""
_WAITING = """
    SELECT count(*) AS waiting FROM procrastinate_jobs
    WHERE queue_name = %(queue)s AND task_name = %(task)s AND status = 'todo'"""
_WORKERS = """
    SELECT w.id, w.last_heartbeat, count(j.id) AS running
    FROM procrastinate_workers w
    LEFT JOIN procrastinate_jobs j ON j.worker_id = w.id AND j.status = 'doing'
    GROUP BY w.id, w.last_heartbeat ORDER BY w.id LIMIT %(limit)s"""
# procrastinate's retry_job checks only status = 'doing': a job listed by two sweeps, put
# back by the first and already taken by a live worker, would be put back again by the second.
# A copy of the job's update queued meanwhile (Telegram delivered it again while the job ran)
# would make procrastinate's one-queued-copy index refuse the retry, leaving the job 'doing'
# under a dead worker, its conversation held for ever; the copy would only find the update
# claimed by this job, so it is dropped first (``retried`` reads ``copies``: it runs after).
_RETRY_UNLESS_TAKEN = """
    WITH still AS (
        SELECT id, queueing_lock FROM procrastinate_jobs
        WHERE id = %(job_id)s AND status = 'doing'
          AND (worker_id = %(worker_id)s OR worker_id IS NULL)
        FOR UPDATE
    ), copies AS (
        DELETE FROM procrastinate_jobs copy USING still
        WHERE copy.queueing_lock = still.queueing_lock AND copy.status = 'todo'
          AND copy.id <> still.id
        RETURNING copy.id
    ), retried AS (
        SELECT procrastinate_retry_job_v2(id, now(), NULL, NULL, NULL) FROM still
        WHERE (SELECT count(*) FROM copies) >= 0
    )
    SELECT count(*) > 0 AS retried FROM retried"""
_PRUNE = "DELETE FROM botkit_updates WHERE received_at < now() - make_interval(days => %(days)s)"
_SCHEMA = """
    SELECT to_regclass('procrastinate_jobs') IS NOT NULL AND EXISTS (
        SELECT FROM pg_attribute
        WHERE attrelid = to_regclass('botkit_updates') AND attname = 'given_up_at'
    ) AND to_regclass('botkit_worker_locks') IS NOT NULL
      AND to_regprocedure('botkit_fetch_job(character varying[], bigint)') IS NOT NULL
      AND to_regproc('botkit_finish_then_fetch_job') IS NOT NULL
      AND to_regclass('botkit_choices') IS NOT NULL AS ok"""  # a claim reads choices (023)


@dataclass(frozen=True, slots=True)
class QueueTimings:
    """How quickly a dead worker's jobs move on: within about ``lock_check`` seconds when
    its process ended, ``stalled_after + heartbeat`` when its machine was lost."""

    heartbeat: float = 2.0
    """Seconds between a worker's heartbeats, and between checks for stalled jobs."""
    stalled_after: float = 8.0
    """Seconds without a heartbeat after which a worker counts as dead."""
    lock_check: float = 0.5
    """Seconds between looks for workers whose liveness lock is gone (one cheap query)."""
    lock_settle: float = SETTLE
    """Seconds this process's own liveness-lock connection must have lasted before it judges
    others' locks (after a crash-restart every live process takes its locks again first)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A job's hold on its update: how often it started, whether it was given up."""

    starts: int
    """Starts of the job, this one included, that no worker saw end short of done: all but
    this one died with their process."""
    given_up: bool
    """Whether a start past ``BOTKIT_MAX_JOB_ATTEMPTS`` gave the update up already."""
    conversation: str | None = None
    """The session key of the job's conversation (from its lock), if it has one."""
    head: int = 0
    """The last entry number of ``conversation`` when the update was claimed."""
    waiting: bool = True
    """Whether ``conversation`` waited for an approval (or held messages) then."""
    choice: Choice | None = None
    """``conversation``'s choices then (``None``: it made none)."""
    sender: Sender | None = None
    """Who sent the update, as the claim read them (``None``: an update with no sender)."""


@dataclass(frozen=True, slots=True)
class Sender:
    """The sender of a job's update, with what the claim read of them for the turn."""

    user_id: int
    record: UserRecord | None
    """Their stored record (``None``: not stored)."""
    zone: str | None
    """The time zone they set (``None``: none)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """A job's update as its fetch claimed it (in the statement that took the job)."""

    update_id: int
    """The update the job runs."""
    claim: Claim | None
    """The job's hold on it, this start counted; ``None``: another job claimed it first."""


@dataclass(frozen=True, slots=True)
class Behind:
    """A job queued behind a running one on its lock."""

    update: dict[str, Any] | None
    """The Telegram update it runs (``None``: not an update's turn, a scheduled task's)."""
    during_turn: bool
    """Whether it was queued while a job of its lock ran (migration 018 marks it)."""
    claimed_by: int | None
    """The job that claimed its update, if one did."""


def lock_for(message: Incoming, group_context: str) -> str:
    """The lock that keeps a conversation's turns in order: ``user:<id>`` or ``chat:<key>``."""
    conversation = conversation_of(message, group_context)
    if conversation.key is None:
        return f"user:{conversation.owner_id}"
    return f"chat:{conversation.key}"


class TurnQueue:
    """botkit's view of procrastinate: defer an update, claim it once, retry stalled jobs."""

    def __init__(self, dsn: str, *, pool_size: int = 10, timings: QueueTimings | None = None):
        self.dsn = dsn
        self.timings = timings or QueueTimings()
        self.app = App(
            # A connection not had within ``timeout`` s is an error (an outage), not a wait.
            connector=PsycopgConnector(
                pool_factory=_pool,
                conninfo=dsn,
                min_size=1,
                max_size=pool_size,
                timeout=5,
                configure=_configure,
            ),
            worker_defaults={"queues": [QUEUE]},
        )
        self.locks = WorkerLocks(dsn)
        self.app.job_manager = PatientJobManager(self.app.connector, self.locks)  # before tasks

    async def open(self) -> None:
        """Connect and check the schema; ``ConfigError`` (one sentence) if either fails."""
        await _check_reachable(self.dsn)
        try:
            await self.app.open_async()
            row = await self.app.connector.execute_query_one_async(_SCHEMA)
        except ConnectorException as e:
            await self.close()
            raise ConfigError(
                f"cannot use the job queue in BOTKIT_DATABASE_URL: {describe(e)}"
            ) from e
        if not row["ok"]:
            await self.close()
            raise ConfigError(
                "the database lacks the job queue's tables or its fetch: run `python -m botkit"
                " migrate`"
            )

    async def close(self) -> None:
        """Let go of the liveness locks, close the connection pool."""
        await self.locks.close()
        with _suppressed():
            await self.app.close_async()

    async def check(self) -> str | None:
        """A readiness check: ``None`` while the queue's database answers."""
        try:
            await self.app.connector.execute_query_one_async("SELECT 1 AS one")
        except Exception as e:
            return f"the job queue's database does not answer: {describe(e)}"
        return None

    async def waiting(self) -> int:
        """How many queued updates no worker has started yet (the queue's depth)."""
        row = await self.app.connector.execute_query_one_async(
            _WAITING, queue=QUEUE, task=TURN_TASK
        )
        return int(row["waiting"])

    async def workers(self, limit: int = 100) -> list[dict[str, Any]]:
        """The registered workers: ``id``, ``last_heartbeat`` and the jobs ``running``."""
        rows = await self.app.connector.execute_query_all_async(_WORKERS, limit=limit)
        return [dict(row) for row in rows]

    def register(self, run: Callable[[int, dict[str, Any], int, bool], Awaitable[None]]) -> None:
        """Make ``run(job_id, update, attempts, during_turn)`` the task that runs a turn in this
        process (``attempts``: how often the job was put back in the queue before this run;
        ``during_turn``: whether it was queued while a job of its lock ran)."""

        async def turn(
            context: Any, update: dict[str, Any], trace: Any = None, during_turn: bool = False
        ) -> None:
            with tracing.tracer.resumed(trace):  # the turn joins its receiver's trace
                await run(int(context.job.id), update, int(context.job.attempts), during_turn)

        # A job cut short by a shutdown is retried (procrastinate retries aborts only then).
        retry = RetryStrategy(max_attempts=100, wait=1)
        self.app.task(name=TURN_TASK, queue=QUEUE, pass_context=True, retry=retry)(turn)

    async def work(self, **options: Any) -> None:
        """Run a procrastinate worker on botkit's queue (``options``: those of
        ``App.run_worker_async``) until it stops or is cancelled."""
        worker = QuietWorker(app=self.app, queues=[QUEUE], **options)
        await worker.run()  # type: ignore[no-untyped-call]

    async def defer(self, bot_id: int, update_id: int, update: dict[str, Any], lock: str) -> None:
        """Queue ``update`` behind its conversation's earlier jobs (a copy already queued is
        not queued again); raises ``StoreError`` when PostgreSQL cannot take it."""
        await self.defer_all([self.job_for(bot_id, update_id, update, lock)])

    def job_for(self, bot_id: int, update_id: int, update: dict[str, Any], lock: str) -> Job:
        """The job of ``update`` on ``lock`` (with the running span, if tracing), to defer."""
        deferrer = self.app.configure_task(
            TURN_TASK, queue=QUEUE, lock=lock, queueing_lock=f"update:{bot_id}:{update_id}"
        )
        return deferrer.make_new_job(update=update, **_trace_args())

    async def defer_all(self, jobs: list[Job]) -> None:
        """Queue ``jobs`` in order in one statement; when one is a copy of an update already
        queued, one at a time (the copies left out). ``StoreError`` when PostgreSQL cannot
        take them: none or only some were queued, and deferring them again is safe."""
        manager = self.app.job_manager
        try:
            if len(jobs) > 1:
                try:
                    await manager.batch_defer_jobs_async(jobs=jobs)
                    return
                except AlreadyEnqueued:
                    pass
            for job in jobs:
                try:
                    await manager.defer_job_async(job=job)
                except AlreadyEnqueued:
                    log.info("queue.duplicate_update", update_id=_update_id(job))
        except (ConnectorException, OSError) as e:
            ids = ", ".join(str(_update_id(job)) for job in jobs)
            updates = "updates" if len(jobs) > 1 else "update"
            raise StoreError(f"cannot queue {updates} {ids}: {describe(e)}") from e

    async def album_parts(self, lock: str, media_group_id: str) -> list[dict[str, Any]]:
        """The queued updates of an album (``media_group_id``) behind ``lock``, oldest first."""
        rows = await self.app.connector.execute_query_all_async(
            _ALBUM_PARTS, queue=QUEUE, task=TURN_TASK, lock=lock, group=media_group_id
        )
        return [row["args"]["update"] for row in rows]

    async def behind(self, bot_id: int, lock: str, job_id: int, limit: int) -> list[Behind]:
        """The first ``limit`` jobs queued behind job ``job_id`` on ``lock``, oldest first."""
        rows = await self.app.connector.execute_query_all_async(
            _BEHIND, bot_id=bot_id, lock=lock, job_id=job_id, limit=limit
        )
        return [
            Behind(
                update=row["args"].get("update") if row["task_name"] == TURN_TASK else None,
                during_turn=bool(row["args"].get("during_turn")),
                claimed_by=row["claimed_by"],
            )
            for row in rows
        ]

    async def claimed_behind(self, bot_id: int, lock: str, job_id: int) -> list[dict[str, Any]]:
        """The updates queued behind job ``job_id`` on ``lock`` that it claimed, oldest first
        (a copy of one as often as it is queued)."""
        rows = await self.app.connector.execute_query_all_async(
            _CLAIMED_BEHIND, bot_id=bot_id, lock=lock, job_id=job_id, task=TURN_TASK
        )
        return [row["update"] for row in rows]

    async def claim_for(self, bot_id: int, update_ids: list[int], job_id: int) -> set[int]:
        """Claim ``update_ids`` for job ``job_id`` (gathered into its turn, their own jobs then
        find them claimed); the ones it holds, without those another job claimed first."""
        if not update_ids:
            return set()
        rows = await self.app.connector.execute_query_all_async(
            _CLAIM_FOR, bot_id=bot_id, update_ids=update_ids, job_id=job_id
        )
        return {int(row["update_id"]) for row in rows if int(row["job_id"]) == job_id}

    def claim_at_fetch(self, bot_id: int, suspect_from: int) -> None:
        """From now on, fetching a turn's job claims its update in the same statement (as
        :meth:`claim` would) unless the job was put back ``suspect_from`` times; the task takes
        the claim with :meth:`fetched`."""
        manager = self.app.job_manager
        assert isinstance(manager, PatientJobManager)
        manager.claiming = (bot_id, suspect_from)

    def fetched(self, job_id: int) -> Fetched | None:
        """The claim job ``job_id``'s fetch made, once (``None``: it made none)."""
        manager = self.app.job_manager
        assert isinstance(manager, PatientJobManager)
        return manager.fetched.pop(job_id, None)

    async def claim(self, bot_id: int, update_id: int, job_id: int) -> Claim | None:
        """Job ``job_id``'s hold on ``update_id``, this start counted; ``None`` when another
        job claimed it first (a copy of the update)."""
        row = await self.app.connector.execute_query_one_async(
            _CLAIM, bot_id=bot_id, update_id=update_id, job_id=job_id
        )
        return _claim_in(row, job_id)

    async def unstart(self, bot_id: int, update_id: int, job_id: int) -> None:
        """Take back a start of job ``job_id`` that ended short of done in this worker's sight
        (a shutdown, an error): only starts whose process died count towards giving up."""
        await self.app.connector.execute_query_async(
            _UNSTART, bot_id=bot_id, update_id=update_id, job_id=job_id
        )

    async def give_up(self, bot_id: int, update_id: int, job_id: int) -> bool:
        """Mark ``update_id`` given up, with the updates job ``job_id`` gathered into its turn;
        ``True`` for the one call that did (it tells the user)."""
        rows = await self.app.connector.execute_query_all_async(
            _GIVE_UP, bot_id=bot_id, job_id=job_id
        )
        return any(int(row["update_id"]) == update_id for row in rows)

    async def reject(self, bot_id: int, update_id: int, update: dict[str, Any], error: str) -> None:
        """Journal an update that could not be read, for an operator (raises ``StoreError``)."""
        payload = json.dumps(update, separators=(",", ":"), ensure_ascii=False)
        try:
            await self.app.connector.execute_query_async(
                _REJECT, bot_id=bot_id, update_id=update_id, payload=payload, error=error
            )
        except (ConnectorException, OSError) as e:
            raise StoreError(f"cannot journal unparseable update {update_id}: {describe(e)}") from e

    async def notify_stop(self, chat_id: int, draft_id: int) -> None:
        """Tell every worker that the stop button of ``draft_id`` in ``chat_id`` was pressed."""
        try:
            await self.app.connector.execute_query_async(
                "SELECT pg_notify('botkit_stop', %(press)s)", press=f"{chat_id}:{draft_id}"
            )
        except (ConnectorException, OSError) as e:
            raise StoreError(f"cannot pass on a stop press: {describe(e)}") from e

    async def stop_presses(self) -> AsyncIterator[tuple[int, int]]:
        """Stop presses as they are announced: ``(chat_id, draft_id)``, until cancelled."""
        import psycopg

        try:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
            async with conn:
                await conn.execute("LISTEN botkit_stop")
                async for note in conn.notifies():
                    chat_id, _, draft_id = note.payload.partition(":")
                    yield int(chat_id), int(draft_id)
        except (psycopg.Error, OSError) as e:
            raise StoreError(f"stop presses: {e}") from e

    async def retry_stalled(self, *, by_heartbeat: bool = True) -> int:
        """Put back in the queue the jobs of workers whose liveness lock is gone and, with
        ``by_heartbeat``, of workers silent for ``stalled_after`` seconds; how many."""
        manager = self.app.job_manager
        rows = await dead_workers_jobs(
            self.app.connector, QUEUE, self.locks.witness, self.timings.lock_settle
        )
        dead = [Job.from_row(row) for row in rows]
        retried = await self.put_back(dead, "queue.dead_worker_job_retried")
        if by_heartbeat:
            stalled = await manager.get_stalled_jobs(
                queue=QUEUE, seconds_since_heartbeat=self.timings.stalled_after
            )
            retried += await self.put_back(list(stalled), "queue.stalled_job_retried")
        return retried

    async def put_back(self, jobs: list[Job], event: str) -> int:
        """Put back in the queue the listed running jobs of dead workers, logging ``event``,
        but not one that a live worker took meanwhile (another sweep put it back first); how
        many."""
        retried = 0
        for job in jobs:
            with _suppressed():
                row = await self.app.connector.execute_query_one_async(
                    _RETRY_UNLESS_TAKEN, job_id=job.id, worker_id=job.worker_id
                )
                if row["retried"]:
                    retried += 1
                    log.warning(event, job_id=job.id, lock=job.lock, worker_id=job.worker_id)
        return retried

    async def prune(self) -> None:
        """Forget claims older than Telegram keeps updates."""
        await self.app.connector.execute_query_async(_PRUNE, days=UPDATES_KEPT_DAYS)


class PatientJobManager(JobManager):
    """procrastinate's job manager, writing a job's end again while PostgreSQL is away.

    procrastinate gives up on the first failure: the job then stays "doing" under a worker
    that is alive and beating, so it is never retried as stalled, and its lock holds the
    conversation's later turns until that worker stops. Here the write is retried for
    ``JOB_END_PATIENCE`` seconds (a worker that stops meanwhile leaves it to the stalled-job
    retry, as a crash does).

    It takes jobs with ``botkit_fetch_job`` (migration 021) instead of procrastinate's fetch
    (a busy worker's next one as its last one ends, in one statement: migration 022), and a
    worker it registers holds its liveness lock (``locks``) until it unregisters.
    """

    def __init__(self, connector: Any, locks: WorkerLocks) -> None:
        super().__init__(connector)
        self.locks = locks
        self.claiming: tuple[int, int] | None = None
        """``(bot_id, suspect_from)`` once fetches claim their turn's update too."""
        self.fetched: dict[int, Fetched] = {}
        """The claims fetches made, by job id, until the job's task takes its own."""
        self.taken_ahead: deque[Job] = deque()
        """Jobs taken as others ended, for the worker's next fetches."""
        self.busy_fetch: tuple[list[str] | None, int] | None = None
        """``(queues, worker_id)`` of the worker's last fetch while it found a job (so it
        fetches again as soon as a job's slot frees); ``None`` while it waits for jobs."""
        self.stopping = False
        """Whether the worker stops taking jobs (it ends its running ones)."""

    async def fetch_job(self, queues: Iterable[str] | None, worker_id: int) -> Job | None:
        """Take the next job, as procrastinate does (by ``botkit_fetch_job``); claiming its
        update in the same statement when the worker asked for it
        (:meth:`TurnQueue.claim_at_fetch`). A job taken as another one ended comes first."""
        if self.taken_ahead:
            return self.taken_ahead.popleft()
        names = list(queues) if queues is not None else None
        job = await self._take(_FETCH, _FETCH_AND_CLAIM, queues=names, worker_id=worker_id)
        self.busy_fetch = (names, worker_id) if job is not None else None
        return job

    async def _take(self, plain: str, claiming: str, **params: Any) -> Job | None:
        """The job a fetch statement took: ``claiming`` (which claims a turn's update too)
        when fetches claim, else ``plain``."""
        if self.claiming is None:
            row = await self.connector.execute_query_one_async(plain, **params)
            return None if row["id"] is None else Job.from_row(row)
        bot_id, suspect_from = self.claiming
        row = await self.connector.execute_query_one_async(
            claiming, **params, bot_id=bot_id, task=TURN_TASK, suspect_from=suspect_from
        )
        if row["id"] is None:
            return None
        job = Job.from_row(row)
        if row["claimed_by"] is not None:
            assert job.id is not None
            self.fetched[job.id] = Fetched(int(row["claimed_update"]), _claim_in(row, job.id))
        return job

    async def finish_job(self, job: Job, status: Status, delete_job: bool) -> None:
        """Set a job to its final state, retrying while the database cannot be reached. A busy
        worker takes its next job on the same round trip."""
        await self._unclaim_untaken(job)
        if await self._end_then_take(job, status, delete_job):
            return
        outage = Outage(f"worker (ending job {job.id})")
        deadline = asyncio.get_running_loop().time() + JOB_END_PATIENCE
        while True:
            try:
                await super().finish_job(job, status, delete_job)
            except ConnectorException as e:
                lost = isinstance(e.__cause__, psycopg.OperationalError)
                if not lost or asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(outage.failed(e))
                continue
            outage.ok()
            return

    async def _end_then_take(self, job: Job, status: Status, delete_job: bool) -> bool:
        """End ``job`` and take the worker's next job in one statement, when the worker is
        busy (it fetches the moment ``job``'s slot frees) and not stopping; whether it ran.
        Any failure leaves the end to the patient path: the statement is one transaction."""
        if self.busy_fetch is None or self.stopping:
            return False
        queues, worker_id = self.busy_fetch
        try:
            taken = await self._take(
                _END_THEN_FETCH,
                _END_THEN_FETCH_AND_CLAIM,
                job_id=job.id,
                status=status.value,
                delete_job=delete_job,
                queues=queues,
                worker_id=worker_id,
            )
        except ConnectorException:
            return False
        if taken is None:
            self.busy_fetch = None  # the queue is empty: the worker waits for jobs now
        else:
            self.taken_ahead.append(taken)
        return True

    async def retry_job(self, job: Job, *args: Any, **kwargs: Any) -> None:
        """Put a job back in the queue (cut short by a shutdown), as procrastinate does."""
        await self._unclaim_untaken(job)
        await super().retry_job(job, *args, **kwargs)

    async def _unclaim_untaken(self, job: Job) -> None:
        """Take back the start its fetch counted for a job whose task never took its claim
        (cancelled before it began): the worker saw that start end, it is no death."""
        fetched = self.fetched.pop(job.id, None) if job.id is not None else None
        if fetched is None or fetched.claim is None or self.claiming is None:
            return
        with _suppressed():
            await self.connector.execute_query_async(
                _UNSTART, bot_id=self.claiming[0], update_id=fetched.update_id, job_id=job.id
            )

    async def register_worker(self) -> int:
        """Register a starting worker, then take its liveness lock (before it fetches jobs)."""
        self.stopping, self.busy_fetch = False, None
        self.taken_ahead.clear()  # a worker that ended without unregistering: swept as stalled
        worker_id = await super().register_worker()
        await self.locks.take(worker_id)
        return worker_id

    async def unregister_worker(self, worker_id: int) -> None:
        """Unregister a stopped worker and let its lock go (even if unregistering failed:
        what it left running is then put back at once)."""
        try:
            await self._put_back_taken_ahead()
            await super().unregister_worker(worker_id)
        finally:
            await self.locks.release(worker_id)

    async def _put_back_taken_ahead(self) -> None:
        """Put back the jobs taken as others ended that the worker stopped before starting
        (it stopped in between); one that fails goes back with the stalled jobs."""
        while self.taken_ahead:
            job = self.taken_ahead.popleft()
            with _suppressed():
                await self.retry_job(job)


class QuietWorker(Worker):
    """procrastinate's worker, without a copy of each job in log records nobody reads.

    Each of a job's four log records (loaded, started, ended, acknowledged) carries the job
    with its whole update (``Job.log_context``, a deep copy: 15 µs), built before the logger
    looks at its level; botkit turns procrastinate's loggers down to WARNING (it logs turns
    itself), so they were thrown away. They are procrastinate's own while its worker logs at
    INFO, and for a job that failed for good.
    """

    def stop(self) -> None:
        """Stop taking jobs: no job is taken ahead any more as running ones end."""
        manager = self.app.job_manager
        if isinstance(manager, PatientJobManager):
            manager.stopping = True
        super().stop()  # type: ignore[no-untyped-call]

    def _log_extra(
        self, action: str, context: JobContext | None, job_result: JobResult | None, **more: Any
    ) -> dict[str, Any]:
        if context is None or action in _LOUD_ACTIONS or _WORKER_LOG.isEnabledFor(logging.INFO):
            return super()._log_extra(action, context, job_result, **more)
        extra = super()._log_extra(action, None, job_result, **more)
        worker = cast(dict[str, Any], extra["worker"])
        return {**extra, "worker": {**worker, "job_id": context.job.id}}


_WORKER_LOG = logging.getLogger("procrastinate.worker")
_LOUD_ACTIONS = frozenset({"job_error", "task_not_found"})
"""The actions procrastinate's worker logs above INFO (ERROR)."""


def _claim_in(row: dict[str, Any], job_id: int) -> Claim | None:
    """Job ``job_id``'s claim in a row of ``_CLAIM`` or ``_FETCH_AND_CLAIM``; ``None`` when
    another job holds the update."""
    if int(row["claimed_by"]) != job_id:
        return None
    return Claim(
        starts=int(row["claim_starts"]),
        given_up=bool(row["claim_given_up"]),
        conversation=row["claim_conversation"],
        head=int(row["claim_head"]),
        waiting=bool(row["claim_waiting"]),
        choice=_choice_in(row),
        sender=_sender_in(row),
    )


def _choice_in(row: dict[str, Any]) -> Choice | None:
    """The conversation's choices read with a claim (``None``: none made)."""
    if not row["choice_stored"]:
        return None
    return Choice(
        row["claim_conversation"],
        int(row["choice_user_id"]),
        row["choice_model"],
        row["choice_persona"],
        row["choice_instructions"],
        row["choice_updated_at"],
    )


def _sender_in(row: dict[str, Any]) -> Sender | None:
    """The sender read with a claim, from the ``sender_*`` columns of its row."""
    if row["sender_id"] is None:
        return None
    user_id = int(row["sender_id"])
    record = None
    if row["sender_stored"]:
        record = UserRecord(
            user_id,
            row["sender_role"],
            row["sender_name"],
            row["sender_joined_at"].astimezone(UTC),
            blocked=bool(row["sender_blocked"]),
        )
    return Sender(user_id, record, row["sender_zone"])


def _pool(**options: Any) -> AsyncConnectionPool:
    """procrastinate's pool, its check (a round trip at every checkout) replaced by
    :class:`_RestedCheck`."""
    return AsyncConnectionPool(**{**options, "check": _RestedCheck()})


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    """Every query is a transaction of its own: procrastinate's and botkit's are each one
    statement, so no BEGIN and COMMIT round trips around it. JSON (the jobs' arguments) goes
    through orjson, set once on the connection (procrastinate's own ``json_dumps`` option
    sets it again on every cursor)."""
    await conn.set_autocommit(True)
    set_json_dumps(_json_dumps, conn)
    set_json_loads(orjson.loads, conn)


def _json_dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


class _RestedCheck:
    """Checks a connection before it is lent only when it rested ``CHECK_RESTED_AFTER`` s:
    one broken while in steady use fails its query (the callers retry) and is discarded when
    returned, so the round trip of procrastinate's check at every checkout buys nothing."""

    def __init__(self) -> None:
        self.lent: WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = WeakKeyDictionary()

    async def __call__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        now = time.monotonic()
        last, self.lent[conn] = self.lent.get(conn), now
        if last is None or now - last > CHECK_RESTED_AFTER:
            await AsyncConnectionPool.check_connection(conn)


def _update_id(job: Job) -> Any:
    return job.task_kwargs["update"]["update_id"]  # type: ignore[index,call-overload]


def _trace_args() -> dict[str, Any]:
    """The receiver's span context for the job (``trace``: W3C headers), when tracing."""
    carrier = tracing.tracer.carrier()
    return {"trace": carrier} if carrier else {}


async def _check_reachable(dsn: str) -> None:
    """One connection attempt, so an unreachable server is one sentence, not a 30 s wait."""
    import psycopg

    try:
        conn = await psycopg.AsyncConnection.connect(dsn, connect_timeout=10)
    except (psycopg.Error, OSError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"cannot reach PostgreSQL at BOTKIT_DATABASE_URL: {reason}") from e
    await conn.close()


class _suppressed:
    """Swallow (and log) what a best-effort call raises."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> bool:
        if error is None or isinstance(error, asyncio.CancelledError | KeyboardInterrupt):
            return False
        log.debug("queue.ignored_error", error=str(error))
        return isinstance(error, Exception)


class Outage:
    """Backoff while PostgreSQL is unreachable, logged once when it starts and once at its end."""

    def __init__(self, what: str, *, first: float = 0.5, longest: float = 15.0) -> None:
        self.what = what
        self.first = first
        self.longest = longest
        self.delay = first
        self.since: float | None = None

    def failed(self, error: BaseException) -> float:
        """Note a failure; the seconds to wait before trying again."""
        loop = asyncio.get_running_loop()
        if self.since is None:
            self.since = loop.time()
            log.warning("queue.database_lost", what=self.what, error=describe(error))
        delay, self.delay = self.delay, min(self.delay * 2, self.longest)
        return delay

    def ok(self) -> None:
        """Note a success: an outage, if there was one, is over."""
        if self.since is None:
            return
        lasted = asyncio.get_running_loop().time() - self.since
        log.info("queue.database_back", what=self.what, seconds=round(lasted, 1))
        self.since, self.delay = None, self.first


def describe(error: BaseException) -> str:
    """One line saying what failed: procrastinate's "Database error." names its cause."""
    cause = error.__cause__ if isinstance(error, ConnectorException) else None
    text = str(cause or error).strip() or type(error).__name__
    return text.splitlines()[0]
