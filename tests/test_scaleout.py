"""Scale-out on PostgreSQL: receivers and workers on procrastinate's queue, real PostgreSQL,
the real aiogram and anthropic clients against the fakes. Heartbeats are short here (a
stalled timeout of 2 s) so a dead worker's turns move on quickly."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import pytest
from procrastinate.jobs import Status
from pydantic import SecretStr
from structlog.testing import capture_logs

from botkit import Bot, Settings, tool
from botkit.access import USER_CACHE_SECONDS
from botkit.agent.pool import known_head
from botkit.claimnotes import KNOWN_FOR
from botkit.messengers.flood import FloodControl
from botkit.metrics import TURN_OUTCOMES
from botkit.runtime.cluster import serve_queued
from botkit.runtime.pacing import LEASE_SECONDS
from botkit.runtime.queue import Sender, TurnQueue
from botkit.runtime.telegram import messenger_for
from botkit.sessions import PostgresSessionStore
from botkit.stores.migrate import migrate
from botkit.stores.postgres import PostgresUserStore
from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer, make_bot
from botkit.testing.anthropic import FakeRequest, is_note
from botkit.testing.telegram import TINY_PNG
from botkit.types import Message

STALLED = 2.0
"""BOTKIT_STALLED_TIMEOUT in these tests: heartbeats every 0.5 s."""


def queued_bot(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str, **more: Any
) -> Bot:
    """A bot on the fakes and the database, as a receiver or worker process would build it."""
    values: dict[str, Any] = {
        "database_url": SecretStr(db),
        "telegram_bot_token": SecretStr(telegram.token),
        "telegram_api_base": telegram.base_url,
        "access": "open",
        "stalled_timeout": STALLED,
        "poll_timeout": 1,
    }
    return make_bot(claude, tmp_path, **{**values, **more})


@asynccontextmanager
async def queued(
    bot: Bot, *, receive: bool = True, work: bool = True, concurrency: int = 8
) -> AsyncIterator[TurnQueue]:
    """``serve_queued`` in this loop while the block runs; on exit, stop it and wait."""
    from botkit.runtime.cluster import queue_for

    messenger = messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False)
    queue = queue_for(bot.settings, concurrency=concurrency)
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve_queued(
            bot,
            stop,
            receive=receive,
            work=work,
            concurrency=concurrency,
            messenger=messenger,
            queue=queue,
            grace_period=5,
        )
    )
    try:
        yield queue
    finally:
        stop.set()
        await task


async def until(predicate: Any, timeout: float = 20.0) -> None:  # noqa: ASYNC109
    """Wait until ``predicate()`` is true (polled), or fail saying so."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: {predicate}")
        await asyncio.sleep(0.05)


