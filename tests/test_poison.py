"""Updates whose turn kills the process: given up after BOTKIT_MAX_JOB_ATTEMPTS deaths, the
sender told once, the conversation going on; a turn that only shared a process with it dies at
most twice and is answered, and the turns a dead process leaves run side by side again. Real
processes (``python -m botkit work`` and ``run``) that die with ``os._exit(137)`` or a
SIGKILL, restarted by the test as a supervisor would; real PostgreSQL, the real aiogram and
anthropic clients against the fakes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import orjson
import pytest
from procrastinate.jobs import Status
from test_scaleout import STALLED, fetchval, queued, queued_bot, until

from botkit.messengers.flood import FloodControl
from botkit.runtime.inbox import Inbox
from botkit.runtime.queue import Claim, Fetched, TurnQueue
from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer, make_bot
from botkit.testing.anthropic import FakeRequest
from botkit.testing.harness import running

POISON_BOT = """
import os

from botkit import Bot


async def build_prompt(message):
    if message.text == "poison":
        os._exit(137)  # as an out-of-memory kill or a native crash would end the process
    return "You are a test bot."


bot = Bot(build_prompt=build_prompt)
"""
GIVEN_UP = (
    "Sorry, I couldn't handle this message: trying to answer it broke me each time, so "
    "I've set it aside. Your next messages will be answered as usual."
)
POISONED, BYSTANDER = 501, 502
FIRST, SECOND = 503, 504


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Supervised:
    """``python -m botkit <command> poison_bot:bot``, started again whenever it dies (137)."""

    def __init__(self, home: Path, command: list[str], env: dict[str, str]) -> None:
        self.home = home
        self.command = command
        self.env = env
        self.log = home / "stderr.log"
        self.metrics_port = free_port()
        self.deaths = 0
        self.other_exits: list[int] = []
        self.lives = 0
        self.watched = False
        """Whether an exit is a death to count and restart (not while the test stops it)."""
        self.at_death: Callable[[], None] | None = None
        """Called when it died, before it starts again (its files as the death left them)."""
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.watched = True
        self.lives += 1
        env = {**self.env, "BOTKIT_METRICS_PORT": str(self.metrics_port)}
        with self.log.open("ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "botkit", *self.command, "poison_bot:bot"],
                cwd=self.home,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    def check(self) -> None:
        """Start it again if it died (counting the death)."""
        code = self.process.poll() if self.process is not None and self.watched else None
        if code is None:
            return
        if code == 137:
            self.deaths += 1
        else:
            self.other_exits.append(code)
        if self.at_death is not None:
            self.at_death()
        self.start()

    def kill(self) -> None:
        """SIGKILL it, as a deploy or the out-of-memory killer would (it is started again)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        self.watched = False
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                await asyncio.to_thread(self.process.wait, 30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def events(self, name: str) -> list[dict[str, Any]]:
        """Log lines of this process (all its lives) with event ``name``."""
        lines = self.log.read_bytes().splitlines() if self.log.exists() else []
        found = []
        for line in lines:
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("event") == name:
                found.append(record)
        return found

    async def given_up_metric(self) -> float:
        """``botkit_updates_given_up_total`` as this process serves it now."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        async with asyncio.timeout(180), aiohttp.ClientSession() as http:
            while True:  # a process started again may not serve yet
                try:
                    async with http.get(url) as response:
                        text = await response.text()
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.2)
        for line in text.splitlines():
            if line.startswith("botkit_updates_given_up_total "):
                return float(line.split()[1])
        raise AssertionError("botkit_updates_given_up_total is not served")


@asynccontextmanager
async def supervised(processes: list[Supervised]) -> AsyncIterator[list[Supervised]]:
    """Start ``processes`` and restart each that dies until the block ends."""
    for process in processes:
        process.start()

    async def watch() -> None:
        while True:
            for process in processes:
                process.check()
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch())
    try:
        yield processes
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await asyncio.gather(*(process.stop() for process in processes))


def environment(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, home: Path, **more: str
) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    return {
        **keep,
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE": telegram.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": claude.base_url,
        "BOTKIT_ACCESS": "open",
        "BOTKIT_STREAM_REPLIES": "false",
        "BOTKIT_POLL_TIMEOUT": "1",
        "BOTKIT_SESSIONS_DIR": str(home / "sessions"),
        **more,
    }


def poison_home(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "poison_bot.py").write_text(POISON_BOT)
    return path


def slow_for_the_bystander(claude: FakeAnthropicServer) -> None:
    """The bystander's turn takes a while, so it is running when the poison kills the process."""

    async def model(request: FakeRequest) -> FakeReply:
        if request.last_user_text().startswith("bystander"):
            await asyncio.sleep(1.5)
        return FakeReply.text(f"echo: {request.last_user_text()}")

    claude.responder = model


def texts(telegram: FakeTelegramServer, chat_id: int) -> list[str]:
    return [m.text for m in telegram.sent_messages(chat_id)]


class Overlap:
    """A slow model that counts how many of its calls ran at once once ``counting`` is set."""

    def __init__(self) -> None:
        self.counting = False
        self.now = 0
        self.most = 0
        self.counted = 0

    async def model(self, request: FakeRequest) -> FakeReply:
        counted = self.counting
        if counted:
            self.counted += 1
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(1.5)
        finally:
            self.now -= counted
        return FakeReply.text(f"echo: {request.last_user_text()}")


# --- the job queue: workers --------------------------------------------------------------------


@pytest.mark.timeout(600)
async def test_a_job_that_kills_its_worker_is_given_up_after_three_deaths(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    slow_for_the_bystander(claude)
    receiver = queued_bot(claude, telegram, tmp_path / "receiver", db)
    workers = [
        Supervised(
            poison_home(tmp_path / f"w{n}"),
            ["work", "--concurrency", "4"],
            environment(
                telegram,
                claude,
                tmp_path / f"w{n}",
                BOTKIT_DATABASE_URL=db,
                BOTKIT_STALLED_TIMEOUT=str(STALLED),
            ),
        )
        for n in (1, 2)
    ]
    async with queued(receiver, work=False), supervised(workers):
        bystander = telegram.send_text(BYSTANDER, "bystander question")
        await until(lambda: len(claude.requests) >= 1, timeout=90)  # its turn is running
        poison = telegram.send_text(POISONED, "poison")
        telegram.send_text(POISONED, "after")
        await telegram.wait_for_messages(POISONED, 2, timeout=400)
        await telegram.wait_for_messages(BYSTANDER, 1, timeout=60)
        await asyncio.sleep(1.0)  # anything sent twice would be sent by now
        given_up = [await worker.given_up_metric() for worker in workers]
    deaths = sum(worker.deaths for worker in workers)
    assert deaths == 3, f"{deaths} workers died of the poison"
    assert [w.other_exits for w in workers] == [[], []]
    assert texts(telegram, POISONED) == [GIVEN_UP, "echo: after"], "told once, then answered"
    notice = telegram.sent_messages(POISONED)[0]
    poison_message_id = telegram.injected[poison]["message"]["message_id"]
    assert notice.params["reply_parameters"]["message_id"] == poison_message_id
    assert texts(telegram, BYSTANDER) == ["echo: bystander question"]
    assert sum(given_up) == 1, "one metric count, in the worker that gave it up"
    logged = [e for w in workers for e in w.events("turn.given_up")]
    assert [(e["update_id"], e["user_id"], e["deaths"]) for e in logged] == [(poison, 501, 3)]
    row = "SELECT starts FROM botkit_updates WHERE update_id = $1 AND given_up_at IS NOT NULL"
    assert await fetchval(db, row, poison) == 4, "three deaths and the start that gave it up"
    row = "SELECT starts FROM botkit_updates WHERE update_id = $1 AND given_up_at IS NULL"
    assert 1 <= await fetchval(db, row, bystander) <= 3, "at most two deaths, then its answer"
    assert await fetchval(db, "SELECT count(*) FROM procrastinate_jobs") == 0


@pytest.mark.timeout(300)
async def test_the_jobs_of_a_killed_worker_run_side_by_side_again(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    """A death that was no poison's (a SIGKILL) costs no queue: the jobs it put back, once
    dead, run at once beside each other, not one at a time."""
    overlap = Overlap()
    claude.responder = overlap.model
    receiver = queued_bot(claude, telegram, tmp_path / "receiver", db)
    home = poison_home(tmp_path / "w")
    env = environment(
        telegram, claude, home, BOTKIT_DATABASE_URL=db, BOTKIT_STALLED_TIMEOUT=str(STALLED)
    )
    worker = Supervised(home, ["work", "--concurrency", "4"], env)
    async with queued(receiver, work=False), supervised([worker]):
        telegram.send_text(FIRST, "first")
        telegram.send_text(SECOND, "second")
        await until(lambda: len(claude.requests) >= 2, timeout=90)  # both turns are running
        overlap.counting = True
        worker.kill()
        await telegram.wait_for_messages(FIRST, 1, timeout=120)
        await telegram.wait_for_messages(SECOND, 1, timeout=60)
        given_up = await worker.given_up_metric()
    assert worker.other_exits == [-signal.SIGKILL]
    assert texts(telegram, FIRST) == ["echo: first"]
    assert texts(telegram, SECOND) == ["echo: second"]
    assert overlap.counted == 2, "each turn ran once more"
    assert overlap.most == 2, "the two put-back turns ran side by side"
    assert given_up == 0


async def test_two_workers_racing_to_give_up_one_update_mark_it_once(db: str) -> None:
    queue = TurnQueue(db)
    await queue.open()
    try:
        claim = await queue.claim(1, 77, 5)
        assert claim is not None and (claim.starts, claim.given_up) == (1, False)
        again = await queue.claim(1, 77, 5)  # the same job after its worker died
        assert again is not None and again.starts == 2
        assert await queue.claim(1, 77, 6) is None, "a copy of the update, another job"
        marked = await asyncio.gather(*(queue.give_up(1, 77, 5) for _ in range(8)))
        later = await queue.claim(1, 77, 5)
    finally:
        await queue.close()
    assert marked.count(True) == 1, "exactly one of them tells the user"
    assert later is not None and later.given_up


async def test_giving_up_finds_the_jobs_claims_by_an_index(db: str) -> None:
    """Not by reading every update of the last two days (20 ms with 200,000 of them)."""
    from botkit.runtime import queue as queue_module

    give_up = queue_module._GIVE_UP.replace("%(bot_id)s", "1").replace("%(job_id)s", "5")
    conn = await asyncpg.connect(db)
    try:
        await conn.execute("SET enable_seqscan = off")  # the table is small here
        plan = "\n".join(row[0] for row in await conn.fetch(f"EXPLAIN {give_up}"))
    finally:
        await conn.close()
    assert "botkit_updates_job_id" in plan, plan


async def test_a_start_the_worker_saw_end_is_taken_back(db: str) -> None:
    queue = TurnQueue(db)
    await queue.open()
    try:
        await queue.claim(1, 78, 9)
        await queue.unstart(1, 78, 9)  # cut short by a shutdown: not a death
        claim = await queue.claim(1, 78, 9)
    finally:
        await queue.close()
    assert claim is not None and claim.starts == 1


async def test_a_turns_fetch_counts_its_start_in_the_same_statement(db: str) -> None:
    """One round trip a turn less: the statement that takes the job claims its update; a copy
    finds it claimed by the first job; a suspect claims it only once it entered the lane."""
    queue = TurnQueue(db)
    await queue.open()
    try:
        queue.claim_at_fetch(1, suspect_from=2)
        manager = queue.app.job_manager
        worker_id = await manager.register_worker()
        update = {"update_id": 80, "message": {"text": "x"}}
        await queue.defer(1, 80, update, "user:80")
        job = await manager.fetch_job(queues=None, worker_id=worker_id)
        assert job is not None and job.id is not None
        starts = await fetchval(db, "SELECT starts FROM botkit_updates WHERE update_id = 80")
        taken = queue.fetched(job.id)
        assert queue.fetched(job.id) is None, "the task takes it once"
        await queue.defer(1, 80, update, "user:80")  # Telegram delivered it again
        await manager.finish_job(job, Status.SUCCEEDED, delete_job=True)
        copy = await manager.fetch_job(queues=None, worker_id=worker_id)
        assert copy is not None and copy.id is not None
        copy_taken = queue.fetched(copy.id)
        await queue.defer(1, 81, {"update_id": 81, "message": {"text": "y"}}, "user:81")
        await fetchval(db, "UPDATE procrastinate_jobs SET attempts = 2 WHERE lock = 'user:81'")
        suspect = await manager.fetch_job(queues=["botkit"], worker_id=worker_id)
        assert suspect is not None and suspect.id is not None
        suspect_taken = queue.fetched(suspect.id)
        claims = "SELECT count(*) FROM botkit_updates WHERE update_id = 81"
        suspect_claims = await fetchval(db, claims)
    finally:
        await queue.close()
    assert starts == 1
    nothing_waits = Claim(starts=1, given_up=False, conversation="80", head=0, waiting=False)
    assert taken == Fetched(80, nothing_waits), "and what the turn needs of its conversation"
    assert copy_taken == Fetched(80, None), "a copy: the update is the first job's"
    assert suspect_taken is None and suspect_claims == 0


async def test_a_start_cut_short_by_a_workers_shutdown_is_not_a_death(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    from botkit.runtime.cluster import queue_for, serve_queued
    from botkit.runtime.telegram import messenger_for

    claude.responder = hanging
    bot = queued_bot(claude, telegram, tmp_path, db)
    messenger = messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False)
    stop = asyncio.Event()
    serving = asyncio.create_task(
        serve_queued(
            bot, stop, messenger=messenger, queue=queue_for(bot.settings), grace_period=0.2
        )
    )
    update = telegram.send_text(POISONED, "slow")
    await until(lambda: len(claude.requests) == 1, timeout=60)
    stop.set()  # SIGTERM: the grace period runs out, the turn is cancelled
    await serving
    assert await fetchval(db, "SELECT starts FROM botkit_updates WHERE update_id = $1", update) == 0


# --- one process: ``run`` and its inbox journal -------------------------------------------------


async def hanging(request: FakeRequest) -> FakeReply:
    await asyncio.sleep(60)
    return FakeReply.text("too late")


async def test_a_turn_cut_short_by_a_shutdown_is_not_a_death(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    claude.responder = hanging
    bot = make_bot(claude, tmp_path, access="open")
    async with running(bot, telegram, grace_period=0.2):
        update = telegram.send_text(POISONED, "slow")
        await until(lambda: len(claude.requests) == 1, timeout=30)
    inbox = Inbox(bot.settings.sessions_dir / "inbox.jsonl")
    assert [item.update_id for item in inbox.pending()] == [update], "answered after a restart"
    assert inbox.starts(update) == 0, "its start was taken back: the process did not die"


@pytest.mark.timeout(600)
async def test_run_gives_up_an_update_that_killed_it_at_three_starts(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    slow_for_the_bystander(claude)
    home = poison_home(tmp_path / "run")
    bot = Supervised(home, ["run"], environment(telegram, claude, home))
    bystander_deaths: list[int] = []

    def count_the_bystanders_deaths() -> None:  # its starts journaled, the last one dead
        inbox = Inbox(home / "sessions" / "inbox.jsonl")
        bystander_deaths.append(inbox.starts(bystander))
        inbox.close()

    bot.at_death = count_the_bystanders_deaths
    async with supervised([bot]):
        bystander = telegram.send_text(BYSTANDER, "bystander question")
        await until(lambda: len(claude.requests) >= 1, timeout=90)  # its turn is running
        poison = telegram.send_text(POISONED, "poison")
        await until(lambda: bot.deaths >= 1, timeout=60)
        telegram.send_text(POISONED, "after")
        await telegram.wait_for_messages(POISONED, 2, timeout=400)
        await telegram.wait_for_messages(BYSTANDER, 1, timeout=60)
        given_up = await bot.given_up_metric()
        await bot.stop()  # and once more: nothing is told again
        bot.start()
        await until(lambda: len(bot.events("bot.started")) >= 5, timeout=90)
        await asyncio.sleep(2.0)
    assert bot.deaths == 3, f"the poison killed {bot.deaths} processes"
    assert bot.lives == 5, "three restarts after deaths, one by the test"
    assert bot.other_exits == []
    assert texts(telegram, POISONED) == [GIVEN_UP, "echo: after"], "told once, then answered"
    assert texts(telegram, BYSTANDER) == ["echo: bystander question"]
    assert 1 <= max(bystander_deaths) <= 2, f"the bystander died {bystander_deaths}"
    assert given_up == 1
    logged = bot.events("turn.given_up")
    assert [(e["update_id"], e["user_id"], e["deaths"]) for e in logged] == [(poison, 501, 3)]
    assert Inbox(home / "sessions" / "inbox.jsonl").pending() == []


@pytest.mark.timeout(300)
async def test_turns_a_killed_run_left_run_side_by_side_again(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    """After a death that was no poison's (a SIGKILL), the journaled turns started again run at
    once beside each other, not one at a time."""
    overlap = Overlap()
    claude.responder = overlap.model
    home = poison_home(tmp_path / "run")
    bot = Supervised(home, ["run"], environment(telegram, claude, home))
    async with supervised([bot]):
        telegram.send_text(FIRST, "first")
        telegram.send_text(SECOND, "second")
        await until(lambda: len(claude.requests) >= 2, timeout=90)  # both turns are running
        overlap.counting = True
        bot.kill()
        await telegram.wait_for_messages(FIRST, 1, timeout=120)
        await telegram.wait_for_messages(SECOND, 1, timeout=60)
        given_up = await bot.given_up_metric()
    assert bot.other_exits == [-signal.SIGKILL]
    assert texts(telegram, FIRST) == ["echo: first"]
    assert texts(telegram, SECOND) == ["echo: second"]
    assert overlap.counted == 2, "each turn ran once more"
    assert overlap.most == 2, "the two turns started again ran side by side"
    assert given_up == 0


# --- the journal's counts -----------------------------------------------------------------------


def test_starts_survive_restarts_and_compaction(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.accept(1, {"n": 1})
    inbox.accept(2, {"n": 2})
    inbox.started([1, 2])
    inbox.close()
    restarted = Inbox(path)  # loading compacts
    restarted.started([1])
    restarted.interrupted([2])  # a shutdown cut it short: not a death
    restarted.close()
    again = Inbox(path)
    assert (again.starts(1), again.starts(2)) == (2, 0)


def test_a_given_up_update_is_closed_for_good(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.accept(7, {"n": 7})
    inbox.started([7])
    assert inbox.give_up([7])
    assert not inbox.give_up([7]), "given up once"
    inbox.close()
    restarted = Inbox(path)
    assert restarted.pending() == []
    assert not restarted.give_up([7])
    assert not restarted.accept(7, {"n": 7}), "a re-delivery is not taken again"
