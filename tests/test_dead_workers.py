"""A worker process that dies gives its jobs back at once, by its liveness lock
(``runtime.liveness``), not after BOTKIT_STALLED_TIMEOUT; a live one, however frozen, keeps
them, and a worker holding no lock (an older botkit's) is judged by its heartbeats alone.
Real ``python -m botkit work`` processes SIGKILLed or SIGSTOPped, real PostgreSQL, the fakes."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]
import pytest
from conftest import _find_binaries, _Server, with_database
from structlog.testing import capture_logs
from test_scaleout import cut_off, killed_at_end, queued, queued_bot, until, worker_process

from botkit.runtime.liveness import LOCK_SPACE, LONGEST_RETRY, SETTLE
from botkit.runtime.queue import QueueTimings, TurnQueue
from botkit.stores.migrate import migrate
from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer
from botkit.testing.anthropic import FakeRequest

LONG_STALL = 60.0
"""BOTKIT_STALLED_TIMEOUT where the heartbeats must not be what finds a dead worker."""


def held_until_released(claude: FakeAnthropicServer) -> asyncio.Event:
    """Make every LLM call wait until the returned event is set; then echo."""
    release = asyncio.Event()

    async def held(request: FakeRequest) -> FakeReply:
        await release.wait()
        return FakeReply.text(f"echo: {request.last_user_text()}")

    claude.responder = held
    return release


async def workers_up(db: str) -> int:
    return int(await sql(db, "SELECT count(*) FROM procrastinate_workers"))


async def workers_recorded(db: str) -> int:
    return int(await sql(db, "SELECT count(*) FROM botkit_worker_locks"))


async def test_a_killed_workers_turns_finish_without_waiting_for_the_stall_timeout(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    release = held_until_released(claude)
    users = [211, 212, 213]
    receiver = queued_bot(claude, telegram, tmp_path, db, stalled_timeout=LONG_STALL)
    survivor = queued_bot(claude, telegram, tmp_path / "survivor", db, stalled_timeout=LONG_STALL)
    doomed = worker_process(telegram, claude, tmp_path, db, stalled=LONG_STALL)
    async with queued(receiver, work=False), killed_at_end(doomed):
        for user in users:
            telegram.send_text(user, f"question of {user}")
        await until(lambda: len(claude.requests) == len(users), timeout=60)  # all on doomed
        async with queued(survivor, receive=False):
            await until_async(lambda: workers_up(db), 2)
            doomed.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            release.set()
            for user in users:
                await telegram.wait_for_messages(user, 1, timeout=LONG_STALL / 3)
            took = time.monotonic() - killed_at
            await asyncio.sleep(0.5)
    for user in users:
        assert [m.text for m in telegram.sent_messages(user)] == [f"echo: question of {user}"]
    assert took < 10, f"the last reply came {took:.1f} s after the kill"
    assert len(claude.requests) == 2 * len(users)


async def test_a_frozen_worker_keeps_its_turns(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    """SIGSTOP (nothing of the process runs: a blocked event loop, a long GC, swapping) for
    longer than the lock checks' and heartbeats' interval, shorter than the stall timeout."""
    stalled = 20.0  # heartbeats every 5 s
    release = held_until_released(claude)
    users = [221, 222]
    receiver = queued_bot(claude, telegram, tmp_path, db, stalled_timeout=stalled)
    other = queued_bot(claude, telegram, tmp_path / "other", db, stalled_timeout=stalled)
    frozen = worker_process(telegram, claude, tmp_path, db, stalled=stalled)
    async with queued(receiver, work=False), killed_at_end(frozen):
        for user in users:
            telegram.send_text(user, f"question of {user}")
        await until(lambda: len(claude.requests) == len(users), timeout=60)  # all on frozen
        with capture_logs() as logs:
            async with queued(other, receive=False):
                await until_async(lambda: workers_up(db), 2)
                frozen.send_signal(signal.SIGSTOP)
                await asyncio.sleep(8)
                frozen.send_signal(signal.SIGCONT)
                release.set()
                for user in users:
                    await telegram.wait_for_messages(user, 1, timeout=30)
                await asyncio.sleep(1)
    for user in users:
        assert [m.text for m in telegram.sent_messages(user)] == [f"echo: question of {user}"]
    assert len(claude.requests) == len(users), "no turn ran twice"
    assert not [e for e in logs if "retried" in e["event"]]


async def test_after_an_outage_a_worker_holds_its_lock_again(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    db: str,
    postgres_dsn: str,
) -> None:
    """Its connections dropped, procrastinate's worker starts again under a new id: that id's
    lock is held and recorded, the old one's forgotten; stopped, the worker leaves no record."""
    bot = queued_bot(claude, telegram, tmp_path, db)  # heartbeats every 0.5 s: it restarts
    async with queued(bot):
        await until_async(lambda: locks_in_order(db), (1, 1))
        first = await sql(db, "SELECT worker_id FROM botkit_worker_locks")
        await cut_off(db, postgres_dsn, allow=False)
        await asyncio.sleep(3)
        await cut_off(db, postgres_dsn, allow=True)
        # procrastinate usually starts its worker again under a new id, the old one's release
        # coming a moment later; or it rides the outage out under the same id. Either way the
        # records settle on the live worker's id alone, with its lock held.
        await until_async(lambda: records_and_live(db), "settled", timeout=30)
        telegram.send_text(31, "after the outage")
        await telegram.wait_for_messages(31, 1, timeout=30)
        assert await records_and_live(db) == "settled"
        if await sql(db, "SELECT worker_id FROM botkit_worker_locks") != first:
            held = (
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2"
                " AND classid = $1::bigint::oid AND objid = $2::bigint::oid"
            )
            assert await sql(db, held, LOCK_SPACE, first) == 0
    assert await workers_recorded(db) == 0


