"""``python -m botkit try [TARGET]``: a bot in the terminal, without keys.

TARGET (the default assistant, or yours, as for ``run``) answers the terminal's lines as
``console`` does: each line is a turn of the same pipeline Telegram messages take (the gates,
commands, the tool loop, the session files), in a fresh temporary folder. Without
ANTHROPIC_API_KEY the model is scripted (``botkit.tryout.scripted``, in this process: neither
aiogram nor the SDK is loaded, so the first answer comes within a second or two); with it,
Claude answers. BOTKIT_DATABASE_URL is never used: a try writes nothing outside its folder.
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
        "try", help="try a bot in this terminal, with a scripted model (no keys needed)"
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
    """Run ``try``: the bot loaded (on the scripted model without a key), the terminal loop
    until EOF."""
    folder = args.sessions or Path(tempfile.mkdtemp(prefix="botkit-try-"))
    with suppress(KeyboardInterrupt):
        asyncio.run(_try(args.target, folder.resolve()))
    return 0


async def _try(target: str | None, folder: Path) -> None:
    from botkit.errors import ConfigError
    from botkit.log import configure_logging
    from botkit.runtime.console import PlainView, run_console
    from botkit.targets import load_bot, load_settings
    from botkit.tryout.scripted import ScriptedLLM
    from botkit.tryout.session import offered_tools, sessions_note

    real_claude = load_settings().anthropic_api_key is not None
    _point_settings_at(folder, scripted=not real_claude)
    bot = load_bot(target)
    if bot.settings.database_url is not None:
        raise ConfigError(
            "try keeps everything in its own folder, but BOTKIT_DATABASE_URL is set in "
            ".env: run it from a folder without that line"
        )
    if not real_claude:
        bot.llm = ScriptedLLM(SCRIPTED_MODEL)
    configure_logging("WARNING", secrets=bot.settings.secret_values())
    bot.settings.admins = bot.settings.admins | {TRY_USER}
    print(_first_line(real_claude, bot.settings, _a_tool(bot)), flush=True)
    print(sessions_note(folder), flush=True)
    print(f"tools: {', '.join(await offered_tools(bot, TRY_USER)) or 'none'}")
    print("Write a message, /help for the commands; Ctrl-D ends.", flush=True)
    await run_console(bot, user_id=TRY_USER, stdin=sys.stdin, view=PlainView(sys.stdout))
    print(sessions_note(folder), flush=True)


def _first_line(real_claude: bool, settings: Settings, tool_name: str | None) -> str:
    """What is not the real thing in this run, said before anything else."""
    here = f"botkit try: you are user {TRY_USER} (an admin), chatting here instead of in Telegram"
    if real_claude:
        return f"{here}; Claude is real ({settings.model}): its answers cost tokens."
    example = f", e.g. 'use {tool_name}'" if tool_name else ""
    return (
        f"{here}, and Claude is a scripted model (it echoes, and calls a tool you "
        f"name{example}). Set ANTHROPIC_API_KEY to talk to Claude."
    )


def _a_tool(bot: Bot) -> str | None:
    """One of the bot's own tools, to name in the first line (``None`` when it has none)."""
    names = [definition.name for definition in bot.tools.definitions()]
    return next((n for n in names if n == "roll_dice"), names[0] if names else None)


def _point_settings_at(folder: Path, *, scripted: bool) -> None:
    """Make every ``Settings()`` from now on (the target's too) keep to ``folder``; with the
    scripted model, name it (its answers are labelled and priced as what they are)."""
    os.environ.pop("BOTKIT_DATABASE_URL", None)
    os.environ.pop("BOTKIT_METRICS_PORT", None)
    os.environ.update(
        BOTKIT_SESSIONS_DIR=str(folder),
        BOTKIT_DATABASE_PATH=str(folder / "botkit.db"),
        BOTKIT_STREAM_REPLIES="false",
    )
    if scripted:
        os.environ.update(BOTKIT_MODEL=SCRIPTED_MODEL)
