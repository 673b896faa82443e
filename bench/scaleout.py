"""Scale-out: one receiver and 1, 2 or 3 workers on PostgreSQL, against one process.

600 messages from 200 users (3 each, sent at once), fake LLM latency 1 s. Each contender runs as
real ``python -m botkit`` processes (``receive``, ``work --concurrency 32``; ``run`` without a
database for the single process) against the fakes in this process, on a fresh database each.
Before each round is timed, one message from each of as many new users as there are turn slots
is answered (a warm-up: every process has run turns, as a long-running one has).

- ``workers=N``: wall time from the first injected update until every message was answered.
- ``single``: ``python -m botkit run`` (no database: JSONL + SQLite, one process) with
  BOTKIT_MAX_CONCURRENT_TURNS = 32 and = 96 (the total of one and of three workers). ``run``,
  and since #34 the workers too, answer the messages a user sent during their running turn
  together, in one turn (one LLM call, one reply echoing each): either may make fewer calls
  than there are messages.
- ``kill``: 3 workers (started one at a time, so procrastinate's worker ids map to them);
  once a sixth of the messages were answered, the worker with the most jobs running is
  SIGKILLed; the time from the kill to the last reply, and that every message was answered,
  in order (replies sent twice are counted: a turn whose answer was recorded before the kill
  is re-sent). A round ends when every message has an answer: distinct messages are counted,
  so a re-sent answer never stands in for one still missing.

Each round prints the CPU seconds used while it was timed: botkit's processes, PostgreSQL's
(the throwaway cluster's processes), this process (the fakes and the driver), and what the
rest of the machine used meanwhile (from /proc/stat): on a shared machine that decides how much
of the CPU the round could have. CPU per message is divided by the round's 600 messages in
every round (both runtimes answer some together in fewer turns: each is charged for the
same messages, however many turns it took).

- ``cpu``: CPU per message of a queued turn against a ``run`` turn. This machine's CPU seconds
  drift by up to half from one minute to the next (neighbours on the host), so one round of
  each compares the drift, not the code. Instead two contenders are started once and kept up,
  as services run, each with its own fakes and warmed up as above, start-up outside every
  measured window: ``run`` (BOTKIT_MAX_CONCURRENT_TURNS = ``--concurrency``, 32) and
  ``queued`` (a receiver and one ``work --concurrency 32`` worker on a fresh database). Then
  ``--cpu-pairs`` pairs (6) of rounds run, both rounds of a pair **at the same time**, so that
  they share the machine's state (``--cpu-one-at-a-time``: back to back, as before), with the
  same messages from the same new users; ``run``'s are sent first in odd pairs and
  ``queued``'s in even ones. A round's CPU is counted from its first message until 1 s after
  its last reply (the last turns' bookkeeping; an idle queued side's polls are charged to it),
  every botkit process summed (receiver + worker), PostgreSQL's apart, each divided by the 600
  messages (not under ``--control queued`` with its rounds together: one cluster serves both).
  Every round and each pair's ratios are printed; the verdicts are the **medians of the pairs'
  ratios**.
  ``--control`` (``run``, or ``--control queued``) pairs two identical contenders instead:
  its ratios are the method's noise floor on this machine (no verdict).

Targets, one ``RESULT`` line each: 3 workers >= 2.7x one; SIGKILL -> last reply <= 10 s; a
queued message's botkit CPU <= 1.5x a ``run`` message's; with PostgreSQL's <= 2.0x (the last
two the medians of the ``cpu`` pairs' ratios).

Settings are ``python -m botkit`` defaults except: BOTKIT_ACCESS=open (any user);
BOTKIT_GLOBAL_RATE=1000 with BOTKIT_PAID_BROADCAST=true (Telegram's paid broadcast rate: the
free 30 messages/s would measure Telegram's limit, 20 s for 600 replies, not botkit);
BOTKIT_LOG_LEVEL=WARNING. PostgreSQL is a throwaway cluster (fsync off) started here, or
``--dsn`` (a URL whose user may create databases).

    python bench/scaleout.py            # about 11 minutes (the 6 CPU pairs about 4.5)
    python bench/scaleout.py --workers '' --parts cpu [--cpu-pairs 8] [--control]  # pairs only
    python bench/scaleout.py --workers 3 --parts '' --timeline   # one round, per second
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pwd
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]
from _common import REPLIES, fakes_without_gc_pauses, pair_of_rounds

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

TICKS = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1


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
        "BOTKIT_LOG_LEVEL": LOG_LEVEL,
        "BOTKIT_SESSIONS_DIR": str(work / "sessions"),
    }


LOG_LEVEL = "WARNING"
TIMELINE = False
PROFILE = False
UP_WITHIN = 180.0
"""Seconds a process may take to start: under cProfile, on a loaded machine, 90 were too few."""


def start(args: list[str], env: dict, work: Path, name: str) -> subprocess.Popen[bytes]:
    log = (work / f"{name}.log").open("wb")
    profile = ["-m", "cProfile", "-o", str(work / f"{name}.prof")] if PROFILE else []
    return subprocess.Popen(
        [sys.executable, *profile, "-m", "botkit", *args], cwd=work, env=env, stdout=log, stderr=log
    )


@asynccontextmanager
async def processes(procs: list[subprocess.Popen[bytes]]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                # waited for in a thread: the fakes on this event loop keep answering the
                # requests a stopping bot still makes (a blocking wait froze them, and `run`
                # then sat out the 30 s and was killed, its cProfile output lost)
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def cpu_of(pid: int) -> float:
    """CPU seconds process ``pid`` used so far, with its children it waited for."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / TICKS  # utime stime cutime cstime