@pytest.fixture
async def crashable_db() -> AsyncIterator[tuple[str, str]]:
    """A database with botkit's migrations on a server of this test's own (it is crashed),
    and that server's admin URL."""
    binaries = _find_binaries()
    if binaries is None:
        pytest.skip("PostgreSQL not found (initdb/pg_ctl)")
    server = _Server(binaries)
    try:
        await asyncio.to_thread(server.start)
        admin = await asyncpg.connect(server.dsn)
        try:
            await admin.execute('CREATE DATABASE "crashed"')
        finally:
            await admin.close()
        db = with_database(server.dsn, "crashed")
        await migrate(db)
        yield db, server.dsn
    finally:
        await asyncio.to_thread(server.stop)


async def crash_restart(db: str, admin_dsn: str, recovery: float) -> None:
    """SIGKILL one server process (not the postmaster): PostgreSQL resets shared memory,
    dropping every session and every advisory lock, and starts again without a restart
    (``pg_postmaster_start_time()`` unchanged). Connections to ``db`` are refused for
    ``recovery`` seconds, as while a crashed server replays its WAL (here there is none)."""
    name = urlsplit(db).path.lstrip("/")
    victim = await asyncpg.connect(admin_dsn)
    started = await victim.fetchval("SELECT pg_postmaster_start_time()")
    await victim.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    os.kill(await victim.fetchval("SELECT pg_backend_pid()"), signal.SIGKILL)
    victim.terminate()
    await until_async(lambda: server_started(admin_dsn), started, timeout=30, every=0.2)
    await asyncio.sleep(recovery)
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    finally:
        await admin.close()


async def server_started(db: str) -> Any:
    try:
        return await sql(db, "SELECT pg_postmaster_start_time()")
    except (OSError, asyncpg.PostgresError):
        return None


