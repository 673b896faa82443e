"""Logs never carry the bot token, wherever it appears."""

from __future__ import annotations

import logging

import pytest
import structlog

from botkit.config import Settings
from botkit.log import REDACTED, configure_logging

TOKEN = "123456:SECRET-token-value"


def test_token_is_redacted_from_structlog_and_stdlib_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("INFO", secrets=[TOKEN])
    try:
        structlog.get_logger("t").info("request", url=f"https://api.example/bot{TOKEN}/getMe")
        logging.getLogger("aiogram.client").warning("failed: %s", f"bot{TOKEN}")
        try:
            raise RuntimeError(f"boom {TOKEN}")
        except RuntimeError:
            structlog.get_logger("t").exception("crash")
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    assert TOKEN not in err
    lines = err.strip().splitlines()
    assert len(lines) == 3
    assert all(REDACTED in line for line in lines), "url, stdlib message and traceback"


def test_every_secret_in_the_settings_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(
        _env_file=None,
        telegram_bot_token=TOKEN,
        anthropic_api_key="sk-ant-key-value",
        webhook_secret="hook-secret-value",
        database_url="postgresql://bot:pg-pass-value@db.internal/bot",
    )
    configure_logging("INFO", secrets=settings.secret_values())
    try:
        log = structlog.get_logger("t")
        log.info("db", error="password authentication failed for pg-pass-value")
        log.info("db", url="postgresql://bot:pg-pass-value@db.internal/bot")
        log.info("keys", values=["sk-ant-key-value", "hook-secret-value", TOKEN])
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    for secret in ("pg-pass-value", "sk-ant-key-value", "hook-secret-value", TOKEN):
        assert secret not in err
    assert err.count(REDACTED) == 5
