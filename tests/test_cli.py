"""``python -m botkit``: clear one-line errors for missing configuration."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from botkit.errors import LLMError
from botkit.llm.anthropic import AnthropicLLM
from botkit.testing import FakeAnthropicServer, FakeTelegramServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_botkit(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "ANTHROPIC_"))}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-m", "botkit", *args],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_missing_token_says_what_to_set(tmp_path: Path) -> None:
    result = run_botkit(tmp_path, ANTHROPIC_API_KEY="k")
    assert result.returncode == 2
    assert "TELEGRAM_BOT_TOKEN" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_api_key_says_what_to_set(tmp_path: Path) -> None:
    result = run_botkit(tmp_path, TELEGRAM_BOT_TOKEN="1:x")
    assert result.returncode == 2
    assert "ANTHROPIC_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("token", "command"),
    [
        ("abc", ["run"]),
        ("123456:AAH secret", ["run"]),
        ('"123456:AAHsecret"', ["run"]),
        ("123456:", ["receive"]),
        ("123456:AAH secret", ["invite", "--role", "user"]),
    ],
)
def test_a_malformed_token_is_one_sentence_and_exit_2(
    tmp_path: Path, token: str, command: list[str]
) -> None:
    result = run_botkit(tmp_path, *command, TELEGRAM_BOT_TOKEN=token, ANTHROPIC_API_KEY="k")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "botkit: TELEGRAM_BOT_TOKEN is not a bot token: it must look like 123456789:AAH... "
        "exactly as @BotFather gives it, without spaces or quotes."
    ]
    assert "secret" not in result.stderr, "the token is never quoted"


def test_dotenv_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=from-dotenv\n")
    result = run_botkit(tmp_path)
    assert result.returncode == 2
    assert "TELEGRAM_BOT_TOKEN" in result.stderr, "the key came from .env, the token is missing"


def test_bad_user_list_is_a_config_error(tmp_path: Path) -> None:
    result = run_botkit(tmp_path, TELEGRAM_BOT_TOKEN="1:x", BOTKIT_ALLOWED_USERS="12,abc")
    assert result.returncode == 2
    assert "allowed_users" in result.stderr.lower() or "BOTKIT_ALLOWED_USERS" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_target_that_is_not_a_bot(tmp_path: Path) -> None:
    (tmp_path / "notabot.py").write_text("thing = 42\n")
    result = run_botkit(tmp_path, "run", "notabot:thing")
    assert result.returncode == 2
    assert "not a botkit.Bot" in result.stderr


def test_run_target_that_does_not_exist(tmp_path: Path) -> None:
    result = run_botkit(tmp_path, "run", "nosuchmodule:bot")
    assert result.returncode == 2
    assert "cannot import 'nosuchmodule'" in result.stderr


async def test_a_bot_refusing_to_start_exits_with_its_reason(
    tmp_path: Path, telegram: FakeTelegramServer
) -> None:
    result = await asyncio.to_thread(
        run_botkit,
        tmp_path,
        "run",
        "team_bot:bot",
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_API_BASE=telegram.base_url,
        ANTHROPIC_API_KEY="k",
        BOTKIT_SESSIONS_DIR=str(tmp_path),
        PYTHONPATH=str(EXAMPLES),
    )
    assert result.returncode == 2
    assert "set BOTKIT_DATABASE_URL" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_rejected_token_is_one_clear_line(
    tmp_path: Path, telegram: FakeTelegramServer
) -> None:
    result = await asyncio.to_thread(
        run_botkit,
        tmp_path,
        TELEGRAM_BOT_TOKEN="999:WRONG",
        TELEGRAM_API_BASE=telegram.base_url,
        ANTHROPIC_API_KEY="k",
        BOTKIT_SESSIONS_DIR=str(tmp_path),
    )
    assert result.returncode == 2
    assert "Telegram rejected TELEGRAM_BOT_TOKEN" in result.stderr
    assert "Traceback" not in result.stderr and "WRONG" not in result.stderr


async def test_an_unknown_model_stops_the_start_naming_it(
    tmp_path: Path, telegram: FakeTelegramServer
) -> None:
    async with FakeAnthropicServer(models=["claude-test"]) as claude:
        result = await asyncio.to_thread(
            run_botkit,
            tmp_path,
            TELEGRAM_BOT_TOKEN=telegram.token,
            TELEGRAM_API_BASE=telegram.base_url,
            ANTHROPIC_API_KEY="k",
            ANTHROPIC_BASE_URL=claude.base_url,
            BOTKIT_MODEL="claude-sonet-9",
            BOTKIT_SESSIONS_DIR=str(tmp_path),
        )
    assert result.returncode == 2
    assert "'claude-sonet-9'" in result.stderr and "BOTKIT_MODEL" in result.stderr
    assert "Traceback" not in result.stderr
    assert not telegram.requests_for("getUpdates")


async def test_an_unreachable_messages_api_is_retried_at_start_then_reported() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    llm = AnthropicLLM(api_key="k", model="claude-test", base_url=f"http://127.0.0.1:{port}")
    try:
        with capture_logs() as logs, pytest.raises(LLMError, match="after 3 attempts"):
            await llm.verify(attempts=3, max_backoff=0)
    finally:
        await llm.close()
    assert [e["event"] for e in logs] == ["anthropic.check_retry"] * 2
