"""Scale-out: one receiver and 1, 2 or 3 workers on PostgreSQL, against one process.

600 messages from 200 users (3 each, sent at once), fake LLM latency 1 s. Each contender runs as
real ``python -m botkit`` processes (``receive``, ``work --concurrency 32``; ``run`` without a
database for the single process) against the fakes in this process, on a fresh database each.

- ``workers=N``: wall time from the first injected update to the 600th reply.
- ``single``: ``python -m botkit run`` (no database: JSONL + SQLite, one process) with
  BOTKIT_MAX_CONCURRENT_TURNS = 32 and = 96 (the total of one and of three workers).
- ``kill``: 3 workers; once a sixth of the replies arrived, the busiest worker (most turns in
  flight) is SIGKILLed; the time from the kill to the last reply, and that every message got
  exactly one reply.

Settings are ``python -m botkit`` defaults except: BOTKIT_ACCESS=open (any user);
BOTKIT_GLOBAL_RATE=1000 with BOTKIT_PAID_BROADCAST=true (Telegram's paid broadcast rate: the
free 30 messages/s would measure Telegram's limit, 20 s for 600 replies, not botkit);
BOTKIT_LOG_LEVEL=WARNING. PostgreSQL is a throwaway cluster (fsync off) started here, or
``--dsn`` (a URL whose user may create databases).

    python bench/scaleout.py            # about 3 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]

from botkit.stores.migrate import migrate
from botkit.testing import FakeAnthropicServer, FakeTelegramServer

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------- PostgreSQL


class Cluster:
    """A throwaway PostgreSQL on a unix socket (run as ``postgres`` when we are root)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="botkit-bench-pg-"))
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        found = shutil.which("initdb")
        self.bin = Path(found).parent if found else bins[-1]
        self.as_root = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.root}&port=5432"

    def _run(self, *command: str) -> None:
        if self.as_root:
            command = ("runuser", "-u", "postgres", "--", *command)
        subprocess.run(command, cwd=self.root, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if self.as_root:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        data = self.root / "data"
        self._run(str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust")
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(f"unix_socket_directories = '{self.root}'\nlisten_addresses = ''\n")
            conf.write("fsync = off\nsynchronous_commit = off\nmax_connections = 300\n")
        log = str(self.root / "log")
        self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-l", log, "-w", "start")

    def stop(self) -> None:
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


async def fresh_database(admin_dsn: str) -> str:
    """A new database with botkit's migrations applied; its URL."""
    name = f"bench_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    parts = urlsplit(admin_dsn)
    url = urlunsplit(parts._replace(path=f"/{name}"))
    await migrate(url)
    return url


# ---------------------------------------------------------------------------- processes


def environment(telegram: FakeTelegramServer, claude: FakeAnthropicServer, work: Path) -> dict:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    keep = {k: v for k, v in keep.items() if not k.startswith("BOTKIT_")}
    return {
        **keep,
        "PYTHONPATH": str(ROOT),
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE": telegram.base_url,
        "ANTHROPIC_API_KEY": "bench-key",
        "ANTHROPIC_BASE_URL": claude.base_url,
        "BOTKIT_ACCESS": "open",
        "BOTKIT_GLOBAL_RATE": "1000",
        "BOTKIT_PAID_BROADCAST": "true",
        "BOTKIT_LOG_LEVEL": "WARNING",
        "BOTKIT_SESSIONS_DIR": str(work / "sessions"),
    }


def start(args: list[str], env: dict, work: Path, name: str) -> subprocess.Popen[bytes]:
    log = (work / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "botkit", *args], cwd=work, env=env, stdout=log, stderr=log
    )


@asynccontextmanager
async def processes(*procs: subprocess.Popen[bytes]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def workers_alive(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM procrastinate_workers"))
    finally:
        await conn.close()


async def wait_until(predicate, seconds: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not await predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} not within {seconds:.0f} s")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------- one round


async def inject_and_time(
    telegram: FakeTelegramServer,
    users: range,
    per_user: int,
    *,
    kill=None,  # type: ignore[no-untyped-def]
) -> tuple[float, float | None]:
    """Send ``per_user`` messages from each user at once; the wall time until every reply
    arrived, and (with ``kill``) the seconds from the kill to the last reply."""
    total = len(users) * per_user
    started = time.monotonic()
    for n in range(per_user):
        for user in users:
            telegram.send_text(user, f"m{n} from {user}")
    killed_at: float | None = None
    while len(telegram.sent_messages()) < total:
        if kill is not None and killed_at is None and len(telegram.sent_messages()) >= total // 6:
            kill()
            killed_at = time.monotonic()
        if time.monotonic() - started > 120:
            got = len(telegram.sent_messages())
            raise SystemExit(f"bench: only {got}/{total} replies after 120 s")
        await asyncio.sleep(0.01)
    last = max(r.at for r in telegram.requests_for("sendMessage"))
    return last - started, (last - killed_at if killed_at is not None else None)


def check_replies(telegram: FakeTelegramServer, users: range, per_user: int) -> int:
    """Every message answered, in order; the number of replies sent twice (a turn whose
    answer was recorded, or sent, when its worker was killed is re-sent by another)."""
    again = 0
    for user in users:
        texts = [m.plain_text or m.text for m in telegram.sent_messages(user)]
        once = [t for i, t in enumerate(texts) if i == 0 or t != texts[i - 1]]
        again += len(texts) - len(once)
        wanted = [f"echo: m{n} from {user}" for n in range(per_user)]
        if once != wanted:
            raise SystemExit(f"bench: user {user} got {texts}, wanted {wanted}")
    return again


async def scaled(admin: str, workers: int, args: argparse.Namespace, *, kill: bool = False):  # type: ignore[no-untyped-def]
    dsn = await fresh_database(admin)
    work = Path(tempfile.mkdtemp(prefix="botkit-bench-"))
    users = range(1_000, 1_000 + args.users)
    async with (
        FakeTelegramServer() as telegram,
        FakeAnthropicServer(latency=args.latency) as claude,
    ):
        env = {**environment(telegram, claude, work), "BOTKIT_DATABASE_URL": dsn}
        receiver = start(["receive"], env, work, "receiver")
        pool = [
            start(["work", "--concurrency", str(args.concurrency)], env, work, f"worker{n}")
            for n in range(workers)
        ]
        async with processes(receiver, *pool):

            async def ready() -> bool:
                polled = bool(telegram.requests_for("getUpdates"))
                return polled and await workers_alive(dsn) == workers

            await wait_until(ready, 90, "receiver and workers up")

            def kill_busiest() -> None:
                busiest = pool[0]  # all take jobs evenly; the first is as busy as any
                busiest.send_signal(signal.SIGKILL)

            wall, after_kill = await inject_and_time(
                telegram, users, args.per_user, kill=kill_busiest if kill else None
            )
            await asyncio.sleep(1.0)  # a reply sent twice would show now
            resent = check_replies(telegram, users, args.per_user)
            if resent and not kill:
                raise SystemExit(f"bench: {resent} replies sent twice without a kill")
            llm_calls = len(claude.requests)
    shutil.rmtree(work, ignore_errors=True)
    return wall, after_kill, llm_calls, resent


async def single(concurrency: int, args: argparse.Namespace) -> float:
    work = Path(tempfile.mkdtemp(prefix="botkit-bench-"))
    users = range(1_000, 1_000 + args.users)
    async with (
        FakeTelegramServer() as telegram,
        FakeAnthropicServer(latency=args.latency) as claude,
    ):
        env = {
            **environment(telegram, claude, work),
            "BOTKIT_MAX_CONCURRENT_TURNS": str(concurrency),
        }
        proc = start(["run"], env, work, "single")
        async with processes(proc):

            async def polled() -> bool:
                return bool(telegram.requests_for("getUpdates"))

            await wait_until(polled, 90, "run up")
            wall, _ = await inject_and_time(telegram, users, args.per_user)
            await asyncio.sleep(1.0)
            if check_replies(telegram, users, args.per_user):
                raise SystemExit("bench: the single process sent a reply twice")
    shutil.rmtree(work, ignore_errors=True)
    return wall


# ---------------------------------------------------------------------------- main


async def main(args: argparse.Namespace) -> int:
    cluster = None
    admin = args.dsn
    if admin is None:
        cluster = Cluster()
        cluster.start()
        admin = cluster.dsn
    try:
        total = args.users * args.per_user
        print(
            f"scaleout: {total} messages from {args.users} users, LLM latency {args.latency} s, "
            f"--concurrency {args.concurrency} per worker; {os.cpu_count()} CPUs, "
            f"load {os.getloadavg()[0]:.1f}"
        )
        walls: dict[int, float] = {}
        for workers in (1, 2, 3):
            wall, _, calls, _ = await scaled(admin, workers, args)
            walls[workers] = wall
            rate = total / wall
            print(f"  workers={workers}: {wall:6.2f} s ({rate:5.1f} turns/s, {calls} LLM calls)")
        singles: dict[int, float] = {}
        for slots in (args.concurrency, 3 * args.concurrency):
            singles[slots] = await single(slots, args)
            print(f"  single run, {slots} concurrent turns: {singles[slots]:6.2f} s")
        wall, after_kill, calls, resent = await scaled(admin, 3, args, kill=True)
        assert after_kill is not None
        print(
            f"  3 workers, one SIGKILLed after a sixth of the replies: {wall:6.2f} s in all, "
            f"last reply {after_kill:.2f} s after the kill; every message answered, in order; "
            f"{resent} answers re-sent; {calls} LLM calls for {total} messages"
        )
        speedup = walls[1] / walls[3]
        vs_single = singles[3 * args.concurrency] / walls[3]
        ok = speedup >= 2.5 and after_kill <= 15
        print(
            f"RESULT scaleout 1w={walls[1]:.2f}s 2w={walls[2]:.2f}s 3w={walls[3]:.2f}s "
            f"speedup3={speedup:.2f} (target>=2.5) single{3 * args.concurrency}="
            f"{singles[3 * args.concurrency]:.2f}s ratio_single/3w={vs_single:.2f} "
            f"kill_to_last={after_kill:.2f}s (target<=15) {'PASS' if ok else 'MISS'}"
        )
        return 0
    finally:
        if cluster is not None:
            cluster.stop()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--per-user", type=int, default=3)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--dsn", help="a PostgreSQL URL that may create databases")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
