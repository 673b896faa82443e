"""Start-up: polling never waits for the command menus; one data folder, one bot."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from botkit import Bot, ConfigError
from botkit.messengers.flood import FloodControl
from botkit.runtime.cluster import queue_for, serve_queued
from botkit.runtime.telegram import messenger_for, serve
from botkit.stores.migrate import migrate
from botkit.testing import ask, make_bot, running
from botkit.testing.anthropic import FakeAnthropicServer
from botkit.testing.telegram import FakeTelegramServer

MANY_ADMINS = frozenset(range(10_001, 10_501))
MEMBER = 42
OTHER_TOKEN = "654321:OTHER-TOKEN"


async def first_poll_delay(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, home: Path, admins: frozenset[int]
) -> float:
    """Seconds from getMe to the first getUpdates of a bot with ``admins``, paced as served."""
    bot = make_bot(claude, home, admins=admins, allowed_users=frozenset({MEMBER}))
    telegram.requests.clear()
    async with running(bot, telegram, flood=FloodControl()):
        (poll, *_) = await telegram.wait_for_requests("getUpdates", timeout=15)
        assert (await ask(telegram, MEMBER, "hi")).text == "echo: hi"
        await telegram.wait_for_requests("setMyCommands")  # meanwhile, in the background
    (me,) = telegram.requests_for("getMe")
    return poll.at - me.at


async def test_500_admins_do_not_delay_the_first_poll(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    alone = await first_poll_delay(telegram, claude, tmp_path / "none", frozenset())
    crowded = await first_poll_delay(telegram, claude, tmp_path / "many", MANY_ADMINS)
    print(f"first getUpdates after getMe: {alone:.3f} s alone, {crowded:.3f} s with 500 admins")
    assert crowded - alone < 1.0, (alone, crowded)


async def test_menus_are_published_in_the_background_and_only_when_changed(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    admins = frozenset(range(10_001, 10_021))
    bot = make_bot(claude, tmp_path, admins=admins)
    async with running(bot, telegram):
        await telegram.wait_for_requests("setMyCommands", 1 + len(admins))
    assert all(telegram.commands({"type": "chat", "chat_id": a}) for a in admins)

    telegram.requests.clear()
    again = make_bot(claude, tmp_path, admins=admins)
    async with running(again, telegram):
        await telegram.wait_for_requests("getMyCommands", 1 + len(admins))
    assert not telegram.requests_for("setMyCommands"), "nothing changed, nothing set"


async def test_failing_menus_are_one_log_line_and_the_bot_serves(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    async with running(make_bot(claude, tmp_path), telegram):  # the default menu, set
        await telegram.wait_for_requests("setMyCommands")
    admins = frozenset(range(10_001, 10_031))
    bot = make_bot(claude, tmp_path, admins=admins, allowed_users=frozenset({MEMBER}))
    telegram.requests.clear()
    telegram.fail_next(
        "setMyCommands", error_code=400, description="Bad Request: chat not found", times=30
    )
    with capture_logs() as logs:
        async with running(bot, telegram):
            assert (await ask(telegram, MEMBER, "hi")).text == "echo: hi"
            await telegram.wait_for_requests("setMyCommands", len(admins))
            assert (await ask(telegram, MEMBER, "still there?")).text == "echo: still there?"
    failures = [e for e in logs if e["event"].endswith("commands_not_set")]
    assert [e["event"] for e in failures] == ["bot.admin_commands_not_set"]
    assert failures[0]["count"] == len(admins) and "chat not found" in failures[0]["error"]
    assert failures[0]["not_tried"] == 0


async def test_telegram_lost_while_publishing_menus_ends_it_with_one_line(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    async with running(make_bot(claude, tmp_path), telegram):  # the default menu, set
        await telegram.wait_for_requests("setMyCommands")
    admins = frozenset(range(10_001, 10_031))
    bot = make_bot(claude, tmp_path, admins=admins, allowed_users=frozenset({MEMBER}))
    telegram.requests.clear()
    telegram.fail_next("setMyCommands", error_code=502, description="Bad Gateway", times=1000)
    flood = FloodControl.unlimited(max_attempts=2, max_backoff=0)
    with capture_logs() as logs:
        async with running(bot, telegram, flood=flood):
            await telegram.wait_for_requests("setMyCommands", 2)
            assert (await ask(telegram, MEMBER, "hi")).text == "echo: hi"
    assert len(telegram.requests_for("setMyCommands")) == 2, "the first admin, tried twice"
    failures = [e for e in logs if e["event"].endswith("commands_not_set")]
    assert [(e["event"], e["count"], e["not_tried"]) for e in failures] == [
        ("bot.admin_commands_not_set", 1, len(admins) - 1)
    ]


# --- one data folder, one bot ------------------------------------------------------------------


async def refusal(bot: Bot) -> str:
    """Why serving ``bot`` is refused (it must be, before it asks Telegram anything)."""
    with pytest.raises(ConfigError) as refused:
        await serve(bot, asyncio.Event())
    return str(refused.value)


async def test_another_bot_and_a_second_process_are_refused_the_data_folder(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({MEMBER}))
    other = make_bot(claude, tmp_path, telegram_bot_token=SecretStr(OTHER_TOKEN))
    again = make_bot(
        claude,
        tmp_path,
        telegram_bot_token=SecretStr(telegram.token),
        allowed_users=frozenset({MEMBER}),
    )
    folder = tmp_path / "sessions"
    async with running(bot, telegram):
        assert (await ask(telegram, MEMBER, "hi")).text == "echo: hi"
        inbox = (folder / "inbox.jsonl").read_bytes()
        by_other = await refusal(other)
        by_same = await refusal(again)
        assert (folder / "inbox.jsonl").read_bytes() == inbox, "nothing of it was touched"
        assert (await ask(telegram, MEMBER, "still mine?")).text == "echo: still mine?"
    after_stop = await refusal(other)

    assert (
        by_other
        == after_stop
        == (
            f"{folder} (BOTKIT_SESSIONS_DIR) holds the data of bot {telegram.bot_id}, not of this "
            "bot (654321): give each bot its own BOTKIT_SESSIONS_DIR."
        )
    )
    assert by_same == (
        f"Another botkit process is already serving from {folder} (BOTKIT_SESSIONS_DIR): "
        "stop it first, or give this one a folder of its own."
    )
    async with running(again, telegram):  # the same bot, once the first stopped
        assert (await ask(telegram, MEMBER, "back")).text == "echo: back"


def botkit_cli(home: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "BOTKIT_"))}
    clean = {k: v for k, v in clean.items() if not k.startswith("ANTHROPIC_")}
    return subprocess.Popen(
        [sys.executable, "-m", "botkit", *args],
        cwd=home,
        env={**clean, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def refused_at_once(process: subprocess.Popen[str]) -> str:
    """The one line a refused command printed; it must exit 2 within 30 s."""
    _, stderr = await asyncio.to_thread(process.communicate, timeout=30)
    assert process.returncode == 2, stderr
    (line,) = stderr.strip().splitlines()
    return line


async def test_run_holds_the_folder_even_against_a_sigkill_leftover(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    env = {
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE": telegram.base_url,
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": claude.base_url,
        "BOTKIT_POLL_TIMEOUT": "1",
    }
    first = botkit_cli(tmp_path, "run", **env)
    try:
        await telegram.wait_for_requests("getUpdates", timeout=60)
        other = await refused_at_once(
            botkit_cli(tmp_path, **{**env, "TELEGRAM_BOT_TOKEN": OTHER_TOKEN})
        )
        second = await refused_at_once(botkit_cli(tmp_path, "run", **env))
        console = await refused_at_once(botkit_cli(tmp_path, "console", "--plain", **env))
        users = botkit_cli(tmp_path, "users", "list", **env)  # reading needs no lock
        _, problem = await asyncio.to_thread(users.communicate, timeout=30)
        assert users.returncode == 0, problem
    finally:
        first.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.communicate, timeout=30)

    assert other.startswith("botkit: sessions (BOTKIT_SESSIONS_DIR) holds the data of bot ")
    assert second.startswith("botkit: Another botkit process is already serving from sessions")
    assert console == second
    polls = len(telegram.requests_for("getUpdates"))
    after_kill = botkit_cli(tmp_path, "run", **env)
    try:
        await telegram.wait_for_requests("getUpdates", polls + 1, timeout=60)
    finally:
        after_kill.send_signal(signal.SIGTERM)
        await asyncio.to_thread(after_kill.communicate, timeout=60)
    assert after_kill.returncode == 0, "the killed process left no lock behind"


# --- one database, one bot ------------------------------------------------------------------------


@asynccontextmanager
async def queued(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    home: Path,
    db: str,
    *,
    receive: bool = True,
) -> AsyncIterator[None]:
    """``serve_queued`` for the bot of ``telegram`` on ``db`` while the block runs."""
    settings: dict[str, Any] = {
        "database_url": SecretStr(db),
        "telegram_bot_token": SecretStr(telegram.token),
        "telegram_api_base": telegram.base_url,
        "access": "open",
        "poll_timeout": 1,
    }
    bot = make_bot(claude, home, **settings)
    messenger = messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False)
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve_queued(
            bot,
            stop,
            receive=receive,
            messenger=messenger,
            queue=queue_for(bot.settings, concurrency=4),
            concurrency=4,
            grace_period=5,
        )
    )
    await asyncio.sleep(0)
    try:
        yield
        if task.done():
            task.result()
    finally:
        stop.set()
        await task


async def test_a_database_serves_one_bot_from_any_number_of_processes(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, postgres_db: str
) -> None:
    await migrate(postgres_db)
    async with FakeTelegramServer(token=OTHER_TOKEN, bot_id=654321) as stranger:
        async with (
            queued(claude, telegram, tmp_path / "a", postgres_db),
            queued(claude, telegram, tmp_path / "b", postgres_db, receive=False),
        ):
            telegram.send_text(7, "hello")
            [reply] = await telegram.wait_for_messages(7, 1, timeout=30)
            with pytest.raises(ConfigError) as refused:
                async with queued(claude, stranger, tmp_path / "c", postgres_db, receive=False):
                    await asyncio.sleep(5)
        assert not stranger.requests, "refused before it asked Telegram anything"

    assert reply.text == "echo: hello"
    assert str(refused.value) == (
        f"The database in BOTKIT_DATABASE_URL holds the data of bot {telegram.bot_id}, not of "
        "this bot (654321): give each bot its own database."
    )
    conn = await asyncpg.connect(postgres_db)
    try:
        assert await conn.fetchval("SELECT array_agg(bot_id) FROM botkit_bot") == [telegram.bot_id]
    finally:
        await conn.close()