async def test_a_crash_restart_of_postgres_runs_no_turn_twice(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    crashable_db: tuple[str, str],
) -> None:
    """Every lock is dropped at once, the server's start time stays: live workers re-take
    their locks before any sweep judges them, so the turns in flight are not run again."""
    db, admin_dsn = crashable_db
    release = held_until_released(claude)
    users = [241, 242, 243, 244]
    receiver = queued_bot(claude, telegram, tmp_path, db, stalled_timeout=LONG_STALL)
    workers = [worker_process(telegram, claude, tmp_path, db, stalled=LONG_STALL) for _ in "12"]
    async with queued(receiver, work=False), killed_at_end(workers[0]), killed_at_end(workers[1]):
        await until_async(lambda: workers_recorded(db), 2, timeout=60)
        for user in users:
            telegram.send_text(user, f"question of {user}")
        await until(lambda: len(claude.requests) == len(users), timeout=60)
        await asyncio.sleep(SETTLE + 1)  # every sweep judges locks: the steady state
        await crash_restart(db, admin_dsn, recovery=5)
        await asyncio.sleep(SETTLE + LONGEST_RETRY + 3)  # sweeps judge locks again
        assert len(claude.requests) == len(users), "a turn in flight was run again"
        release.set()
        for user in users:
            await telegram.wait_for_messages(user, 1, timeout=LONG_STALL / 2)
        await asyncio.sleep(1)
    for user in users:
        assert [m.text for m in telegram.sent_messages(user)] == [f"echo: question of {user}"]
    assert len(claude.requests) == len(users)


async def records_and_live(db: str) -> str:
    """ "settled" when the one record is the live worker's (the freshest heartbeat) and its lock
    is held; else what is seen."""
    ids = await sql(db, "SELECT array_agg(worker_id ORDER BY worker_id) FROM botkit_worker_locks")
    freshest = "SELECT id FROM procrastinate_workers ORDER BY last_heartbeat DESC LIMIT 1"
    live = await sql(db, freshest)
    held = (await locks_in_order(db))[1]
    return "settled" if ids == [live] and held == 1 else f"records {ids}, live {live}, held {held}"


async def locks_in_order(db: str) -> tuple[int, int]:
    """(records, records whose lock is held by a worker procrastinate knows)."""
    records = await workers_recorded(db)
    query = (
        "SELECT count(*) FROM botkit_worker_locks w JOIN procrastinate_workers p"
        " ON p.id = w.worker_id JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted"
        " AND l.objsubid = 2 AND l.classid = $1::bigint::oid"
        " AND l.objid = w.worker_id::oid"
    )
    return records, int(await sql(db, query, LOCK_SPACE))


# --- the sweep, in this process -------------------------------------------------------------


async def test_a_worker_holding_no_lock_is_judged_by_its_heartbeats_alone(db: str) -> None:
    """An older botkit's worker (a fresh heartbeat, a running job, no lock recorded) keeps its
    job; a recorded worker whose lock is gone loses its job at the next sweep."""
    queue = await open_queue(db)
    try:
        await settled_witness(queue)
        older = await fake_worker(db)
        older_job = await running_job(queue, db, older, update_id=1)
        dead = await fake_worker(db)
        dead_job = await running_job(queue, db, dead, update_id=2)
        await sql(
            db, "INSERT INTO botkit_worker_locks VALUES ($1, pg_postmaster_start_time())", dead
        )
        assert await queue.retry_stalled() == 1
        assert await job_status(db, older_job) == "doing"
        assert await job_status(db, dead_job) == "todo"
        assert await workers_recorded(db) == 1, "the dead worker's record is forgotten"
        assert await queue.retry_stalled() == 0
    finally:
        await queue.close()


async def test_a_sweep_judges_locks_once_its_own_lock_connection_settled(db: str) -> None:
    """Without a lock connection of its own, or with one younger than ``lock_settle`` (as
    after a crash-restart, which every live keeper needs a moment to catch up with), a sweep
    leaves recorded workers' jobs alone; then it judges them."""
    queue = await open_queue(db)
    try:
        dead = await fake_worker(db)
        job = await running_job(queue, db, dead, update_id=6)
        await sql(
            db, "INSERT INTO botkit_worker_locks VALUES ($1, pg_postmaster_start_time())", dead
        )
        assert await queue.retry_stalled() == 0, "no witness"
        await queue.app.job_manager.register_worker()
        assert await queue.retry_stalled() == 0, "a witness not settled yet"
        assert await job_status(db, job) == "doing"
        await asyncio.sleep(QUICK_SETTLE + 0.1)
        assert await queue.retry_stalled() == 1
        assert await job_status(db, job) == "todo"
    finally:
        await queue.close()