def postgres_cpu(cluster: Cluster | None) -> float | None:
    """CPU seconds of the throwaway cluster's processes (None with ``--dsn``)."""
    if cluster is None:
        return None
    postmaster = int((cluster.root / "data" / "postmaster.pid").read_text().split()[0])
    total = cpu_of(postmaster)  # its own, and the backends that ended
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def machine_busy() -> float:
    """CPU seconds all cores of the machine spent busy so far (from /proc/stat)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / TICKS  # all but idle and iowait


class CpuMeter:
    """CPU seconds used between ``start`` and ``stop`` by botkit's processes, PostgreSQL, and
    this process (the fakes and the driver)."""

    def __init__(self, cluster: Cluster | None) -> None:
        self.cluster = cluster
        self.last: dict[int, float] = {}  # a killed process keeps what it had used

    def read(self, procs: list[subprocess.Popen[bytes]]) -> dict[str, float | None]:
        for proc in procs:
            if proc.poll() is None:
                self.last[proc.pid] = cpu_of(proc.pid)
        own = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "botkit": sum(self.last.get(proc.pid, 0.0) for proc in procs),
            "receiver": self.last.get(procs[0].pid, 0.0) if len(procs) > 1 else None,
            "postgres": postgres_cpu(self.cluster),
            "fakes": own.ru_utime + own.ru_stime,
            "machine": machine_busy(),
        }

    def start(self, procs: list[subprocess.Popen[bytes]]) -> None:
        self.before = self.read(procs)

    def stop(self, procs: list[subprocess.Popen[bytes]]) -> dict[str, float | None]:
        after = self.read(procs)
        used: dict[str, float | None] = {}
        for key, value in after.items():
            earlier = self.before[key]
            used[key] = None if value is None or earlier is None else value - earlier
        ours = sum(v or 0.0 for k, v in used.items() if k not in ("machine", "receiver"))
        used["others"] = (used["machine"] or 0.0) - ours
        return used


async def workers_alive(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM procrastinate_workers"))
    finally:
        await conn.close()


async def turns_in_flight(dsn: str) -> dict[int, int]:
    """Jobs running now, by procrastinate worker id."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT worker_id, count(*) AS n FROM procrastinate_jobs "
            "WHERE status = 'doing' GROUP BY worker_id"
        )
        return {int(r["worker_id"]): int(r["n"]) for r in rows if r["worker_id"] is not None}
    finally:
        await conn.close()


