"""``python -m botkit try [TARGET]``: a bot in the terminal, on a fake Telegram, without keys.

TARGET (the default assistant, or yours, as for ``run``) polls a local fake of the Bot API
like it polls Telegram, so the whole pipeline runs: aiogram, the gates, commands, the tool
loop and the session files, in a fresh temporary folder. Without ANTHROPIC_API_KEY the model
is scripted too (``botkit.tryout.scripted``); with it, Claude answers and only Telegram is
fake. BOTKIT_DATABASE_URL is never used: a try writes nothing outside its folder.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botkit.bot import Bot
    from botkit.config import Settings

__all__ = ["TRY_USER", "add_parser", "run"]

TRY_USER = 1
"""The Telegram user id of the person at the terminal (an admin of the bot they try)."""
SCRIPTED_MODEL = "botkit-scripted"
"""The model name of the scripted answers: free, and never mistaken for Claude's."""


def add_parser(commands: Any) -> None:
    """Add the ``try`` command to the CLI's subparsers."""
    parser = commands.add_parser(
        "try", help="try a bot in this terminal on a fake Telegram (no keys needed)"
    )
    parser.add_argument(
        "target", nargs="?", help="your bot as 'package.module:name' (default: the assistant)"
    )
    parser.add_argument(
        "--sessions",
        metavar="DIR",
        type=Path,
        help="where the session files go (default: a new temporary folder)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``try``: fakes up, the bot loaded against them, the terminal loop until EOF."""
    folder = args.sessions or Path(tempfile.mkdtemp(prefix="botkit-try-"))
    with suppress(KeyboardInterrupt):
        asyncio.run(_try(args.target, folder.resolve()))
    return 0


async def _try(target: str | None, folder: Path) -> None:
    from botkit.errors import ConfigError
    from botkit.log import configure_logging
    from botkit.targets import load_bot, load_settings
    from botkit.testing.anthropic import FakeAnthropicServer
    from botkit.testing.telegram import FakeTelegramServer
    from botkit.tryout.scripted import scripted_reply
    from botkit.tryout.session import sessions_note, try_bot

    real_claude = load_settings().anthropic_api_key is not None
    async with (
        FakeTelegramServer() as telegram,
        FakeAnthropicServer(responder=scripted_reply) as claude,
    ):
        _point_settings_at(telegram, None if real_claude else claude, folder)
        bot = load_bot(target)
        if bot.settings.database_url is not None:
            raise ConfigError(
                "try keeps everything in its own folder, but BOTKIT_DATABASE_URL is set in "
                ".env: run it from a folder without that line"
            )
        configure_logging("WARNING", secrets=bot.settings.secret_values())
        bot.settings.admins = bot.settings.admins | {TRY_USER}
        print(_first_line(real_claude, bot.settings, _a_tool(bot)), flush=True)
        print(sessions_note(folder), flush=True)
        await try_bot(bot, telegram, TRY_USER, sys.stdin, sys.stdout)
        print(sessions_note(folder), flush=True)


def _first_line(real_claude: bool, settings: Settings, tool_name: str | None) -> str:
    """What is fake in this run, said before anything else."""
    telegram = f"botkit try: Telegram is fake (a local Bot API; you are user {TRY_USER}, an admin)"
    if real_claude:
        return f"{telegram}; Claude is real ({settings.model}): its answers cost tokens."
    example = f", e.g. 'use {tool_name}'" if tool_name else ""
    return (
        f"{telegram}, and so is Claude (a scripted model: it echoes, and calls a tool you "
        f"name{example}). Set ANTHROPIC_API_KEY to talk to Claude."
    )


def _a_tool(bot: Bot) -> str | None:
    """One of the bot's own tools, to name in the first line (``None`` when it has none)."""
    names = [definition.name for definition in bot.tools.definitions()]
    return next((n for n in names if n == "roll_dice"), names[0] if names else None)


def _point_settings_at(telegram: Any, claude: Any, folder: Path) -> None:
    """Make every ``Settings()`` from now on (the target's too) use the fakes and ``folder``."""
    os.environ.pop("BOTKIT_DATABASE_URL", None)
    os.environ.update(
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_API_BASE=telegram.base_url,
        BOTKIT_SESSIONS_DIR=str(folder),
        BOTKIT_DATABASE_PATH=str(folder / "botkit.db"),
        BOTKIT_STREAM_REPLIES="false",
    )
    os.environ.pop("BOTKIT_METRICS_PORT", None)
    if claude is not None:
        os.environ.update(
            ANTHROPIC_API_KEY="try-without-a-key",
            ANTHROPIC_BASE_URL=claude.base_url,
            BOTKIT_MODEL=SCRIPTED_MODEL,  # its answers are labelled and priced as what they are
        )