async def fetchval(db: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(db)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


# --- migrations -----------------------------------------------------------------------------


async def test_migrate_applies_the_job_queue_once(postgres_db: str) -> None:
    applied = await migrate(postgres_db)
    assert "005_job_queue" in applied
    assert await migrate(postgres_db) == []
    for table in ("procrastinate_jobs", "procrastinate_workers", "botkit_updates"):
        assert await fetchval(postgres_db, "SELECT to_regclass($1)::text", table) == table


async def test_a_worker_on_an_unmigrated_database_says_to_migrate(
    postgres_db: str, claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    from botkit.errors import ConfigError

    bot = queued_bot(claude, telegram, tmp_path, postgres_db)
    with pytest.raises(ConfigError, match="python -m botkit migrate"):
        async with queued(bot):
            pass


@pytest.mark.parametrize(
    "function",
    [
        "botkit_fetch_job(character varying[], bigint)",
        "botkit_finish_then_fetch_job(bigint, procrastinate_job_status, boolean,"
        " character varying[], bigint)",
    ],
)
async def test_a_worker_without_botkits_fetch_says_to_migrate(
    postgres_db: str,
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    function: str,
) -> None:
    """Every worker takes jobs with ``botkit_fetch_job`` (migration 021), a busy one as its
    last job ends with ``botkit_finish_then_fetch_job`` (022): a database without either is
    refused at start, not met by a fetch loop that fails at every poll."""
    from botkit.errors import ConfigError

    await migrate(postgres_db)
    await fetchval(postgres_db, f"DROP FUNCTION {function}")
    bot = queued_bot(claude, telegram, tmp_path, postgres_db)
    with pytest.raises(ConfigError, match="its fetch: run `python -m botkit migrate`"):
        async with queued(bot):
            pass


# --- receive and work -----------------------------------------------------------------------


async def test_run_with_a_database_answers_through_the_queue(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    bot = queued_bot(claude, telegram, tmp_path, db)
    async with queued(bot):
        telegram.send_text(7, "hello")
        [reply] = await telegram.wait_for_messages(7, 1, timeout=20)
    assert reply.text == "echo: hello"
    assert await fetchval(db, "SELECT count(*) FROM botkit_updates") == 1


async def test_each_users_turns_stay_in_order_across_three_workers(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    delays = random.Random(11)

    async def slow_echo(request: FakeRequest) -> FakeReply:
        await asyncio.sleep(delays.uniform(0, 0.15))
        return FakeReply.text(f"echo: {request.last_user_text()}")

    claude.responder = slow_echo
    users, per_user = list(range(101, 113)), 4
    receiver = queued_bot(claude, telegram, tmp_path, db)
    workers = [queued_bot(claude, telegram, tmp_path / f"w{n}", db) for n in range(3)]
    async with (
        queued(receiver, work=False),
        queued(workers[0]),
        queued(workers[1]),
        queued(workers[2]),
    ):
        for n in range(per_user):
            for user in users:
                telegram.send_text(user, f"u{user} m{n}")
        for user in users:
            await until(lambda user=user: len(answered(telegram, user)) >= per_user, timeout=60)
    # Messages sent during their user's running turn are answered together, in one turn (one
    # reply echoing each, as with ``run``): every message answered once, in order.
    for user in users:
        assert answered(telegram, user) == [f"u{user} m{n}" for n in range(per_user)]
    # Each turn saw every earlier message of its user, whichever worker wrote them.
    for user in users:
        last = f"u{user} m{per_user - 1}"
        [request] = [r for r in claude.requests if r.last_user_text().endswith(last)]
        said = [line for text in user_texts(request) for line in text.split("\n\n")]
        assert said == [f"u{user} m{n}" for n in range(per_user)], said
    served = {w: w.turns.usage_by_model for w in workers}
    assert sum(1 for usage in served.values() if usage) >= 2, "the turns were spread"


def answered(telegram: FakeTelegramServer, user: int) -> list[str]:
    """The messages ``user``'s replies answer, in order: the fake LLM echoes what it read, and
    messages gathered into one turn get one reply echoing each."""
    replies = [m.text.removeprefix("echo: ") for m in telegram.sent_messages(user)]
    return [line for text in replies for line in text.split("\n\n")]


def user_texts(request: FakeRequest) -> list[str]:
    """The user's words in each user message of ``request`` (botkit's notes left out)."""
    texts = []
    for message in request.body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        words = [b["text"] for b in content if b.get("type") == "text" and not is_note(b["text"])]
        texts.append("\n".join(words))
    return texts


async def test_an_update_delivered_twice_runs_once(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    bot = queued_bot(claude, telegram, tmp_path, db)
    async with queued(bot) as queue:
        update_id = telegram.send_text(8, "once")
        await telegram.wait_for_messages(8, 1, timeout=20)
        telegram.inject_update(telegram.injected[update_id])  # Telegram sends it again
        await queue.defer(telegram_bot_id(telegram), update_id, telegram.injected[update_id], "x")
        telegram.send_text(8, "after")
        await telegram.wait_for_messages(8, 2, timeout=20)
        await asyncio.sleep(0.5)
    assert [m.text for m in telegram.sent_messages(8)] == ["echo: once", "echo: after"]
    assert len(claude.requests) == 2


def telegram_bot_id(telegram: FakeTelegramServer) -> int:
    return telegram.bot_id


async def test_a_cached_context_sees_what_another_worker_appended(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    store_a, store_b = PostgresSessionStore.lazy(db), PostgresSessionStore.lazy(db)
    worker_a = queued_bot(claude, telegram, tmp_path, db, sessions=store_a)
    worker_b = queued_bot(claude, telegram, tmp_path, db, sessions=store_b)
    try:
        context_a = await worker_a.context_for(5)
        await context_a.append(Message.user_text("from A"))
        context_b = await worker_b.context_for(5)
        await context_b.append(Message.user_text("from B"))

        again = await worker_a.context_for(5)
        assert [m.text for m in again.messages] == ["from A", "from B"]
        assert await worker_a.context_for(5) is again, "unchanged: the cached one is kept"
    finally:
        await worker_a.aclose()
        await worker_b.aclose()


async def test_a_batch_of_updates_is_queued_in_order_copies_left_out(db: str) -> None:
    queue = TurnQueue(db)
    await queue.open()
    try:
        await queue.defer(1, 10, {"update_id": 10}, "user:5")
        jobs = [queue.job_for(1, n, {"update_id": n}, f"user:{n % 2}") for n in (11, 12, 13)]
        await queue.defer_all(jobs)  # one statement
        copy = queue.job_for(1, 10, {"update_id": 10}, "user:5")  # Telegram sent 10 again
        more = [queue.job_for(1, n, {"update_id": n}, "user:5") for n in (14, 15)]
        await queue.defer_all([more[0], copy, more[1]])  # one at a time, the copy left out
        rows = await queue.app.connector.execute_query_all_async(
            "SELECT args, lock FROM procrastinate_jobs ORDER BY id"
        )
    finally:
        await queue.close()
    queued = [(row["args"]["update"]["update_id"], row["lock"]) for row in rows]
    assert queued == [
        (10, "user:5"),
        (11, "user:1"),
        (12, "user:0"),
        (13, "user:1"),
        (14, "user:5"),
        (15, "user:5"),
    ]


async def test_a_claim_reads_the_conversations_last_number_for_its_turn(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    store = PostgresSessionStore.lazy(db)
    bot = queued_bot(claude, telegram, tmp_path, db, sessions=store)
    queue = TurnQueue(db)
    await queue.open()
    try:
        context = await bot.context_for(5)
        await context.append(Message.user_text("one"))
        await context.append(Message.user_text("two"))
        for update_id, lock in [(1, "user:5"), (2, "chat:chat_-7"), (3, "checkout:5")]:
            await queue.defer(1, update_id, {"update_id": update_id}, lock)
        jobs = await queue.app.connector.execute_query_all_async(
            "SELECT id, lock FROM procrastinate_jobs ORDER BY id"
        )
        claims = [await queue.claim(1, n, int(job["id"])) for n, job in enumerate(jobs, 1)]
        assert [(c.conversation, c.head) for c in claims if c] == [
            ("5", 2),
            ("chat_-7", 0),
            (None, 0),
        ]
    finally:
        await queue.close()
        await bot.aclose()


async def test_a_claim_reads_its_senders_record_and_time_zone(db: str) -> None:
    users = await PostgresUserStore.connect(db)
    queue = TurnQueue(db)
    await queue.open()
    try:
        ann = await users.upsert_user(5, "admin", "Ann")
        await users.set_timezone(5, "Asia/Tokyo")
        updates = [
            ({"update_id": 1, "message": {"from": {"id": 5}, "text": "hi"}}, "user:5"),
            ({"update_id": 2, "callback_query": {"from": {"id": 6}, "data": "x"}}, "user:6"),
            ({"update_id": 3}, "user:7"),
            ({"update_id": 4, "message": {"from": {"id": "x"}, "text": "hi"}}, "user:8"),
            ({"update_id": 5, "message": {"from": {"id": 2**63}, "text": "hi"}}, "user:9"),
        ]
        for update, lock in updates:
            await queue.defer(1, update["update_id"], update, lock)
        jobs = await queue.app.connector.execute_query_all_async(
            "SELECT id FROM procrastinate_jobs ORDER BY id"
        )
        claims = [await queue.claim(1, n, int(job["id"])) for n, job in enumerate(jobs, 1)]
        assert [c.sender for c in claims if c] == [
            Sender(5, ann, "Asia/Tokyo"),
            Sender(6, None, None),  # not stored, no zone set
            None,  # an update with no sender
            None,  # nor with one whose id is no integer PostgreSQL can take: claimed all the same
            None,
        ]
    finally:
        await queue.close()
        await users.close()


async def test_a_block_and_a_zone_set_elsewhere_count_at_the_users_next_queued_turn(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    bot = queued_bot(claude, telegram, tmp_path, db)
    users = await PostgresUserStore.connect(db)  # as the admin CLI, or another worker, would
    try:
        async with queued(bot):
            await users.upsert_user(43, "user", "Cy")
            telegram.send_text(43, "one")
            await telegram.wait_for_messages(43, 1)
            assert "time zone is UTC;" in claude.requests[-1].system_text
            await users.set_timezone(43, "Asia/Tokyo")  # the worker read UTC less than 10 s ago
            telegram.send_text(43, "two")
            await telegram.wait_for_messages(43, 2)
            assert "time zone is Asia/Tokyo;" in claude.requests[-1].system_text
            await users.set_blocked(43, True)  # and the user's record less than 3 s ago
            telegram.send_text(43, "three")
            replies = await telegram.wait_for_messages(43, 3)
    finally:
        await users.close()
    assert replies[-1].text == bot.options.rejection_text
    assert len(claude.requests) == 2


async def test_a_cached_context_takes_the_number_its_claim_read_once_and_while_fresh(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    store_a, store_b = PostgresSessionStore.lazy(db), PostgresSessionStore.lazy(db)
    worker_a = queued_bot(claude, telegram, tmp_path, db, sessions=store_a)
    worker_b = queued_bot(claude, telegram, tmp_path, db, sessions=store_b)
    try:
        cached = await worker_a.context_for(5)
        await cached.append(Message.user_text("from A"))
        await (await worker_b.context_for(5)).append(Message.user_text("from B"))

        known_head("5", 1)  # as if claimed before B appended: taken, the cached one is kept
        assert await worker_a.context_for(5) is cached
        again = await worker_a.context_for(5)  # taken once: read now, B's entry seen
        assert [m.text for m in again.messages] == ["from A", "from B"]

        await (await worker_b.context_for(5)).append(Message.user_text("B again"))
        known_head("5", 2)
        await asyncio.sleep(KNOWN_FOR + 0.1)  # too old: read again
        assert [m.text for m in (await worker_a.context_for(5)).messages][-1] == "B again"
        await (await worker_b.context_for(5)).append(Message.user_text("B once more"))
        known_head("5", 4)  # read with the claim, after B's append: rebuilt without a read
        assert [m.text for m in (await worker_a.context_for(5)).messages][-1] == "B once more"
    finally:
        await worker_a.aclose()
        await worker_b.aclose()


# --- a worker killed with SIGKILL -----------------------------------------------------------


def worker_process(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    db: str,
    *,
    stalled: float = STALLED,
) -> subprocess.Popen[bytes]:
    """``python -m botkit work`` (the default assistant) on the fakes and ``db``, with
    BOTKIT_STALLED_TIMEOUT = ``stalled``."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    env = {
        **keep,
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE": telegram.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": claude.base_url,
        "BOTKIT_DATABASE_URL": db,
        "BOTKIT_ACCESS": "open",
        "BOTKIT_STREAM_REPLIES": "false",
        "BOTKIT_STALLED_TIMEOUT": str(stalled),
        "BOTKIT_SESSIONS_DIR": str(tmp_path / "sessions"),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "botkit", "work", "--concurrency", "4"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@asynccontextmanager
async def killed_at_end(process: subprocess.Popen[bytes]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


async def test_a_killed_workers_turns_finish_on_another(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    release = asyncio.Event()

    async def stuck_at_first(request: FakeRequest) -> FakeReply:
        if not release.is_set():
            await release.wait()  # the first worker's calls hang until it is dead
        return FakeReply.text(f"echo: {request.last_user_text()}")

    claude.responder = stuck_at_first
    users = [201, 202, 203]
    receiver = queued_bot(claude, telegram, tmp_path, db)
    doomed = worker_process(telegram, claude, tmp_path, db)
    async with queued(receiver, work=False), killed_at_end(doomed):
        for user in users:
            telegram.send_text(user, f"question of {user}")
        await until(lambda: len(claude.requests) == len(users), timeout=60)
        doomed.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        release.set()
        survivor = queued_bot(claude, telegram, tmp_path / "survivor", db)
        async with queued(survivor, receive=False):
            for user in users:
                await telegram.wait_for_messages(user, 1, timeout=30)
            took = time.monotonic() - killed_at
            await asyncio.sleep(0.5)
    for user in users:
        assert [m.text for m in telegram.sent_messages(user)] == [f"echo: question of {user}"]
    assert took <= 15, f"the last reply came {took:.1f} s after the kill"
    assert len(claude.requests) == 2 * len(users)


async def test_an_answer_recorded_before_the_kill_is_resent_not_regenerated(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    for method in ("sendMessage", "sendRichMessage"):  # the answer cannot leave
        telegram.fail_next(method, error_code=500, times=1_000)
    receiver = queued_bot(claude, telegram, tmp_path, db)
    doomed = worker_process(telegram, claude, tmp_path, db)
    async with queued(receiver, work=False), killed_at_end(doomed):
        telegram.send_text(301, "remember me")
        sends = ("sendMessage", "sendRichMessage")
        await until(lambda: sum(len(telegram.requests_for(m)) for m in sends) >= 2, timeout=60)
        doomed.send_signal(signal.SIGKILL)
        telegram.clear_faults()
        survivor = queued_bot(claude, telegram, tmp_path / "survivor", db)
        async with queued(survivor, receive=False):
            [reply] = await telegram.wait_for_messages(301, 1, timeout=30)
            await asyncio.sleep(0.5)
    assert reply.text == "echo: remember me"
    assert len(claude.requests) == 1, "the recorded answer was sent again, not asked for again"


# --- webhooks -------------------------------------------------------------------------------

SECRET = "s3cret_Token-1"


@asynccontextmanager
async def webhook_receiver(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> AsyncIterator[str]:
    """A receiver (and a worker) in webhook mode; yields the URL to POST updates to."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bot = queued_bot(
        claude,
        telegram,
        tmp_path,
        db,
        webhook_url="https://bot.example.com/telegram/hook",
        webhook_secret=SecretStr(SECRET),
        webhook_listen=f"127.0.0.1:{port}",
    )
    async with queued(bot):
        await until(lambda: telegram.webhook is not None)
        yield f"http://127.0.0.1:{port}/telegram/hook"


def an_update(update_id: int, user: int, text: str) -> dict[str, Any]:
    chat = {"id": user, "type": "private", "first_name": "U"}
    sender = {"id": user, "is_bot": False, "first_name": "U"}
    message = {"message_id": update_id, "date": 1_700_000_000, "chat": chat, "from": sender}
    return {"update_id": update_id, "message": {**message, "text": text}}


async def raw_status(url: str, header: bytes) -> int:
    """The status a POST of an empty update with this raw header line gets (bytes as sent)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    body = b'{"update_id": 902}'
    writer.write(
        b"POST " + parts.path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n"
        % len(body)
        + b"Connection: close\r\n\r\n"
        + body
    )
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1])


async def test_webhook_refuses_forged_and_malformed_requests(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    good = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    async with (
        webhook_receiver(claude, telegram, tmp_path, db) as url,
        aiohttp.ClientSession() as http,
    ):
        assert telegram.webhook is not None
        assert telegram.webhook["secret_token"] == SECRET
        assert telegram.webhook["url"] == "https://bot.example.com/telegram/hook"
        update = an_update(900, 9, "forged")
        statuses = []
        for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}):
            async with http.post(url, json=update, headers=headers) as response:
                statuses.append(response.status)
        for body in (b"not json", b"[1, 2]", b'{"message": {}}', b'{"update_id": "9"}'):
            async with http.post(url, data=body, headers=good) as response:
                statuses.append(response.status)
        huge = io.BytesIO(b'{"update_id": 901, "padding": "' + b"x" * 1024 * 1024 + b'"}')
        async with http.post(url, data=huge, headers=good) as response:
            statuses.append(response.status)
        statuses.append(await raw_status(url, b"X-Telegram-Bot-Api-Secret-Token: \xff\xfe"))
        await asyncio.sleep(0.5)
    assert statuses == [401, 401, 400, 400, 400, 400, 413, 401]
    assert telegram.sent_messages() == []
    assert claude.requests == []
    assert await fetchval(db, "SELECT count(*) FROM procrastinate_jobs") == 0


async def test_webhook_queues_updates_and_journals_unreadable_ones(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    good = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    unreadable = {"update_id": 951, "message": {"message_id": 1, "chat": "not a chat"}}
    async with (
        webhook_receiver(claude, telegram, tmp_path, db) as url,
        aiohttp.ClientSession() as http,
    ):
        statuses = []
        for update in (an_update(950, 9, "hi"), unreadable, an_update(950, 9, "hi")):
            async with http.post(url, json=update, headers=good) as response:
                statuses.append(response.status)
        await telegram.wait_for_messages(9, 1, timeout=20)
        await asyncio.sleep(0.5)
    assert statuses == [200, 200, 200]
    assert [m.text for m in telegram.sent_messages(9)] == ["echo: hi"], "the retry ran once"
    error = await fetchval(db, "SELECT error FROM botkit_unparseable_updates WHERE update_id = 951")
    assert error == "message.date: Field required"


# --- start-up failures ----------------------------------------------------------------------


def botkit_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    keep = {k: v for k, v in keep.items() if not k.startswith("BOTKIT_")}
    return subprocess.run(
        [sys.executable, "-m", "botkit", *args],
        cwd=tmp_path,
        env={**keep, "TELEGRAM_BOT_TOKEN": "1:x", "ANTHROPIC_API_KEY": "sk-test-key", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", ["receive", "work", "run"])
def test_postgres_unreachable_at_start_is_one_sentence(tmp_path: Path, command: str) -> None:
    result = botkit_cli(
        tmp_path, command, BOTKIT_DATABASE_URL="postgresql://u:hunter2@127.0.0.1:9/db"
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("botkit: cannot reach PostgreSQL at BOTKIT_DATABASE_URL")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "hunter2" not in result.stderr


def test_webhook_mode_without_a_secret_is_one_line(tmp_path: Path) -> None:
    result = botkit_cli(
        tmp_path,
        "receive",
        BOTKIT_DATABASE_URL="postgresql://u@127.0.0.1:9/db",
        BOTKIT_WEBHOOK_URL="https://bot.example.com/hook",
    )
    assert result.returncode == 2
    assert result.stderr.startswith("botkit: BOTKIT_WEBHOOK_SECRET is not set")
    assert len(result.stderr.strip().splitlines()) == 1


# --- Telegram's limits across workers -------------------------------------------------------


@asynccontextmanager
async def two_workers_flood(
    telegram: FakeTelegramServer, db: str, rate: float, **more: Any
) -> AsyncIterator[tuple[Any, Any]]:
    """Two workers' pacing (each its own queue connection) on one database, sending to
    ``telegram``: what two worker processes of one bot would have."""
    from aiogram import Bot as AiogramBot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer

    from botkit.runtime.cluster import shared_flood

    settings = make_settings_for(telegram, db, global_rate=rate, **more)
    queues = [TurnQueue(db), TurnQueue(db)]
    api = AiogramBot(
        telegram.token, session=AiohttpSession(api=TelegramAPIServer.from_base(telegram.base_url))
    )
    try:
        for queue in queues:
            await queue.open()
        floods = [shared_flood(settings, queue) for queue in queues]
        yield (api, floods)
    finally:
        await api.session.close()
        for queue in queues:
            await queue.close()


def make_settings_for(telegram: FakeTelegramServer, db: str, **more: Any) -> Settings:
    from botkit.testing import make_settings

    return make_settings(
        Path("/nonexistent"),
        database_url=SecretStr(db),
        telegram_bot_token=SecretStr(telegram.token),
        telegram_api_base=telegram.base_url,
        **more,
    )


async def test_the_global_rate_is_shared_by_all_workers(
    telegram: FakeTelegramServer, db: str
) -> None:
    async with two_workers_flood(telegram, db, rate=20) as (api, floods):
        started = time.monotonic()

        async def burst(flood: FloodControl, first_chat: int) -> None:
            for chat in range(first_chat, first_chat + 15):  # other chats: only the global limit
                await flood.send(chat, lambda chat=chat: api.send_message(chat, "hi"))

        await asyncio.gather(burst(floods[0], 1_000), burst(floods[1], 2_000))
        took = time.monotonic() - started
    assert len(telegram.sent_messages()) == 30
    assert took >= 29 / 20 * 0.9, f"30 sends at 20/s over two workers took only {took:.2f} s"


async def test_a_429_seen_by_one_worker_holds_the_chat_for_the_others(
    telegram: FakeTelegramServer, db: str
) -> None:
    async with two_workers_flood(telegram, db, rate=30) as (api, floods):
        telegram.fail_next("sendMessage", error_code=429, retry_after=2)
        first = asyncio.create_task(floods[0].send(77, lambda: api.send_message(77, "one")))
        await until(lambda: telegram.requests_for("sendMessage"))
        await asyncio.sleep(0.3)  # the first worker has seen the 429 and shared it
        started = time.monotonic()
        await floods[1].send(77, lambda: api.send_message(77, "two"))
        waited = time.monotonic() - started
        await first
    assert waited >= 1.4, f"the second worker sent after {waited:.2f} s, inside the hold"
    assert sorted(m.text for m in telegram.sent_messages(77)) == ["one", "two"]


async def test_a_workers_sends_share_one_lease_of_the_bots_slots(
    telegram: FakeTelegramServer, db: str
) -> None:
    """Ten sends at once at 1000 a second take the next 100 ms of the bot's slots in one
    statement: not ten statements of one slot (1 ms) each."""
    async with two_workers_flood(telegram, db, rate=1000, paid_broadcast=True) as (_, floods):
        shared = floods[0].shared
        assert shared is not None
        waits = await asyncio.gather(*(shared.reserve(chat) for chat in range(1, 11)))
        ahead = await fetchval(
            db, "SELECT next_at - extract(epoch FROM clock_timestamp()) FROM botkit_send_pace"
        )
    assert max(waits) <= 0.011, "each its own slot, 1 ms apart"
    assert ahead > 0.03, f"the bot's slots were taken only {ahead:.3f} s ahead"


async def test_a_hold_written_during_a_lease_counts_from_the_next_lease(
    telegram: FakeTelegramServer, db: str
) -> None:
    async with two_workers_flood(telegram, db, rate=30) as (api, floods):
        await floods[1].send(5, lambda: api.send_message(5, "leased"))
        other = floods[0].shared
        assert other is not None
        await other.hold(77, 2.0)  # as a 429 the other worker saw does
        await asyncio.sleep(LEASE_SECONDS)
        started = time.monotonic()
        await floods[1].send(77, lambda: api.send_message(77, "held"))
        waited = time.monotonic() - started
    assert waited >= 1.5, f"sent after {waited:.2f} s, inside the other worker's hold"


# --- PostgreSQL lost while running ----------------------------------------------------------


async def cut_off(db: str, admin_dsn: str, *, allow: bool) -> None:
    """Refuse (or allow again) connections to ``db`` and drop the ones open: an outage."""
    name = urlsplit(db).path.lstrip("/")
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allow).lower()}')
        if not allow:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )
    finally:
        await admin.close()


async def test_an_outage_of_postgres_loses_no_update(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    db: str,
    postgres_dsn: str,
) -> None:
    bot = queued_bot(claude, telegram, tmp_path, db)
    with capture_logs() as logs:
        async with queued(bot):
            telegram.send_text(11, "before")
            await telegram.wait_for_messages(11, 1, timeout=20)
            # Its job done in the database too: a turn whose end the database never heard of
            # runs again after the outage (its recorded answer is sent twice; nothing is lost).
            while await fetchval(db, "SELECT count(*) FROM procrastinate_jobs"):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            await cut_off(db, postgres_dsn, allow=False)
            for user in (11, 12, 13):
                telegram.send_text(user, f"during {user}")
            await asyncio.sleep(6)  # past the pool's 5 s wait for a connection
            assert len(telegram.sent_messages()) == 1, "nothing is answered while it is away"
            await cut_off(db, postgres_dsn, allow=True)
            for user in (11, 12, 13):
                await telegram.wait_for_messages(user, 2 if user == 11 else 1, timeout=30)
            await asyncio.sleep(0.5)
    assert [m.text for m in telegram.sent_messages(11)] == ["echo: before", "echo: during 11"]
    for user in (12, 13):
        assert [m.text for m in telegram.sent_messages(user)] == [f"echo: during {user}"]
    lost = [e for e in logs if e["event"] == "queue.database_lost" and e["what"] == "receiver"]
    assert len(lost) == 1, "one line per outage"
    # The connection the receiver used a moment ago is lent unchecked and fails its query; one
    # rested CHECK_RESTED_AFTER seconds is checked, discarded, and no new one can be had.
    # The three updates come in one getUpdates batch, or the first alone: one statement.
    what, _, why = lost[0]["error"].partition(": ")
    assert what in (
        "cannot queue update 2",
        "cannot queue updates 2, 3",
        "cannot queue updates 2, 3, 4",
    )
    assert why in (
        "terminating connection due to administrator command",
        "couldn't get a connection after 5.00 sec",
    )
    worker_lost = [e for e in logs if e["event"] == "queue.database_lost" and e["what"] == "worker"]
    assert len(worker_lost) == 1, "the worker too: one line per outage"
    back = [e["what"] for e in logs if e["event"] == "queue.database_back"]
    assert sorted(back) == ["receiver", "worker"]


async def test_a_jobs_end_written_while_postgres_is_away_is_written_once_it_is_back(
    db: str, postgres_dsn: str
) -> None:
    """Else the job stays "doing" under a live worker: never retried as stalled, its lock
    holding the user's later turns for as long as that worker runs."""
    queue = TurnQueue(db)
    await queue.open()
    try:
        await queue.defer(1, 5, {"update_id": 5}, "user:5")
        manager = queue.app.job_manager
        job = await manager.fetch_job(queues=None, worker_id=await manager.register_worker())
        assert job is not None
        await cut_off(db, postgres_dsn, allow=False)
        ending = asyncio.create_task(manager.finish_job(job, Status.SUCCEEDED, delete_job=True))
        await asyncio.sleep(6)  # past the pool's 5 s wait for a connection
        assert not ending.done(), "still trying while the database is away"
        await cut_off(db, postgres_dsn, allow=True)
        await asyncio.wait_for(ending, 30)
        left = await queue.app.connector.execute_query_all_async(
            "SELECT id FROM procrastinate_jobs"
        )
    finally:
        await queue.close()
    assert left == [], "the job ended (and was deleted, as a successful job is)"


async def test_a_workers_log_records_copy_each_job_only_when_procrastinate_logs_at_info(
    db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each copy is the job with its whole update, four a job: botkit turns procrastinate's
    logs down to WARNING (it logs turns itself), and then makes none."""
    from procrastinate.jobs import Job

    copies = 0
    log_context = Job.log_context

    def counted(job: Job) -> Any:
        nonlocal copies
        copies += 1
        return log_context(job)

    monkeypatch.setattr(Job, "log_context", counted)
    queue = TurnQueue(db)
    ran: list[int] = []

    async def turn(job_id: int, update: dict[str, Any], attempts: int, during: bool) -> None:
        ran.append(job_id)

    queue.register(turn)
    await queue.open()
    try:
        for level, update_id in ((logging.WARNING, 1), (logging.INFO, 2)):
            caplog.set_level(level, logger="procrastinate")
            await queue.defer(1, update_id, {"update_id": update_id}, f"user:{update_id}")
            await queue.work(wait=False, install_signal_handlers=False, listen_notify=False)
            if level == logging.WARNING:
                quiet_copies, copies = copies, 0
    finally:
        await queue.close()
    assert len(ran) == 2
    assert quiet_copies == 0
    assert copies == 4, "at INFO, each of the job's records carries it, as procrastinate's do"
    started = [r for r in caplog.records if getattr(r, "action", None) == "start_job"]
    assert [r.job["task_kwargs"]["update"]["update_id"] for r in started] == [2]


async def test_receivers_and_workers_serve_metrics_and_readiness(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    bot = queued_bot(claude, telegram, tmp_path, db, metrics_port=0)
    async with queued(bot), aiohttp.ClientSession() as http:
        await until(lambda: bot.metrics.served_at is not None)
        telegram.send_text(21, "count me")
        await telegram.wait_for_messages(21, 1, timeout=20)
        await until(lambda: telegram.requests_for("getUpdates"))
        async with http.get(f"{bot.metrics.served_at}/readyz") as response:
            ready = (response.status, await response.text())
        async with http.get(f"{bot.metrics.served_at}/metrics") as response:
            metrics = await response.text()
    assert ready == (200, "ready\n")
    assert "sendMessage" in metrics


async def test_an_album_is_one_turn_through_the_queue(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    bot = queued_bot(claude, telegram, tmp_path, db)
    async with queued(bot):
        telegram.send_album(7, [TINY_PNG, TINY_PNG, TINY_PNG], caption="three receipts")
        [reply] = await telegram.wait_for_messages(7, 1, timeout=20)
        telegram.send_text(7, "thanks")
        await telegram.wait_for_messages(7, 2, timeout=20)
    assert reply.text.startswith("echo: ")
    assert len(claude.requests) == 2, "one LLM call for the album, one for the next message"
    content = claude.requests[0].messages[0]["content"]
    assert [block["type"] for block in content] == ["image", "image", "image", "text", "text"]
    assert is_note(content[3]["text"]), "the local time, between the pictures and the caption"


async def test_the_stop_button_reaches_the_worker_running_the_turn(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    started = asyncio.Event()

    @tool
    async def long_job() -> str:
        """Takes forever."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    def model(request: FakeRequest) -> FakeReply:
        if request.last_user_text() == "work":
            return FakeReply.tool_use("long_job", {}, text="Working on it.\n")
        return FakeReply.text("fresh answer")

    claude.responder = model
    receiver = queued_bot(claude, telegram, tmp_path, db)
    worker = queued_bot(claude, telegram, tmp_path / "w", db, stream_replies=True, tools=[long_job])
    async with queued(receiver, work=False), queued(worker, receive=False):
        telegram.send_text(31, "work")
        await asyncio.wait_for(started.wait(), 20)
        draft_id = telegram.drafts(31)[-1].params["draft_id"]
        chat = {"id": 31, "type": "private", "first_name": "U"}
        telegram.inject_update({"stopped_message_generation": {"chat": chat, "draft_id": draft_id}})
        [stopped] = await telegram.wait_for_messages(31, 1, timeout=20)
        telegram.send_text(31, "next")
        replies = await telegram.wait_for_messages(31, 2, timeout=20)
    assert stopped.text in ("Working on it.", worker.options.stopped_text)
    assert replies[1].text == "fresh answer"


# --- staleness: what one process changes counts on every worker within seconds --------------


def turns_run(bot: Bot) -> float:
    """Turns ``bot`` (one worker) has run, whatever their outcome, from its own metrics."""
    registry = bot.metrics.registry
    return sum(
        registry.get_sample_value("botkit_turns_total", {"outcome": outcome}) or 0.0
        for outcome in TURN_OUTCOMES
    )


async def on_every_worker(
    telegram: FakeTelegramServer, workers: list[Bot], user: int, text: str
) -> list[str]:
    """``user`` writes one message at a time until each worker has run one of them (so each
    has read the user's record); the replies, in order."""
    before = [turns_run(worker) for worker in workers]
    replies: list[str] = []
    for n in range(40):
        if all(turns_run(w) > b for w, b in zip(workers, before, strict=True)):
            return replies
        count = len(telegram.sent_messages(user))
        telegram.send_text(user, f"{text} {n}")
        replies += [m.text for m in (await telegram.wait_for_messages(user, count + 1))[count:]]
    raise AssertionError("40 messages in a row ran on the same worker")


async def test_a_redeemed_invite_and_a_block_count_on_every_worker_within_seconds(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    receiver = queued_bot(claude, telegram, tmp_path, db, access="invite")
    workers = [
        queued_bot(claude, telegram, tmp_path / f"w{n}", db, access="invite") for n in (1, 2)
    ]
    refused = receiver.options.rejection_text
    async with (
        queued(receiver, work=False),
        queued(workers[0], receive=False),
        queued(workers[1], receive=False),
    ):
        store = await receiver.access.user_store()  # as the admin CLI, or another worker, would
        assert set(await on_every_worker(telegram, workers, 41, "hello?")) == {refused}
        invite = await store.create_invite("user")
        telegram.send_text(41, f"/start {invite.code}")
        await until(lambda: telegram.sent_messages(41)[-1].text == receiver.options.welcome_text)
        await asyncio.sleep(USER_CACHE_SECONDS)  # every worker read the stranger before this
        admitted = await on_every_worker(telegram, workers, 41, "now?")
        await store.set_blocked(41, True)
        await asyncio.sleep(USER_CACHE_SECONDS)  # every worker read the member before this
        blocked = await on_every_worker(telegram, workers, 41, "still?")
    assert admitted == [f"echo: now? {n}" for n in range(len(admitted))]
    assert set(blocked) == {refused}


async def test_a_used_up_budget_counts_on_every_worker_at_once(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    receiver = queued_bot(claude, telegram, tmp_path, db)
    workers = [
        queued_bot(claude, telegram, tmp_path / f"w{n}", db, daily_token_budget=10) for n in (1, 2)
    ]
    async with (
        queued(receiver, work=False),
        queued(workers[0], receive=False),
        queued(workers[1], receive=False),
    ):
        telegram.send_text(42, "the whole allowance")
        [answer] = await telegram.wait_for_messages(42, 1, timeout=20)
        after = await on_every_worker(telegram, workers, 42, "more?")
    assert answer.text == "echo: the whole allowance"
    assert set(after) == {receiver.options.budget_text}
    assert len(claude.requests) == 1


# --- a worker stopped with SIGTERM, a receiver polling after a webhook ----------------------


async def test_sigterm_lets_a_workers_running_turn_finish(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    release = asyncio.Event()

    async def slow(request: FakeRequest) -> FakeReply:
        await release.wait()
        return FakeReply.text(f"echo: {request.last_user_text()}")

    claude.responder = slow
    receiver = queued_bot(claude, telegram, tmp_path, db)
    worker = worker_process(telegram, claude, tmp_path, db)
    async with queued(receiver, work=False), killed_at_end(worker):
        telegram.send_text(401, "take your time")
        await until(lambda: len(claude.requests) == 1, timeout=60)
        worker.send_signal(signal.SIGTERM)
        await asyncio.sleep(1.0)
        still_running = worker.poll() is None
        release.set()
        [reply] = await telegram.wait_for_messages(401, 1, timeout=20)
        await until(lambda: worker.poll() is not None, timeout=30)
    assert still_running, "the worker waited for its running turn"
    assert worker.returncode == 0
    assert reply.text == "echo: take your time"
    assert len(claude.requests) == 1
    assert await fetchval(db, "SELECT count(*) FROM procrastinate_jobs") == 0


async def test_a_polling_receiver_takes_over_from_a_webhook(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    telegram.webhook = {"url": "https://old.example.com/hook"}  # left by a webhook deployment
    bot = queued_bot(claude, telegram, tmp_path, db)
    async with queued(bot):
        telegram.send_text(402, "polling again")
        [reply] = await telegram.wait_for_messages(402, 1, timeout=20)
    assert reply.text == "echo: polling again"
    assert telegram.webhook is None
    assert telegram.requests_for("deleteWebhook")