async def watch_jobs(dsn: str) -> list[int]:
    """Jobs running, sampled every 0.25 s until cancelled (for --timeline)."""
    conn = await asyncpg.connect(dsn)
    seen: list[int] = []
    try:
        while True:
            seen.append(
                await conn.fetchval(
                    "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"
                )
            )
            await asyncio.sleep(0.25)
    except asyncio.CancelledError:
        return seen  # the round is over
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
    claude: FakeAnthropicServer,
    users: range,
    per_user: int,
    *,
    kill=None,  # type: ignore[no-untyped-def]
) -> tuple[float, float | None]:
    """Send ``per_user`` messages from each user at once; the wall time until every message
    was answered, and (with ``kill``) the seconds from the kill to the last reply."""
    total = len(users) * per_user
    since = len(telegram.sent_messages())  # a bot kept up across rounds answered earlier ones
    with fakes_without_gc_pauses():
        started = time.monotonic()
        for n in range(per_user):
            for user in users:
                telegram.send_text(user, f"m{n} from {user}")
        killed_at: float | None = None
        while (got := answered(telegram, since)) < total:
            if kill is not None and killed_at is None and got >= total // 6:
                await kill()
                killed_at = time.monotonic()
            if time.monotonic() - started > 120:
                raise SystemExit(f"bench: only {got}/{total} messages answered after 120 s")
            await asyncio.sleep(0.02)
    replies = [r for r in telegram.requests if r.method.lower() in REPLIES]
    last = max(r.at for r in replies)
    if TIMELINE:
        print("    seconds since the first message: LLM calls started / replies sent")
        calls = [int(r.at - started) for r in claude.requests if r.at >= started]
        sent = [int(r.at - started) for r in replies if r.at >= started]
        for second in range(int(last - started) + 1):
            print(f"    {second:3d}: {calls.count(second):4d} {sent.count(second):4d}")
    return last - started, (last - killed_at if killed_at is not None else None)


def answered_in(texts: list[str]) -> list[str]:
    """The messages a user's replies answer, in order: the fake LLM echoes what it read, and
    messages sent during a turn are answered together (one reply echoing each line)."""
    lines: list[str] = []
    for text in texts:
        lines += [line for line in text.removeprefix("echo: ").splitlines() if line]
    return lines


def answered(telegram: FakeTelegramServer, since: int = 0) -> int:
    """How many distinct messages of the round (its replies are those sent from the
    ``since``-th on) have been answered so far, over all users: an answer re-sent after a kill
    counts once, so the round ends with the last new answer."""
    texts = [m.plain_text or m.text for m in telegram.sent_messages()[since:]]
    return len({line for line in answered_in(texts) if ROUND_MESSAGE.fullmatch(line)})


ROUND_MESSAGE = re.compile(r"m\d+ from \d+")
WARM_USERS = 500_000
"""Warm-up messages come from users numbered from here."""


async def warm_up(telegram: FakeTelegramServer, slots: int) -> None:
    """One message from each of ``slots`` new users, all answered: every process has run
    turns (imports, first requests and models built lazily) before the round is timed."""
    users = range(WARM_USERS, WARM_USERS + slots)
    for user in users:
        telegram.send_text(user, "warm-up")
    for user in users:
        await telegram.wait_for_messages(user, 1, timeout=90)


def check_replies(telegram: FakeTelegramServer, users: range, per_user: int) -> int:
    """Every message answered, in order; the number of replies sent twice (a turn whose
    answer was recorded, or sent, when its worker was killed is re-sent by another)."""
    again = 0
    for user in users:
        texts = [m.plain_text or m.text for m in telegram.sent_messages(user)]
        once = [t for i, t in enumerate(texts) if i == 0 or t != texts[i - 1]]
        again += len(texts) - len(once)
        wanted = [f"m{n} from {user}" for n in range(per_user)]
        if answered_in(once) != wanted:
            raise SystemExit(f"bench: user {user} got {texts}, wanted {wanted}")
    return again


