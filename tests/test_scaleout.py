"""Scale-out on PostgreSQL: receivers and workers on procrastinate's queue, real PostgreSQL,
the real aiogram and anthropic clients against the fakes. Heartbeats are short here (a
stalled timeout of 2 s) so a dead worker's turns move on quickly."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from pydantic import SecretStr

from botkit import Bot
from botkit.messengers.flood import FloodControl
from botkit.runtime.cluster import serve_queued
from botkit.runtime.queue import TurnQueue
from botkit.runtime.telegram import messenger_for
from botkit.sessions import PostgresSessionStore
from botkit.stores.migrate import migrate
from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer, make_bot
from botkit.testing.anthropic import FakeRequest
from botkit.types import Message

STALLED = 2.0
"""BOTKIT_STALLED_TIMEOUT in these tests: heartbeats every 0.5 s."""


@pytest.fixture
async def db(postgres_db: str) -> str:
    """A fresh database with botkit's migrations (the job queue included) applied."""
    await migrate(postgres_db)
    return postgres_db


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
            await telegram.wait_for_messages(user, per_user, timeout=60)
    for user in users:
        texts = [m.text for m in telegram.sent_messages(user)]
        assert texts == [f"echo: u{user} m{n}" for n in range(per_user)]
    # Each turn saw every earlier message of its user, whichever worker wrote them.
    last_calls = [r for r in claude.requests if r.last_user_text().endswith(f"m{per_user - 1}")]
    assert len(last_calls) == len(users)
    for request in last_calls:
        said = [m["content"] for m in request.body["messages"] if m["role"] == "user"]
        assert len(said) == per_user, said
    served = {w: w.usage_by_model for w in workers}
    assert sum(1 for usage in served.values() if usage) >= 2, "the turns were spread"


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
