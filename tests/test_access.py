"""Who gets in: invite links, access modes, roles, budgets — on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from structlog.testing import capture_logs

from botkit import Bot, Incoming
from botkit.stores.migrate import migrate
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    ask,
    make_bot,
    running,
)

ADMIN, NEWCOMER, OTHER = 1201, 1202, 1203


ADMINS = frozenset({ADMIN})


def run_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    return subprocess.run(
        [sys.executable, "-m", "botkit", *args],
        env={**clean, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def invite_flow(telegram: FakeTelegramServer, claude: FakeAnthropicServer, bot: Bot) -> None:
    store = await bot.access.user_store()
    code = (await store.create_invite("cleaner", uses=1)).code
    expired = await store.create_invite("cleaner", expires_at=datetime.now(UTC) - timedelta(1))
    async with running(bot, telegram):
        assert (await ask(telegram, OTHER, "hello?")).text == bot.options.rejection_text
        assert (await ask(telegram, NEWCOMER, f"/start {code}")).text == bot.options.welcome_text
        assert (await ask(telegram, NEWCOMER, "hi")).text == "echo: hi"
        assert (
            await ask(telegram, OTHER, f"/start {code}")
        ).text == bot.options.invite_used_up_text
        assert (
            await ask(telegram, OTHER, "/start nonsense")
        ).text == bot.options.invite_unknown_text
        assert (await ask(telegram, OTHER, f"/start {expired.code}")).text == (
            bot.options.invite_expired_text
        )
    assert len(claude.requests) == 1, "only the admitted user's message reached the model"
    newcomer = await (await bot.access.user_store()).get_user(NEWCOMER)  # serving closed the first
    await bot.aclose()
    assert newcomer is not None and newcomer.role == "cleaner"


async def test_invite_link_onboarding_on_sqlite(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    await invite_flow(telegram, claude, make_bot(claude, tmp_path, admins=ADMINS))


async def test_invite_link_onboarding_on_postgres(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, postgres_db: str
) -> None:
    await migrate(postgres_db)
    bot = make_bot(claude, tmp_path, admins=ADMINS, database_url=postgres_db)
    await invite_flow(telegram, claude, bot)


async def test_cli_invite_prints_a_deep_link_that_works(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    result = await asyncio.to_thread(
        run_cli,
        tmp_path,
        "invite",
        "--role",
        "manager",
        "--uses",
        "2",
        "--expires",
        "2d",
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_API_BASE=telegram.base_url,
        BOTKIT_SESSIONS_DIR=str(tmp_path / "sessions"),
    )
    assert result.returncode == 0, result.stderr
    link = result.stdout.strip()
    match = re.fullmatch(
        rf"https://t\.me/{telegram.bot_username}\?start=([A-Za-z0-9_-]{{1,64}})", link
    )
    assert match, link
    bot = make_bot(claude, tmp_path, admins=ADMINS)
    async with running(bot, telegram):
        assert (
            await ask(telegram, NEWCOMER, f"/start {match.group(1)}")
        ).text == bot.options.welcome_text
    user = await (await bot.access.user_store()).get_user(NEWCOMER)
    assert user is not None and user.role == "manager"
    await bot.aclose()


def test_cli_migrate_needs_a_database_url(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "migrate")
    assert result.returncode == 2
    assert "BOTKIT_DATABASE_URL" in result.stderr and "Traceback" not in result.stderr


def test_cli_migrate_applies_once(tmp_path: Path, postgres_db: str) -> None:
    first = run_cli(tmp_path, "migrate", BOTKIT_DATABASE_URL=postgres_db)
    second = run_cli(tmp_path, "migrate", "--dsn", postgres_db)
    assert first.returncode == 0 and "applied: 001_users_and_invites" in first.stdout
    assert second.returncode == 0 and "up to date" in second.stdout


class RoleBot(Bot):
    """Managers and cleaners see different prompts and tools."""

    async def build_prompt(self, message: Incoming) -> str:
        assert message.user is not None
        return f"You assist a {message.user.role}."


async def test_roles_reach_the_prompt(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, admins=ADMINS, bot_class=RoleBot)
    store = await bot.access.user_store()
    await store.upsert_user(NEWCOMER, "manager")
    await store.upsert_user(OTHER, "cleaner")
    async with running(bot, telegram):
        await ask(telegram, NEWCOMER, "hi")
        await ask(telegram, OTHER, "hi")
    # The role's prompt comes first; the features' parts (reminders) follow it.
    prompts = sorted(r.system_text.split("\n\n")[0] for r in claude.requests)
    assert prompts == ["You assist a cleaner.", "You assist a manager."]


async def test_blocked_users_and_access_modes(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, admins=ADMINS, access="open")
    store = await bot.access.user_store()
    await store.upsert_user(OTHER, "user")
    await store.set_blocked(OTHER, True)
    async with running(bot, telegram):
        assert (await ask(telegram, NEWCOMER, "anyone home?")).text == "echo: anyone home?"
        assert (await ask(telegram, OTHER, "me too?")).text == bot.options.rejection_text

    allowlist = make_bot(
        claude, tmp_path, admins=ADMINS, access="allowlist", allowed_users=frozenset({OTHER})
    )
    async with running(allowlist, telegram):
        assert (await ask(telegram, NEWCOMER, "still?")).text == allowlist.options.rejection_text
        assert (await ask(telegram, ADMIN, "admin here")).text == "echo: admin here"


async def test_daily_budget_stops_llm_calls(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(
        claude, tmp_path, admins=ADMINS, allowed_users=frozenset({OTHER}), daily_token_budget=10
    )
    async with running(bot, telegram):
        assert (await ask(telegram, OTHER, "first")).text == "echo: first"
        assert (await ask(telegram, OTHER, "second")).text == bot.options.budget_text
    assert len(claude.requests) == 1
    used = await (await bot.access.user_store()).usage_on(OTHER, datetime.now(UTC).date())
    await bot.aclose()
    assert used >= 10


async def test_admin_creates_an_invite_from_chat(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text(request.tool_results()[0]["content"])
        if "create_invite" in request.tool_names:
            return FakeReply.tool_use("create_invite", {"role": "cleaner", "uses": 3})
        return FakeReply.text("no invite tool for you")

    claude.responder = model
    bot = make_bot(claude, tmp_path, admins=ADMINS, allowed_users=frozenset({OTHER}))
    async with running(bot, telegram):
        with capture_logs() as logs:
            link = (await ask(telegram, ADMIN, "invite a cleaner")).text
        refused = (await ask(telegram, OTHER, "invite a cleaner")).text
        code = link.split("start=")[1].split()[0]
        assert (await ask(telegram, NEWCOMER, f"/start {code}")).text == bot.options.welcome_text
    assert link.startswith(f"https://t.me/{telegram.bot_username}?start=")
    assert refused == "no invite tool for you"
    (audit,) = [e for e in logs if e["event"] == "admin.action"]
    assert (audit["actor"], audit["action"], audit["via"], audit["role"], audit["uses"]) == (
        ADMIN,
        "invites.create",
        "chat",
        "cleaner",
        3,
    )
    assert code.startswith(audit["target"]) and code not in str(logs), "the code is a secret"


def test_cli_invite_errors_are_one_clear_line(tmp_path: Path) -> None:
    sessions = str(tmp_path / "sessions")
    bad_uses = run_cli(
        tmp_path, "invite", "--role", "x", "--uses", "0", BOTKIT_SESSIONS_DIR=sessions
    )
    unreachable = run_cli(
        tmp_path,
        "invite",
        "--role",
        "x",
        TELEGRAM_BOT_TOKEN="1:x",
        TELEGRAM_API_BASE="http://127.0.0.1:9",
        BOTKIT_SESSIONS_DIR=sessions,
    )
    offline = run_cli(
        tmp_path, "invite", "--role", "x", "--bot-username", "my_bot", BOTKIT_SESSIONS_DIR=sessions
    )
    assert bad_uses.returncode == 2 and "--uses must be at least 1" in bad_uses.stderr
    assert unreachable.returncode == 2 and "pass --bot-username" in unreachable.stderr
    assert "Traceback" not in bad_uses.stderr + unreachable.stderr
    assert offline.returncode == 0 and offline.stdout.startswith("https://t.me/my_bot?start=")


def test_cli_migrate_errors_are_one_line_without_the_password(tmp_path: Path) -> None:
    refused = run_cli(tmp_path, "migrate", "--dsn", "postgresql://u:hunter2@127.0.0.1:9/db")
    nonsense = run_cli(tmp_path, "migrate", "--dsn", "not-a-dsn")
    for result in (refused, nonsense):
        assert result.returncode == 2
        assert result.stderr.startswith("botkit: cannot migrate the database")
        assert "Traceback" not in result.stderr and "hunter2" not in result.stderr