@dataclass
class Round:
    """What one round measured."""

    wall: float
    llm_calls: int
    replies: int
    cpu: dict[str, float | None]
    after_kill: float | None = None
    resent: int = 0
    killed: str = ""

    def per_message_ms(self, total: int, part: str) -> float:
        """CPU (ms) of ``part`` (botkit or postgres) per message of the round: the same
        messages in every round, so a runtime that answers a user's messages sent during a
        turn together (fewer turns) is not charged more for doing less."""
        return 1000 * (self.cpu[part] or 0.0) / total

    def describe(self, total: int) -> str:
        cpu = self.cpu
        pg = (
            "n/a"
            if cpu["postgres"] is None
            else f"{cpu['postgres']:.1f} ({self.per_message_ms(total, 'postgres'):.2f} ms/msg)"
        )
        receiver = (
            ""
            if cpu.get("receiver") is None
            else f", of which the receiver {self.per_message_ms(total, 'receiver'):.2f}"
        )
        return (
            f"{self.wall:6.2f} s ({total / self.wall:5.1f} msg/s; {self.llm_calls} LLM calls, "
            f"{self.replies} replies); CPU s: botkit {cpu['botkit']:.1f} "
            f"({self.per_message_ms(total, 'botkit'):.2f} ms/msg{receiver}), PostgreSQL {pg}, "
            f"fakes+driver {cpu['fakes']:.1f}, other work on the machine {cpu['others']:.1f} "
            f"(of {CPUS * self.wall:.0f} available)"
        )


async def scaled(
    admin: str, cluster: Cluster | None, workers: int, args: argparse.Namespace, *, kill: bool
) -> Round:
    """One receiver and ``workers`` workers on a fresh database; with ``kill``, the busiest
    worker is SIGKILLed once a sixth of the messages were answered."""
    dsn = await fresh_database(admin)
    work = Path(tempfile.mkdtemp(prefix="botkit-bench-"))
    users = range(1_000, 1_000 + args.users)
    meter = CpuMeter(cluster)
    async with (
        FakeTelegramServer() as telegram,
        FakeAnthropicServer(latency=args.latency) as claude,
    ):
        env = {**environment(telegram, claude, work), "BOTKIT_DATABASE_URL": dsn}
        procs = [start(["receive"], env, work, "receiver")]
        pool: list[subprocess.Popen[bytes]] = []
        async with processes(procs):
            for n in range(workers):  # one at a time: the n-th worker id is pool[n]'s
                pool.append(
                    start(["work", "--concurrency", str(args.concurrency)], env, work, f"worker{n}")
                )
                procs.append(pool[-1])

                async def registered(n: int = n) -> bool:
                    return await workers_alive(dsn) == n + 1

                await wait_until(registered, UP_WITHIN, f"worker {n} up")

            async def polled() -> bool:
                return bool(telegram.requests_for("getUpdates"))

            await wait_until(polled, UP_WITHIN, "receiver up")
            conn = await asyncpg.connect(dsn)
            ids = [
                r["id"]
                for r in await conn.fetch("SELECT id FROM procrastinate_workers ORDER BY id")
            ]
            await conn.close()
            killed = ""
            await warm_up(telegram, workers * args.concurrency)
            calls_before, sent_before = len(claude.requests), len(telegram.sent_messages())

            async def kill_busiest() -> None:
                nonlocal killed
                flight = await turns_in_flight(dsn)
                busiest = max(range(workers), key=lambda n: flight.get(ids[n], 0))
                meter.read(procs)
                pool[busiest].send_signal(signal.SIGKILL)
                counts = "/".join(str(flight.get(i, 0)) for i in ids)
                killed = f"worker {busiest} (turns in flight per worker: {counts})"

            meter.start(procs)
            watch = asyncio.create_task(watch_jobs(dsn)) if TIMELINE else None
            wall, after_kill = await inject_and_time(
                telegram, claude, users, args.per_user, kill=kill_busiest if kill else None
            )
            cpu = meter.stop(procs)
            if watch is not None:
                watch.cancel()
                running = " ".join(map(str, await watch))
                print(f"    jobs running, every 0.25 s: {running}")
            await asyncio.sleep(1.0)  # a reply sent twice would show now
            resent = check_replies(telegram, users, args.per_user)
            if resent and not kill:
                raise SystemExit(f"bench: {resent} replies sent twice without a kill")
            result = Round(
                wall,
                len(claude.requests) - calls_before,
                len(telegram.sent_messages()) - sent_before,
                cpu,
                after_kill,
                resent,
                killed,
            )
    keep(work, f"workers{workers}{'-kill' if kill else ''}", args)
    return result


