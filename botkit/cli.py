"""The ``python -m botkit`` command line. Heavy imports wait until a command needs them."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from botkit.bot import Bot

__all__ = ["main"]

EXIT_CONFIG = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m botkit",
        description="Run a Claude agent bot on Telegram. Without a command: the default "
        "assistant. Configuration comes from the environment and .env (see README).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser("run", help="run a bot (the default assistant, or yours)")
    run.add_argument(
        "target",
        nargs="?",
        help="your bot as 'package.module:name', a Bot or a function returning one",
    )
    console = commands.add_parser("console", help="chat with a bot in this terminal")
    console.add_argument("target", nargs="?", help="your bot as 'package.module:name'")
    console.add_argument(
        "--user-id", type=int, default=1, help="who you are in the sessions (default 1)"
    )
    replay = commands.add_parser(
        "replay", help="print a session as a readable transcript (or JSON)"
    )
    replay.add_argument("session", help="a session file, or a user id (looked up in sessions)")
    replay.add_argument("--json", action="store_true", help="one JSON object per line")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the command, and return the exit status."""
    args = _parser().parse_args(argv)
    from botkit.errors import ConfigError

    try:
        if args.command in (None, "run"):
            return _run(getattr(args, "target", None))
        if args.command == "console":
            return _console(args.target, args.user_id)
        if args.command == "replay":
            from botkit.replay import replay

            return replay(args.session, as_json=args.json)
    except ConfigError as e:
        print(f"botkit: {e}", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def _run(target: str | None) -> int:
    from botkit.log import configure_logging

    bot = _load_bot(target)
    settings = bot.settings
    token = settings.require_telegram_token()
    bot.llm  # noqa: B018 - creating the client checks ANTHROPIC_API_KEY before we start
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else ""
    configure_logging(settings.log_level, secrets=[token, key])
    from botkit.app import run_bot  # aiogram takes seconds to import: only once we will run

    run_bot(bot)
    return 0


def _console(target: str | None, user_id: int) -> int:
    import asyncio

    from botkit.console import run_console
    from botkit.log import configure_logging

    bot = _load_bot(target)
    bot.llm  # noqa: B018 - creating the client checks ANTHROPIC_API_KEY before we start
    configure_logging("WARNING")
    # The person at the terminal is the operator: admitted, and an admin.
    bot.settings.admins = bot.settings.admins | {user_id}
    asyncio.run(run_console(bot, user_id=user_id))
    return 0


def _load_bot(target: str | None) -> Bot:
    from pydantic import ValidationError

    from botkit.bot import Bot
    from botkit.errors import ConfigError

    try:
        if target is None:
            from botkit.assistant import default_bot

            return default_bot()
        found = _import_target(target)
        bot = found() if callable(found) and not isinstance(found, Bot) else found
    except ValidationError as e:
        raise ConfigError(f"invalid setting: {_first_error(e)}") from e
    if not isinstance(bot, Bot):
        raise ConfigError(f"{target} is a {type(bot).__name__}, not a botkit.Bot")
    return bot


def _import_target(target: str) -> object:
    from botkit.errors import ConfigError

    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"expected 'package.module:name', got {target!r}")
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"cannot import {module_name!r}: {e}") from e
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(f"{module_name!r} has no attribute {attribute!r}") from None


def _first_error(e: object) -> str:
    from pydantic import ValidationError

    assert isinstance(e, ValidationError)
    error = e.errors()[0]
    where = ".".join(str(p) for p in error["loc"]) or "settings"
    return f"{where}: {error['msg']}"
