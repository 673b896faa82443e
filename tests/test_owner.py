"""The first owner: ``run`` prints a one-time admin link when nobody can use the bot yet."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from structlog.testing import capture_logs

from botkit.access import open_user_store
from botkit.owner import owner_link
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, ask, isolated_settings

LINK = re.compile(r"No admin yet: open https://t\.me/(\w+)\?start=([\w-]+) within an hour")


def run_environment(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, home: Path
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TELEGRAM_", "ANTHROPIC_", "BOTKIT_"))
    }
    env.update(
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_API_BASE=telegram.base_url,
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=claude.base_url,
        BOTKIT_SESSIONS_DIR=str(home / "sessions"),
        BOTKIT_STREAM_REPLIES="false",
    )
    return env


async def test_run_prints_an_owner_link_that_makes_its_first_opener_admin(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "botkit",
        "run",
        cwd=tmp_path,
        env=run_environment(telegram, claude, tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 150)).decode()
        found = LINK.search(line)
        assert found is not None, line
        assert found.group(1) == telegram.bot_username
        stranger = await ask(telegram, 7, "/whoami", timeout=120)
        assert stranger.text.startswith("You are Telegram user 7. This bot is private")
        welcome = await ask(telegram, 42, f"/start {found.group(2)}", timeout=60)
        assert welcome.text == "Welcome! You're in. Just write to me."
        whoami = await ask(telegram, 42, "/whoami", timeout=60)
        assert whoami.text == "You are Telegram user 42; your role here: admin."
        again = await ask(telegram, 43, f"/start {found.group(2)}", timeout=60)
        assert again.text == "This invite link has already been used. Ask for a new one."
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 60)


async def test_no_owner_link_once_there_is_an_admin_or_an_allowlist(tmp_path: Path) -> None:
    assert await owner_link(isolated_settings(tmp_path, admins=frozenset({1})), "b") is None
    assert await owner_link(isolated_settings(tmp_path, allowed_users=frozenset({1})), "b") is None
    assert await owner_link(isolated_settings(tmp_path, access="open"), "b") is None
    settings = isolated_settings(tmp_path)
    link = await owner_link(settings, "my_bot")
    assert link is not None and link.startswith("https://t.me/my_bot?start=")
    store = await open_user_store(settings)
    try:
        (invite,) = await store.list_invites()
        assert (invite.role, invite.uses_left) == ("admin", 1)
        assert invite.expires_at is not None
        left = invite.expires_at - datetime.now(UTC)
        assert timedelta(minutes=55) < left <= timedelta(hours=1)
        await store.upsert_user(42, "admin")
    finally:
        await store.close()
    assert await owner_link(settings, "my_bot") is None, "an admin in the store: no more links"


async def test_creating_the_owner_link_is_logged_and_audited_without_its_code(
    tmp_path: Path,
) -> None:
    with capture_logs() as logs:
        link = await owner_link(isolated_settings(tmp_path), "my_bot")
    assert link is not None
    code = link.rsplit("=", 1)[1]
    [audit] = [e for e in logs if e["event"] == "admin.action"]
    assert (audit["action"], audit["actor"], audit["role"], audit["uses"]) == (
        "invites.create", "cli", "admin", 1
    )  # fmt: skip
    [created] = [e for e in logs if e["event"] == "owner.link_created"]
    assert created["invite"] == audit["target"] and code.startswith(created["invite"])
    assert created["invite"] != code and code not in repr(logs), "the code itself is secret"


async def test_doctor_shows_the_owner_link_while_the_bot_has_no_admin(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    env = run_environment(telegram, claude, tmp_path)
    doctor = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "botkit", "doctor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    [line] = [line for line in doctor.stdout.splitlines() if line[2:].startswith("Telegram:")]
    found = LINK.search(line)
    assert line.startswith("✓ ") and found is not None, doctor.stdout + doctor.stderr
    assert found.group(1) == telegram.bot_username
    settings = isolated_settings(tmp_path)
    store = await open_user_store(settings)
    try:
        (invite,) = await store.list_invites()
        assert (invite.role, invite.uses_left) == ("admin", 1)
        assert found.group(2).startswith(invite.prefix)
        await store.upsert_user(42, "admin")
    finally:
        await store.close()
    again = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "botkit", "doctor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "No admin yet" not in again.stdout, "an admin in the store: no link"