async def single(cluster: Cluster | None, concurrency: int, args: argparse.Namespace) -> Round:
    """``python -m botkit run`` without a database, ``concurrency`` turns at once."""
    work = Path(tempfile.mkdtemp(prefix="botkit-bench-"))
    users = range(1_000, 1_000 + args.users)
    meter = CpuMeter(None)
    async with (
        FakeTelegramServer() as telegram,
        FakeAnthropicServer(latency=args.latency) as claude,
    ):
        env = {
            **environment(telegram, claude, work),
            "BOTKIT_MAX_CONCURRENT_TURNS": str(concurrency),
        }
        procs = [start(["run"], env, work, "single")]
        async with processes(procs):

            async def polled() -> bool:
                return bool(telegram.requests_for("getUpdates"))

            await wait_until(polled, UP_WITHIN, "run up")
            await warm_up(telegram, concurrency)
            calls_before, sent_before = len(claude.requests), len(telegram.sent_messages())
            meter.start(procs)
            wall, _ = await inject_and_time(telegram, claude, users, args.per_user)
            cpu = meter.stop(procs)
            await asyncio.sleep(1.0)
            if check_replies(telegram, users, args.per_user):
                raise SystemExit("bench: the single process sent a reply twice")
            calls = len(claude.requests) - calls_before
            result = Round(wall, calls, len(telegram.sent_messages()) - sent_before, cpu)
    keep(work, f"single{concurrency}", args)
    return result


def keep(work: Path, name: str, args: argparse.Namespace) -> None:
    """Keep the round's logs under ``--keep`` (else remove them)."""
    if args.keep is not None:
        target = Path(args.keep) / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(work, target, ignore=shutil.ignore_patterns("sessions", "*.jsonl"))
    shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------- CPU pairs

SETTLE = 1.0
"""Seconds after a CPU round's last reply still counted in its CPU (the last turns' session
appends and job finishes; an idle queued side's polls and sweeps are charged to it too)."""
FIRST_PAIR_USER = 1_000


@dataclass
class Contender:
    """A runtime kept up across the CPU pairs, as a service runs: its own fakes and processes."""

    name: str
    telegram: FakeTelegramServer
    claude: FakeAnthropicServer
    procs: list[subprocess.Popen[bytes]]
    meter: CpuMeter


@asynccontextmanager
async def kept_up(
    kind: str, name: str, admin: str, cluster: Cluster | None, args: argparse.Namespace
) -> AsyncIterator[Contender]:
    """``run`` (``--concurrency`` turns at once, no database) or ``queued`` (a receiver and one
    ``work --concurrency`` worker on a fresh database), up and warmed up; stopped on exit."""
    work = Path(tempfile.mkdtemp(prefix="botkit-bench-"))
    async with (
        FakeTelegramServer() as telegram,
        FakeAnthropicServer(latency=args.latency) as claude,
    ):
        env = environment(telegram, claude, work)
        if kind == "run":
            env["BOTKIT_MAX_CONCURRENT_TURNS"] = str(args.concurrency)
            procs = [start(["run"], env, work, name)]
            meter = CpuMeter(None)
        else:
            dsn = env["BOTKIT_DATABASE_URL"] = await fresh_database(admin)
            worker = ["work", "--concurrency", str(args.concurrency)]
            procs = [
                start(["receive"], env, work, f"{name}-receiver"),
                start(worker, env, work, f"{name}-worker"),
            ]
            meter = CpuMeter(cluster)
        async with processes(procs):
            if kind != "run":

                async def registered() -> bool:
                    return await workers_alive(dsn) == 1

                await wait_until(registered, UP_WITHIN, f"{name}'s worker up")

            async def polled() -> bool:
                return bool(telegram.requests_for("getUpdates"))

            await wait_until(polled, UP_WITHIN, f"{name} up")
            await warm_up(telegram, args.concurrency)
            yield Contender(name, telegram, claude, procs, meter)
    keep(work, f"cpu-{name}", args)


