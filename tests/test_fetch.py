"""The queue's fetch (``botkit_fetch_job``, migration 021): procrastinate's order and locks,
with a plan that stays right whatever the statistics were when the connection made it."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator

import asyncpg
import pytest
from procrastinate.jobs import Status

from botkit.runtime.queue import PatientJobManager, QuietWorker, TurnQueue

_BOTKIT = "SELECT (botkit_fetch_job({queues}, NULL)).id"
_PROCRASTINATE = "SELECT (procrastinate_fetch_job_v2({queues}, NULL)).id"
_JOBS = """
    INSERT INTO procrastinate_jobs (queue_name, task_name, lock, args, status)
    SELECT 'botkit', 'botkit.chore', 'user:' || ({conversation}), '{{}}', 'todo'
    FROM generate_series(1, {jobs}) g"""


@pytest.mark.parametrize("seed", range(6))
async def test_jobs_come_out_in_procrastinates_order(db: str, seed: int) -> None:
    """Mixed queues, priorities, schedules, locks (running, waiting, none): fetched to the end,
    with jobs finishing on the way, both fetches take the same jobs in the same order."""
    conn = await asyncpg.connect(db)
    try:
        await conn.executemany(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, priority, status,"
            " scheduled_at, args) VALUES ($1, 'botkit.chore', $2, $3, $4,"
            " now() + make_interval(secs => $5), '{}')",
            _mixed_jobs(random.Random(seed)),
        )
        orders = [await _fetch_all(conn, fetch) for fetch in (_PROCRASTINATE, _BOTKIT)]
    finally:
        await conn.close()
    assert orders[0] == orders[1]
    assert sum(job is not None for job in orders[0]) > 25, "too few jobs taken to tell"


def _mixed_jobs(rng: random.Random) -> list[tuple[str, str | None, int, str, float]]:
    jobs: list[tuple[str, str | None, int, str, float]] = []
    for _ in range(80):
        queue = rng.choice(["botkit", "botkit", "botkit", "other"])
        lock = rng.choice([None, *(f"user:{n}" for n in range(12))])
        status = rng.choice(["todo"] * 8 + ["doing", "succeeded"])
        if status == "doing" and lock is not None:
            lock = f"running:{len(jobs)}"  # procrastinate allows one running job a lock
        delay = rng.choice([-60.0] * 9 + [3600.0])  # due, or later (holding its lock)
        jobs.append((queue, lock, rng.choice([0, 0, 1, 5]), status, delay))
    jobs += [("botkit", "user:3", 0, "doing", -60.0)]  # a turn running in conversation 3
    return jobs


async def _fetch_all(conn: asyncpg.Connection, fetch: str) -> list[int | None]:
    """Fetch until nothing is left, each fetch's job id (``None``: none free) in order; two
    taken jobs in three finish at once, the third when a fetch finds nothing free. Rolled
    back, so the next function starts from the same queue."""
    taken: list[int | None] = []
    held: list[int] = []
    transaction = conn.transaction()
    await transaction.start()
    try:
        for step in range(300):
            queues = "ARRAY['botkit']::varchar[]" if step % 4 else "NULL"
            job = await conn.fetchval(fetch.format(queues=queues))
            taken.append(job)
            if job is None and not held and queues == "NULL":
                break
            if job is None:
                if held:
                    await conn.execute("DELETE FROM procrastinate_jobs WHERE id = $1", held.pop(0))
            elif step % 3:
                await conn.execute("DELETE FROM procrastinate_jobs WHERE id = $1", job)
            else:
                held.append(job)
    finally:
        await transaction.rollback()
    return taken


@pytest.mark.parametrize(
    ("conversation", "jobs", "fetches", "bound"),
    [
        # 100 conversations, their messages spread: each fetch finds a free one at once
        ("g % 100", 300, 20, 4 * 20 * 300),
        # a conversation's six messages in a row, as a burst arrives: each fetch passes over
        # the earlier conversations' waiting messages (7,882 rows; 348,497 with
        # procrastinate's fetch under migration 020's plan, 8 million under its own)
        ("g / 6", 600, 40, 20_000),
    ],
    ids=["spread", "in-a-row"],
)
async def test_a_fetch_planned_while_the_queue_was_empty_reads_it_by_its_indexes(
    db: str, conversation: str, jobs: int, fetches: int, bound: int
) -> None:
    """A worker polls the empty queue, and its connection keeps the fetch's plan: made for an
    empty table, procrastinate's read the whole queue for every waiting job once the queue
    filled (20 ms a fetch with 600 jobs queued, instead of 0.4)."""
    fetch = _BOTKIT.format(queues="ARRAY['botkit']::varchar[]")
    worker = await asyncpg.connect(db)
    receiver = await asyncpg.connect(db)
    try:
        await receiver.execute("VACUUM ANALYZE procrastinate_jobs")  # as autovacuum does
        for _ in range(10):  # a plan PL/pgSQL keeps for the connection
            assert await worker.fetchval(fetch) is None
        await receiver.execute(_JOBS.format(conversation=conversation, jobs=jobs))
        async with worker.transaction():
            for _ in range(fetches):  # later ones skip the conversations taken before them
                assert await worker.fetchval(fetch) is not None
            read = await worker.fetchval(
                "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
                " WHERE relname = 'procrastinate_jobs'"
            )
    finally:
        await worker.close()
        await receiver.close()
    assert read < bound, f"{fetches} fetches read {read} rows"


# --- a job's end and the next fetch on one round trip (migration 022) ------------------------

_TURNS = """
    INSERT INTO procrastinate_jobs (queue_name, task_name, lock, args, status)
    SELECT 'botkit', 'botkit.turn', 'user:1', jsonb_build_object('update', jsonb_build_object(
        'update_id', 100 + g)), 'todo'
    FROM generate_series(1, $1) g"""


@pytest.fixture
async def queue(db: str) -> AsyncIterator[TurnQueue]:
    """botkit's queue on the migrated database, open."""
    queue = TurnQueue(db)
    await queue.open()
    try:
        yield queue
    finally:
        await queue.close()


