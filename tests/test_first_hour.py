"""The small things a newcomer met in the first hour (#31, point 10): punctuation, plurals, the
tool count, /help, money in JSON, one --json convention, JSON logs from migrate, a hint for
``run mybot.py``, ``doctor | head``, and read-only commands that create nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from botkit import BotOptions
from botkit.stores import SqliteUserStore
from botkit.stores.base import ModelUsage
from botkit.stores.schedules import NewSchedule
from botkit.testing.anthropic import FakeAnthropicServer
from botkit.types import Usage

UNREACHABLE = "http://127.0.0.1:9"
ONE_TOOL_BOT = '''
from botkit import Bot, tool


@tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


bot = Bot(scheduling=False, memory=False, tools=[ping])
'''


def environment(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    clean = {k: v for k, v in clean.items() if not k.startswith("BOTKIT_")}
    return {**clean, "PYTHONDONTWRITEBYTECODE": "1", **extra}


def botkit(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botkit", *args],
        cwd=cwd,
        env=environment(**env),
        capture_output=True,
        text=True,
        timeout=400,  # a doctor that retries an unreachable API took 58 s on the loaded machine
    )


@pytest.mark.timeout(800)  # two doctors, each starting Python and retrying the network
async def test_doctor_counts_the_tools_the_model_gets_says_1_tool_and_never_doubles_a_full_stop(
    tmp_path: Path,
) -> None:
    (tmp_path / "onebot.py").write_text(ONE_TOOL_BOT)
    unreachable = {
        "TELEGRAM_BOT_TOKEN": "123:abcdefghijklmnop",
        "TELEGRAM_API_BASE": UNREACHABLE,
        "ANTHROPIC_API_KEY": "sk-ant-unreachable-test-key",
        "ANTHROPIC_BASE_URL": UNREACHABLE,
    }
    one, default = await asyncio.gather(
        asyncio.to_thread(botkit, tmp_path, "doctor", "onebot:bot", **unreachable),
        asyncio.to_thread(botkit, tmp_path, "doctor", **unreachable),
    )

    assert "onebot:bot builds (1 tool offered to a user, " in one.stdout, one.stdout
    # the assistant's clock and dice, the five scheduling tools and the memory every bot offers
    assert "the default assistant builds (8 tools offered to a user, " in default.stdout
    anthropic = [line for line in one.stdout.splitlines() if "Anthropic:" in line]
    assert anthropic and "Connection error: check the network" in anthropic[0], one.stdout
    assert ".:" not in one.stdout + default.stdout
    assert sorted(os.listdir(tmp_path)) == ["onebot.py"], "doctor made nothing"
    assert "will be made (mode 0700)" in one.stdout


@pytest.mark.timeout(300)
def test_doctor_into_head_ends_without_a_traceback(tmp_path: Path) -> None:
    env = environment(TELEGRAM_BOT_TOKEN="123:abc", TELEGRAM_API_BASE=UNREACHABLE)
    command = f"{sys.executable} -m botkit doctor | head -1"
    done = subprocess.run(
        command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.startswith("✓ bot: the default assistant builds"), done.stdout
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


@pytest.mark.timeout(400)  # five commands, each starting Python
def test_read_only_commands_in_an_empty_folder_create_nothing(tmp_path: Path) -> None:
    for command in (["users", "list"], ["invites", "list"], ["usage"], ["scheduled"]):
        done = botkit(tmp_path, *command)
        assert done.returncode == 0, (command, done.stderr)
    assert list(tmp_path.iterdir()) == [], "nothing was created"

    made = botkit(tmp_path, "invite", "--role", "user", "--bot-username", "some_bot")
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE((tmp_path / "sessions").stat().st_mode) == 0o700


def test_run_of_a_python_file_suggests_the_target(tmp_path: Path) -> None:
    done = botkit(tmp_path, "run", "mybot.py")
    assert done.returncode == 2
    assert "did you mean 'mybot:bot'?" in done.stderr, done.stderr


@pytest.mark.timeout(400)
async def test_every_json_output_is_json_lines_with_money_rounded(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir(mode=0o700)
    store = await SqliteUserStore.connect(folder / "botkit.db")
    await store.upsert_user(7, "user", "Ann")
    await store.upsert_user(8, "admin", "Bob")
    await store.create_invite("user")
    await store.create_invite("admin")
    today = datetime.now(UTC).date()
    # prices ($3 per million) that make 0.00011430000000000001 in floating point
    usage = Usage(input_tokens=37, cache_read_input_tokens=11)
    await store.add_model_usage([ModelUsage(7, today, "claude-sonnet-4-6", usage)])
    due = datetime(2030, 1, 1, 9, tzinfo=UTC)
    for text in ("one", "two"):
        await store.add_schedule(NewSchedule(7, 7, "reminder", text, due, "UTC"), max_pending=9)
    await store.close()

    outputs = {
        name: await asyncio.to_thread(botkit, tmp_path, *command, "--json")
        for name, command in {
            "users": ["users", "list"],
            "invites": ["invites", "list"],
            "usage": ["usage"],
            "scheduled": ["scheduled"],
        }.items()
    }
    for name, done in outputs.items():
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines()]
        expected = 3 if name == "usage" else 2  # usage: the day, the user's total, the model
        assert len(records) == expected and all(isinstance(r, dict) for r in records), (name, done)
    costs = re.findall(r'"cost_usd": ([0-9.e-]+)', outputs["usage"].stdout)
    assert costs and all(cost == "0.000114" for cost in costs), outputs["usage"].stdout


def test_migrate_logs_json_lines_like_the_other_commands(tmp_path: Path, postgres_db: str) -> None:
    done = botkit(tmp_path, "migrate", BOTKIT_DATABASE_URL=postgres_db)
    assert done.returncode == 0, done.stderr
    logged = [line for line in done.stderr.splitlines() if line.strip()]
    assert logged, "migrate says what it applies"
    assert all(isinstance(json.loads(line), dict) for line in logged), done.stderr


async def test_help_is_capitalised_and_the_console_offers_no_photos(
    tmp_path: Path, claude: FakeAnthropicServer
) -> None:
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-console-test-key",
        "ANTHROPIC_BASE_URL": claude.base_url,
        "BOTKIT_SESSIONS_DIR": str(tmp_path / "sessions"),
    }
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "botkit", "console", "--plain"],
        cwd=tmp_path,
        env=environment(**env),
        input="/help\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert BotOptions().console_help_text in done.stdout, done.stdout
    assert "photo" not in done.stdout.lower()
    descriptions = re.findall(r"^(?:bot> )?/\w+ — (.)", done.stdout, re.M)
    assert len(descriptions) >= 5 and all(d.isupper() for d in descriptions), done.stdout