async def cpu_round(side: Contender, users: range, args: argparse.Namespace) -> Round:
    """One round of ``side``: its CPU from the first message to ``SETTLE`` s after the last
    reply, every botkit process of it summed (receiver and worker), PostgreSQL's apart."""
    calls_before, sent_before = len(side.claude.requests), len(side.telegram.sent_messages())
    side.meter.start(side.procs)
    wall, _ = await inject_and_time(side.telegram, side.claude, users, args.per_user)
    await asyncio.sleep(SETTLE)
    cpu = side.meter.stop(side.procs)
    if check_replies(side.telegram, users, args.per_user):
        raise SystemExit(f"bench: {side.name} sent a reply twice")
    calls = len(side.claude.requests) - calls_before
    return Round(wall, calls, len(side.telegram.sent_messages()) - sent_before, cpu)


@dataclass
class Pair:
    """A pair's CPU per message (ms), the yardstick first: botkit's, and with PostgreSQL's
    (None where not measured: ``run``, or ``--dsn``)."""

    botkit: tuple[float, float]
    postgres: tuple[float | None, float | None]

    @property
    def botkit_ratio(self) -> float:
        """The measured side's botkit CPU per message over the yardstick's."""
        return self.botkit[1] / self.botkit[0]

    @property
    def total_ratio(self) -> float | None:
        """The measured side's botkit + PostgreSQL CPU per message over the yardstick's
        (None when the measured side's PostgreSQL was not measured)."""
        if self.postgres[1] is None:
            return None
        return (self.botkit[1] + self.postgres[1]) / (self.botkit[0] + (self.postgres[0] or 0.0))


def round_line(number: int, side: Contender, r: Round, total: int) -> str:
    """One CPU round, as printed."""
    receiver = (
        f" (receiver {r.per_message_ms(total, 'receiver'):.2f})"
        if r.cpu.get("receiver") is not None
        else ""
    )
    pg = (
        f", PostgreSQL {r.per_message_ms(total, 'postgres'):.2f} ms/msg"
        if r.cpu["postgres"] is not None
        else ""
    )
    return (
        f"  pair {number + 1} {side.name:<7} {r.wall:6.2f} s, {r.llm_calls} LLM calls, "
        f"{r.replies} replies; botkit {r.per_message_ms(total, 'botkit'):.2f} ms/msg{receiver}"
        f"{pg}; fakes+driver {r.cpu['fakes']:.1f} CPU s, others {r.cpu['others']:.1f} CPU s"
    )