async def _jobs(conn: asyncpg.Connection) -> list[tuple[int, str, int | None, int]]:
    rows = await conn.fetch(
        "SELECT id, status::text, worker_id, attempts FROM procrastinate_jobs ORDER BY id"
    )
    return [tuple(row) for row in rows]


async def test_a_busy_worker_takes_its_conversations_next_turn_as_the_last_one_ends(
    db: str, queue: TurnQueue
) -> None:
    """The next fetch rides on a job's end: the end comes first (the conversation's next turn,
    held while the job ran, is the one taken), the next fetch gets that job without a query,
    and its update is claimed as a fetch claims it."""
    conn = await asyncpg.connect(db)
    try:
        await conn.execute(_TURNS, 2)
        queue.claim_at_fetch(bot_id=5, suspect_from=2)
        manager = queue.app.job_manager
        assert isinstance(manager, PatientJobManager)
        worker = await manager.register_worker()
        first = await manager.fetch_job(["botkit"], worker)
        assert first is not None and first.id is not None
        await manager.finish_job(first, Status.SUCCEEDED, delete_job=True)
        [(second, status, by, _)] = await _jobs(conn)
        assert (second, status, by) == (first.id + 1, "doing", worker)
        taken = await manager.fetch_job(["botkit"], worker)  # a query would find none free
        assert taken is not None and taken.id == second
        fetched = queue.fetched(second)
        assert fetched is not None and fetched.update_id == 102
        assert fetched.claim is not None and fetched.claim.starts == 1
        await manager.unregister_worker(worker)
    finally:
        await conn.close()


async def test_a_worker_waiting_for_jobs_or_stopping_takes_none_as_a_job_ends(
    db: str, queue: TurnQueue
) -> None:
    """Only a busy worker fetches the moment a slot frees: one whose last fetch found nothing
    polls, and a stopping one takes nothing more. A job taken ahead that a worker stopped
    before starting goes back to the queue when it unregisters."""
    conn = await asyncpg.connect(db)
    try:
        manager = queue.app.job_manager
        assert isinstance(manager, PatientJobManager)
        worker = await manager.register_worker()
        await conn.execute(_TURNS, 1)
        first = await manager.fetch_job(["botkit"], worker)
        assert first is not None and await manager.fetch_job(["botkit"], worker) is None
        await conn.execute(_TURNS.replace("user:1", "user:2"), 1)
        await manager.finish_job(first, Status.SUCCEEDED, delete_job=True)
        assert [status for _, status, _, _ in await _jobs(conn)] == ["todo"]  # left for a poll

        second = await manager.fetch_job(["botkit"], worker)
        await conn.execute(_TURNS.replace("user:1", "user:3"), 2)
        QuietWorker(app=queue.app, queues=["botkit"]).stop()
        assert second is not None
        await manager.finish_job(second, Status.SUCCEEDED, delete_job=True)
        assert [status for _, status, _, _ in await _jobs(conn)] == ["todo", "todo"]

        manager.stopping = False
        third = await manager.fetch_job(["botkit"], worker)
        assert third is not None
        await manager.finish_job(third, Status.SUCCEEDED, delete_job=True)  # takes the fourth
        [(fourth, status, _, _)] = await _jobs(conn)
        assert status == "doing" and manager.taken_ahead[0].id == fourth
        await manager.unregister_worker(worker)  # stopped before it started the fourth
        assert await _jobs(conn) == [(fourth, "todo", None, 1)]
    finally:
        await conn.close()


async def test_a_fetch_reads_the_senders_record_and_takes_a_turn_whose_sender_it_cannot(
    db: str, queue: TurnQueue
) -> None:
    """The fetch's claim reads its sender's stored record and time zone; a sender id that is
    no integer PostgreSQL can take reads as no sender, instead of failing the fetch (and every
    fetch after it)."""
    conn = await asyncpg.connect(db)
    try:
        await conn.execute("INSERT INTO botkit_users (user_id, role) VALUES (7, 'member')")
        await conn.execute("INSERT INTO botkit_timezones VALUES (7, 'Asia/Tokyo')")
        for n, sender in enumerate([7, "seven", 2**63], 1):
            update = {"update_id": n, "message": {"from": {"id": sender}, "text": "hi"}}
            await conn.execute(
                "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, args, status)"
                " VALUES ('botkit', 'botkit.turn', $1, jsonb_build_object('update', $2::jsonb),"
                " 'todo')",
                f"user:{n}",
                json.dumps(update),
            )
        queue.claim_at_fetch(bot_id=5, suspect_from=2)
        manager = queue.app.job_manager
        assert isinstance(manager, PatientJobManager)
        worker = await manager.register_worker()
        claims = []
        for _ in range(3):
            job = await manager.fetch_job(["botkit"], worker)
            assert job is not None and job.id is not None
            fetched = queue.fetched(job.id)
            assert fetched is not None
            claims.append(fetched.claim)
        await manager.unregister_worker(worker)
    finally:
        await conn.close()
    first = claims[0].sender if claims[0] else None
    assert first is not None and first.record is not None
    assert (first.user_id, first.record.role, first.zone) == (7, "member", "Asia/Tokyo")
    assert [claim.sender if claim else "unclaimed" for claim in claims[1:]] == [None, None]