async def test_a_held_lock_whose_record_was_deleted_is_recorded_again(db: str) -> None:
    """A sweep that read pg_locks just before a reconnecting keeper took its lock again may
    delete the record that keeper just wrote: the keeper notices and records it again, so
    its worker is still watched by its lock."""
    queue = await open_queue(db)
    try:
        worker_id = await queue.app.job_manager.register_worker()
        with capture_logs() as logs:
            await sql(db, "DELETE FROM botkit_worker_locks WHERE worker_id = $1", worker_id)
            await until_async(lambda: workers_recorded(db), 1, timeout=5)
        assert await has_lock(db, worker_id)
        assert [e["event"] for e in logs] == ["queue.liveness_record_restored"]
    finally:
        await queue.close()


async def test_a_dead_workers_job_taken_again_meanwhile_is_not_put_back_twice(db: str) -> None:
    """Two sweeps (by lock, by heartbeat; two processes) may list the same job: once the
    first put it back and a live worker took it, the second leaves it with that worker."""
    queue = await open_queue(db)
    try:
        dead, live = await fake_worker(db), await fake_worker(db)
        job = await running_job(queue, db, dead, update_id=7)
        stalled = await queue.app.job_manager.get_stalled_jobs(seconds_since_heartbeat=0)
        listed = [j for j in stalled if j.id == job]  # as both sweeps list it
        assert [j.worker_id for j in listed] == [dead]
        assert await queue.put_back(listed, "first") == 1
        await sql(
            db,
            "UPDATE procrastinate_jobs SET status = 'doing', worker_id = $1 WHERE id = $2",
            live,
            job,
        )
        assert await queue.put_back(listed, "second") == 0
        assert await job_status(db, job) == "doing"
    finally:
        await queue.close()


async def test_a_dead_workers_job_goes_back_even_with_a_copy_of_its_update_queued(
    db: str,
) -> None:
    """Telegram delivered the update again while its job ran (the receiver restarted before
    confirming it): the copy waits behind the job's lock. Its worker dead, the job goes back
    in the queue (procrastinate's one-queued-copy index refused it before, so the job stayed
    'doing' under a dead worker and held the conversation for ever); the copy, which would
    only find the update claimed by the job, is dropped."""
    queue = await open_queue(db)
    try:
        dead = await fake_worker(db)
        job = await running_job(queue, db, dead, update_id=8)
        update = {"update_id": 8, "message": {"text": "x"}}
        await queue.defer(1, 8, update, "user:8")  # the copy, queued behind the running job
        copies = "SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock = $1"
        assert await sql(db, copies, "update:1:8") == 2
        stalled = await queue.app.job_manager.get_stalled_jobs(seconds_since_heartbeat=0)
        assert await queue.put_back([j for j in stalled if j.id == job], "put back") == 1
        assert await job_status(db, job) == "todo"
        assert await sql(db, copies, "update:1:8") == 1
    finally:
        await queue.close()


async def test_a_registered_workers_lock_lives_with_its_connection(db: str) -> None:
    """A registered worker's job stays while its lock is held; unregistered, its record and
    lock are gone."""
    queue = await open_queue(db)
    try:
        worker_id = await queue.app.job_manager.register_worker()
        job = await running_job(queue, db, worker_id, update_id=3)
        assert await lock_holder(db, worker_id) is not None
        assert await queue.retry_stalled() == 0
        assert await job_status(db, job) == "doing"
        await sql(db, "UPDATE procrastinate_jobs SET status = 'succeeded' WHERE id = $1", job)
        await queue.app.job_manager.unregister_worker(worker_id)
        assert await lock_holder(db, worker_id) is None
        assert await workers_recorded(db) == 0
    finally:
        await queue.close()