def cpu_sides(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(kind, name) of the yardstick and the measured side: ``run`` and ``queued``, or under
    ``--control`` two of the same kind."""
    if args.control is None:
        return [("run", "run"), ("queued", "queued")]
    return [(args.control, args.control), (args.control, f"{args.control}2")]


async def cpu_pairs(
    admin: str, cluster: Cluster | None, args: argparse.Namespace
) -> tuple[list[str], list[Pair]]:
    """``--cpu-pairs`` pairs of rounds, the yardstick's messages sent first in odd pairs and the
    measured side's in even ones; the sides' names and each pair's CPU per message."""
    total = args.users * args.per_user
    pairs: list[Pair] = []
    async with contextlib.AsyncExitStack() as stack:
        sides = [
            await stack.enter_async_context(kept_up(kind, name, admin, cluster, args))
            for kind, name in cpu_sides(args)
        ]
        for number in range(args.cpu_pairs):
            first = FIRST_PAIR_USER + number * args.users
            users = range(first, first + args.users)  # the same messages for both sides
            rounds = await pair_of_rounds(
                sides, number, partial(cpu_round, users=users, args=args), args.cpu_one_at_a_time
            )
            for side, r in rounds:
                print(round_line(number, side, r, total), flush=True)
            by_name = {side.name: r for side, r in rounds}
            a, b = (by_name[side.name] for side in sides)
            postgres = (postgres_ms(a, total), postgres_ms(b, total))
            if args.control == "queued" and not args.cpu_one_at_a_time:
                postgres = (None, None)  # one cluster serves both sides at once: not apart
            pair = Pair(
                (a.per_message_ms(total, "botkit"), b.per_message_ms(total, "botkit")), postgres
            )
            pairs.append(pair)
            print(f"  pair {number + 1} {ratios_text(pair, sides[1].name, sides[0].name)}")
    return [side.name for side in sides], pairs


def postgres_ms(r: Round, total: int) -> float | None:
    """PostgreSQL's CPU per message of a round (ms); None where it was not measured."""
    return None if r.cpu["postgres"] is None else r.per_message_ms(total, "postgres")


def ratios_text(pair: Pair, measured: str, yardstick: str) -> str:
    """A pair's ratios, as printed."""
    both = "" if pair.total_ratio is None else f", with PostgreSQL {pair.total_ratio:.2f}x"
    return f"{measured}/{yardstick}: botkit {pair.botkit_ratio:.2f}x{both}"


def print_cpu_results(names: list[str], pairs: list[Pair], control: str | None) -> None:
    """The medians of the sides' CPU per message, every pair's ratios, and the RESULT lines:
    the verdicts are on the medians of the pairs' ratios."""
    yardstick, measured = names
    botkit = [median([p.botkit[i] for p in pairs]) for i in (0, 1)]
    sides = []
    for i, name in ((1, measured), (0, yardstick)):
        pg = [p.postgres[i] for p in pairs]
        with_pg = "" if None in pg else f" + PostgreSQL {median([v or 0.0 for v in pg]):.2f} ms"
        sides.append(f"{name} botkit {botkit[i]:.2f} ms{with_pg}")
    print(f"  CPU per message (medians of {len(pairs)} pairs): {'; '.join(sides)}")
    ratio = median([p.botkit_ratio for p in pairs])
    print(f"  botkit ratios by pair: {', '.join(f'{p.botkit_ratio:.3f}' for p in pairs)}")
    totals = [p.total_ratio for p in pairs]
    both = None if None in totals else median([t or 0.0 for t in totals])
    if both is not None:
        print(f"  with PostgreSQL, by pair: {', '.join(f'{t or 0.0:.3f}' for t in totals)}")
    how = f"median of {len(pairs)} pairs' ratios"
    if control is not None:
        kind = "run processes" if control == "run" else "receivers with a worker each"
        word = f"CONTROL (two identical {kind}: the method's noise floor, no verdict)"
        print(f"RESULT scaleout cpu {measured}/{yardstick} botkit={ratio:.2f}x ({how}) {word}")
        if both is not None:
            print(
                f"RESULT scaleout cpu {measured}+postgres/{yardstick}+postgres={both:.2f}x "
                f"({how}) {word}"
            )
        return
    print(
        f"RESULT scaleout cpu queued/run botkit={ratio:.2f}x ({how}; medians {botkit[1]:.2f} / "
        f"{botkit[0]:.2f} ms) (target<=1.5) {verdict(ratio <= 1.5)}"
    )
    if both is None:
        print("RESULT scaleout cpu queued+postgres/run=n/a (--dsn: PostgreSQL's CPU not measured)")
    else:
        print(
            f"RESULT scaleout cpu queued+postgres/run={both:.2f}x ({how}) (target<=2.0) "
            f"{verdict(both <= 2.0)}"
        )


# ---------------------------------------------------------------------------- main


async def main(args: argparse.Namespace) -> int:
    global LOG_LEVEL, TIMELINE, PROFILE
    LOG_LEVEL, TIMELINE, PROFILE = args.log_level, args.timeline, args.profile
    cluster = None
    admin = args.dsn
    if admin is None:
        cluster = Cluster()
        cluster.start()
        admin = cluster.dsn
    try:
        return await measure(admin, cluster, args)
    finally:
        if cluster is not None:
            cluster.stop()


async def measure(admin: str, cluster: Cluster | None, args: argparse.Namespace) -> int:
    total = args.users * args.per_user
    print(
        f"scaleout: {total} messages from {args.users} users ({args.per_user} each, all sent "
        f"at once), LLM latency {args.latency} s, --concurrency {args.concurrency} per worker; "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    walls: dict[int, float] = {}
    for workers in args.workers:
        r = await scaled(admin, cluster, workers, args, kill=False)
        walls[workers] = r.wall
        print(f"  workers={workers}: {r.describe(total)}", flush=True)
    singles: dict[int, float] = {}
    if "single" in args.parts:
        for slots in sorted({args.concurrency, max(args.workers, default=1) * args.concurrency}):
            r = await single(cluster, slots, args)
            singles[slots] = r.wall
            print(f"  single run, {slots} turns at once: {r.describe(total)}", flush=True)
    after_kill = None
    if "kill" in args.parts:
        r = await scaled(admin, cluster, 3, args, kill=True)
        after_kill = r.after_kill
        assert after_kill is not None
        print(
            f"  3 workers, {r.killed} SIGKILLed after a sixth of the messages were answered: "
            f"last reply {after_kill:.2f} s after the kill; every message answered, in order; "
            f"{r.resent} replies re-sent; {r.describe(total)}",
            flush=True,
        )
    cpu: tuple[list[str], list[Pair]] | None = None
    if "cpu" in args.parts and args.cpu_pairs > 0:
        yardstick, measured = (name for _, name in cpu_sides(args))
        print(
            f"  CPU pairs: {measured} against {yardstick}, {args.concurrency} turns at once each, "
            f"kept up across the pairs; {yardstick} first in odd pairs, {measured} in even ones; "
            f"CPU per message from the first message to {SETTLE:.0f} s after the last reply",
            flush=True,
        )
        cpu = await cpu_pairs(admin, cluster, args)
    print(f"  load after: {os.getloadavg()[0]:.1f}")
    if cpu is not None:
        print_cpu_results(*cpu, args.control)
    if 1 in walls and 3 in walls:
        speedup = walls[1] / walls[3]
        most = 3 * args.concurrency
        vs = (
            f" single{most}={singles[most]:.2f}s 3w/single={walls[3] / singles[most]:.2f}"
            if most in singles
            else ""
        )
        rounds = " ".join(f"{n}w={wall:.2f}s" for n, wall in sorted(walls.items()))
        print(
            f"RESULT scaleout speedup {rounds} speedup3={speedup:.2f}{vs} "
            f"(target>=2.7) {verdict(speedup >= 2.7)}"
        )
    if after_kill is not None:
        print(
            f"RESULT scaleout kill kill_to_last={after_kill:.2f}s (target<=10) "
            f"{verdict(after_kill <= 10)}"
        )
    return 0


def median(values: list[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def verdict(ok: bool) -> str:
    """The benches' one convention: PASS or FAIL, the exit status 0 either way."""
    return "PASS" if ok else "FAIL"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--per-user", type=int, default=3)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--workers",
        type=lambda s: [int(n) for n in s.split(",") if n],
        default=[1, 2, 3],
        help="the worker rounds of the speedup (default 1,2,3; '' for none)",
    )
    parser.add_argument(
        "--parts",
        type=lambda s: set(s.split(",")),
        default={"single", "kill", "cpu"},
        help="besides the worker rounds: single,kill,cpu (default all; '' for none)",
    )
    parser.add_argument(
        "--cpu-pairs",
        type=int,
        default=6,
        help="pairs of rounds (run, queued with one worker) the CPU verdicts are the medians of",
    )
    parser.add_argument(
        "--cpu-one-at-a-time",
        action="store_true",
        help="run a CPU pair's two rounds one after the other (alternating order), not together",
    )
    parser.add_argument(
        "--control",
        nargs="?",
        const="run",
        choices=["run", "queued"],
        help="the CPU pairs with two identical sides (run, the default, or queued): the "
        "method's noise floor, no verdict",
    )
    parser.add_argument("--dsn", help="a PostgreSQL URL that may create databases")
    parser.add_argument("--keep", help="copy each round's process logs into this folder")
    parser.add_argument("--timeline", action="store_true", help="LLM calls and replies per second")
    parser.add_argument(
        "--profile", action="store_true", help="bots under cProfile (<name>.prof; with --keep)"
    )
    parser.add_argument("--log-level", default="WARNING", help="BOTKIT_LOG_LEVEL of the bots")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
