"""The queue's fetch, with its plan made on the empty queue and with fresh statistics.

A worker polls the queue while it is empty, and PL/pgSQL keeps the plan its connection made
then. For each queue shape and each fetch (procrastinate's ``procrastinate_fetch_job_v2`` as
botkit's migrations leave it, and botkit's ``botkit_fetch_job``, migration 021), on a fresh
database: either ``VACUUM ANALYZE`` of the empty queue and 10 polls on the worker's connection
("trap"), or the jobs queued first and then ``ANALYZE`` ("fresh"); then ``--fetches`` fetches
in one transaction, each taking a job whose conversation the earlier ones did not take. Prints
ms a fetch and the rows read (``pg_stat_xact_user_tables``) per run, and botkit's time as a
ratio to procrastinate's with fresh statistics (procrastinate's best case, the yardstick).

    python bench/fetch_plan.py            # about a minute; --runs, --dsn
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from scaleout import Cluster, fresh_database

FETCHES = {
    "procrastinate": "SELECT (procrastinate_fetch_job_v2(ARRAY['botkit']::varchar[], NULL)).id",
    "botkit": "SELECT (botkit_fetch_job(ARRAY['botkit']::varchar[], NULL)).id",
}
SHAPES = {
    # name: (conversation of job g, jobs, fetches)
    "600 spread": ("g % 100", 600, 60),
    "600 in a row": ("g / 6", 600, 40),
    "3000 in a row": ("g / 6", 3000, 100),
}
_JOBS = """
    INSERT INTO procrastinate_jobs (queue_name, task_name, lock, args, status)
    SELECT 'botkit', 'botkit.chore', 'user:' || ({conversation}), '{{}}', 'todo'
    FROM generate_series(1, {jobs}) g"""
_READ = """
    SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables
    WHERE relname = 'procrastinate_jobs'"""


async def copy_of(admin: str, template: str, name: str) -> str:
    """A new database ``name`` copied from ``template``; its URL."""
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await conn.close()
    return urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))


async def one_run(url: str, fetch: str, shape: str, trap: bool) -> tuple[float, int]:
    """ms a fetch and rows read, on a fresh copy of the migrated queue."""
    conversation, jobs, fetches = SHAPES[shape]
    worker = await asyncpg.connect(url)
    receiver = await asyncpg.connect(url)
    try:
        await receiver.execute("VACUUM ANALYZE procrastinate_jobs")
        if trap:
            for _ in range(10):
                await worker.fetchval(fetch)
        await receiver.execute(_JOBS.format(conversation=conversation, jobs=jobs))
        if not trap:
            await receiver.execute("ANALYZE procrastinate_jobs")
        async with worker.transaction():
            start = time.perf_counter()
            for _ in range(fetches):
                assert await worker.fetchval(fetch) is not None
            ms = (time.perf_counter() - start) / fetches * 1000
            read = int(await worker.fetchval(_READ))
    finally:
        await worker.close()
        await receiver.close()
    return ms, read


async def measure(admin: str, runs: int) -> None:
    template_url = await fresh_database(admin)
    template = urlsplit(template_url).path.lstrip("/")
    print(f"  fetch_plan: {runs} runs each, worker and receiver on one connection each")
    for shape in SHAPES:
        yardstick: list[float] = []
        for name, fetch in FETCHES.items():
            for trap in (False, True):
                times, reads = [], set()
                for _ in range(runs):
                    url = await copy_of(admin, template, f"{template}_run")
                    ms, read = await one_run(url, fetch, shape, trap)
                    times.append(ms)
                    reads.add(read)
                if name == "procrastinate" and not trap:
                    yardstick = times
                state = "trap " if trap else "fresh"
                ratio = statistics.median(times) / statistics.median(yardstick)
                spread = ", ".join(f"{t:.2f}" for t in times)
                rows = "/".join(map(str, sorted(reads)))
                print(
                    f"  {shape:14} {name:13} {state}  ms a fetch {spread}  rows read {rows}"
                    f"  ({ratio:.2f}x fresh procrastinate)"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--dsn", help="a PostgreSQL URL that may create databases")
    args = parser.parse_args()
    cluster = None if args.dsn else Cluster()
    try:
        if cluster is not None:
            cluster.start()
        asyncio.run(measure(args.dsn or cluster.dsn, args.runs))  # type: ignore[union-attr]
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
