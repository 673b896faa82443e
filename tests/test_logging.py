"""Logs never carry the bot token, wherever it appears."""

from __future__ import annotations

import logging

import pytest
import structlog

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