async def test_a_lock_lost_while_its_process_lives_is_taken_again(db: str) -> None:
    """The connection holding the lock ends (an operator, a reset): its jobs are put back (they
    may run twice: at least once), one line is logged, and the lock is taken again. Another
    process's sweep finds it: this one's waits for its own new connection to settle."""
    queue, judge = await open_queue(db), await open_queue(db)
    try:
        await settled_witness(judge)
        worker_id = await queue.app.job_manager.register_worker()
        job = await running_job(queue, db, worker_id, update_id=4)
        with capture_logs() as logs:
            await sql(db, "SELECT pg_terminate_backend($1)", await lock_holder(db, worker_id))
            # Swept often: the lock is taken again a moment after its connection ended.
            await until_async(lambda: judge.retry_stalled(), 1, every=0.01)
            assert await job_status(db, job) == "todo"
            await until_async(lambda: has_lock(db, worker_id), True)
        assert [e["event"] for e in logs].count("queue.liveness_lock_lost") == 1
        assert await workers_recorded(db) == 2
    finally:
        await queue.close()
        await judge.close()


async def test_locks_lost_to_a_server_restart_are_no_deaths(db: str) -> None:
    """A record made before the server (re)started is not judged by its lock: a restart
    drops every lock at once, live workers' too."""
    queue = await open_queue(db)
    try:
        await settled_witness(queue)
        older = await fake_worker(db)
        job = await running_job(queue, db, older, update_id=5)
        before = "pg_postmaster_start_time() - interval '1 minute'"
        await sql(db, f"INSERT INTO botkit_worker_locks VALUES ($1, {before})", older)
        assert await queue.retry_stalled() == 0
        assert await job_status(db, job) == "doing"
    finally:
        await queue.close()


QUICK_SETTLE = 0.5
"""``lock_settle`` of the sweeps in this process."""


async def open_queue(db: str) -> TurnQueue:
    timings = QueueTimings(heartbeat=15, stalled_after=LONG_STALL, lock_settle=QUICK_SETTLE)
    queue = TurnQueue(db, timings=timings)

    async def turn(job_id: int, update: dict[str, Any], attempts: int) -> None:
        raise AssertionError("no job runs here")

    queue.register(turn)
    await queue.open()
    return queue


async def settled_witness(queue: TurnQueue) -> int:
    """A worker of ``queue``'s process, registered (its lock held) ``QUICK_SETTLE`` s ago:
    the process's sweeps judge other workers' locks from then on."""
    worker_id = await queue.app.job_manager.register_worker()
    await asyncio.sleep(QUICK_SETTLE + 0.1)
    return worker_id


async def fake_worker(db: str) -> int:
    """A procrastinate worker row with a fresh heartbeat, as any worker registers."""
    return int(await sql(db, "SELECT procrastinate_register_worker_v1()"))


async def running_job(queue: TurnQueue, db: str, worker_id: int, *, update_id: int) -> int:
    """A queued turn, taken by ``worker_id`` (status ``doing``)."""
    update = {"update_id": update_id, "message": {"text": "x"}}
    await queue.defer(1, update_id, update, f"user:{update_id}")
    return int(
        await sql(
            db,
            "UPDATE procrastinate_jobs SET status = 'doing', worker_id = $1"
            " WHERE queueing_lock = $2 RETURNING id",
            worker_id,
            f"update:1:{update_id}",
        )
    )


async def job_status(db: str, job_id: int) -> str:
    return str(await sql(db, "SELECT status FROM procrastinate_jobs WHERE id = $1", job_id))


async def lock_holder(db: str, worker_id: int) -> int | None:
    """The server process holding ``worker_id``'s liveness lock, if one does."""
    query = (
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
        " AND classid = $1::bigint::oid AND objid = $2::bigint::oid"
    )
    return await sql(db, query, LOCK_SPACE, worker_id)  # type: ignore[no-any-return]


async def has_lock(db: str, worker_id: int) -> bool:
    return await lock_holder(db, worker_id) is not None


async def sql(db: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(db)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def until_async(
    value: Any,
    expected: Any,
    timeout: float = 20.0,  # noqa: ASYNC109
    every: float = 0.1,
) -> None:
    """Wait until ``await value()`` equals ``expected`` (polled ``every`` s), or fail."""
    deadline = time.monotonic() + timeout
    while (got := await value()) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"{got!r}, not {expected!r}, after {timeout}s")
        await asyncio.sleep(every)
