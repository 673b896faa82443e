"""The ``python -m botkit`` command line. Heavy imports wait until a command needs them."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from botkit.extras import require_extra, require_postgres
from botkit.targets import load_bot, load_settings

if TYPE_CHECKING:
    from botkit.bot import Bot

__all__ = ["main"]

EXIT_CONFIG = 2
EXIT_FAILURE = 1


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
    receive = commands.add_parser(
        "receive", help="take Telegram updates into the PostgreSQL job queue (scale-out)"
    )
    receive.add_argument("target", nargs="?", help="your bot as 'package.module:name'")
    work = commands.add_parser(
        "work", help="run turns from the PostgreSQL job queue (scale-out; any number of them)"
    )
    work.add_argument("target", nargs="?", help="your bot as 'package.module:name'")
    work.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="turns this worker runs at once (default BOTKIT_MAX_CONCURRENT_TURNS)",
    )
    console = commands.add_parser("console", help="chat with a bot in this terminal")
    console.add_argument("target", nargs="?", help="your bot as 'package.module:name'")
    console.add_argument(
        "--user-id", type=int, default=1, help="who you are in the sessions (default 1)"
    )
    console.add_argument(
        "--plain",
        action="store_true",
        help="plain text lines, for scripts and pipes (the default when stdout is not a terminal)",
    )
    doctor = commands.add_parser(
        "doctor", help="check the configuration: tokens, model, database, MCP servers, skills"
    )
    doctor.add_argument("target", nargs="?", help="your bot as 'package.module:name'")
    doctor.add_argument(
        "--conversation",
        metavar="KEY",
        help="also check that this conversation's cached prompt prefix stays put (a user id, "
        "or a group conversation's key): its record, and its prompt and tools built twice",
    )
    migrate = commands.add_parser("migrate", help="apply the PostgreSQL migrations, in order")
    migrate.add_argument("--dsn", help="PostgreSQL URL (default: BOTKIT_DATABASE_URL)")
    migrate.add_argument(
        "--from-sqlite",
        metavar="BOTKIT_DB",
        nargs="?",
        const="",
        help="then move the bot's SQLite store (default: the configured one) and what its "
        "folder holds there: users, invites, usage, reminders, handoffs, payments, approvals, "
        "memory, conversations; safe to run again",
    )
    invite = commands.add_parser("invite", help="create an invite link for new users")
    invite.add_argument("--role", required=True, help="the role new users get")
    invite.add_argument("--uses", type=int, default=1, help="how many may use it (default 1)")
    invite.add_argument("--expires", default="7d", help="lifetime: 30m, 12h, 7d, 2w (default 7d)")
    invite.add_argument("--bot-username", help="skip asking Telegram for the bot's username")
    replay = commands.add_parser(
        "replay", help="print a session as a readable transcript (or JSON)"
    )
    replay.add_argument(
        "session",
        nargs="?",
        help="a session file, a user id or conversation key (looked up in sessions); "
        "with --rerun also a folder of session files",
    )
    replay.add_argument("--json", action="store_true", help="one JSON object per line")
    replay.add_argument(
        "--rerun",
        action="store_true",
        help="run each recorded turn again through a bot and compare (exit 1: something changed)",
    )
    replay.add_argument("--bot", metavar="TARGET", help="the bot to re-run, as for 'run'")
    replay.add_argument(
        "--llm",
        choices=["live", "recorded"],
        default="live",
        help="live: ask the model (default); recorded: play the recorded answers back",
    )
    replay.add_argument(
        "--free", action="store_true", help="carry the re-run's own answers on (not anchored)"
    )
    replay.add_argument("--model", help="re-run with this model instead of the configured one")
    replay.add_argument("--report", metavar="FILE.html", help="also write an HTML comparison")
    replay.add_argument("--all", action="store_true", help="re-run every stored session")
    replay.add_argument(
        "--feedback",
        choices=["negative", "positive", "other"],
        help="re-run only the turns whose replies got this reaction (negative: 👎)",
    )
    replay.add_argument(
        "--judge",
        metavar="RUBRIC",
        help="have the model grade each changed answer against the recorded one by RUBRIC",
    )
    from botkit import tryout
    from botkit.admin import add_commands

    add_commands(commands)  # users, invites, usage
    from botkit.handoff import cli as handoff_cli

    handoff_cli.add_parser(commands)

    from botkit.payments import cli as payments_cli

    payments_cli.add_parser(commands)
    tryout.add_parser(commands)
    scheduled = commands.add_parser("scheduled", help="pending reminders and scheduled tasks")
    scheduled.add_argument("--user", type=int, help="only this user's")
    scheduled.add_argument("--json", action="store_true", help="one JSON object per line")
    scheduled_actions = scheduled.add_subparsers(dest="action", metavar="ACTION")
    cancel = scheduled_actions.add_parser(
        "cancel", help="cancel a pending reminder or task, whoever set it"
    )
    cancel.add_argument("id", type=int, help="its number, as the listing shows it")
    sessions = commands.add_parser(
        "sessions", help="move sessions between JSONL files and PostgreSQL"
    )
    sessions.add_argument(
        "action", choices=["export", "import"], help="export to or import from DIR"
    )
    sessions.add_argument("directory", metavar="DIR", help="a folder of <user_id>.jsonl files")
    sessions.add_argument("--dsn", help="PostgreSQL URL (default: BOTKIT_DATABASE_URL)")
    prune = commands.add_parser(
        "prune", help="remove session entries and media older than BOTKIT_RETENTION_DAYS"
    )
    prune.add_argument("--days", type=float, help="keep this many days (default: the setting)")
    prune.add_argument(
        "--dry-run", action="store_true", help="say what would be removed; change nothing"
    )
    return parser


def _code_kept_positional(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--`` before an invite code that starts with a dash (``invites revoke -F9W``).

    Invite codes are URL-safe Base64, so an old one may start with ``-``, which argparse would
    take for an unknown option.
    """
    args = list(argv)
    if args[:2] == ["invites", "revoke"] and len(args) == 3 and args[2] not in ("-h", "--help"):
        return [*args[:2], "--", args[2]]
    return args


def _replay(args: argparse.Namespace) -> int:
    """``replay``: print a session, or (``--rerun``) run it again and compare."""
    if args.rerun:
        from pathlib import Path

        from botkit.rerun.command import RerunOptions, rerun_command

        report = Path(args.report) if args.report else None
        options = RerunOptions(
            args.bot,
            args.llm,
            args.free,
            args.model,
            args.json,
            report,
            args.all,
            args.judge,
            args.feedback,
        )
        return rerun_command(args.session, options)
    flags = ("bot", "model", "report", "all", "free", "judge", "feedback")
    rerun_only = [flag for flag in flags if getattr(args, flag)]
    if rerun_only or args.llm != "live":
        flag = f"--{rerun_only[0]}" if rerun_only else "--llm"
        print(f"botkit: {flag} goes with --rerun", file=sys.stderr)
        return EXIT_CONFIG
    if args.session is None:
        print("botkit: name a session: a file, a user id or a conversation key", file=sys.stderr)
        return EXIT_CONFIG
    from botkit.replay import replay

    return replay(args.session, as_json=args.json)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the command, and return the exit status; a reader that goes away
    (``python -m botkit doctor | head``) ends the command quietly."""
    try:
        status = _command(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return EXIT_FAILURE
    return status


def _command(argv: Sequence[str] | None) -> int:
    """Parse ``argv``, run the command, and return the exit status."""
    args = _parser().parse_args(_code_kept_positional(sys.argv[1:] if argv is None else argv))
    from botkit.errors import BotkitError, ConfigError
    from botkit.targets import warn_unknown_settings

    if args.command != "doctor":  # doctor reports them as failed checks
        warn_unknown_settings()
    try:
        if args.command in (None, "run"):
            return _run(getattr(args, "target", None))
        if args.command == "receive":
            return _run(args.target, queued="receive")
        if args.command == "work":
            return _run(args.target, queued="work", concurrency=args.concurrency)
        if args.command == "console":
            return _console(args.target, args.user_id, plain=args.plain or not sys.stdout.isatty())
        if args.command == "try":
            from botkit import tryout

            return tryout.run(args)
        if args.command == "doctor":
            from botkit.doctor import doctor

            return doctor(args.target, conversation=args.conversation)
        if args.command == "migrate":
            return _migrate(args.dsn, args.from_sqlite)
        if args.command == "invite":
            return _invite(args.role, args.uses, args.expires, args.bot_username)
        if args.command == "replay":
            return _replay(args)
        if args.command == "users" and args.action in ("forget", "export"):
            from botkit.privacy.erase import run as run_privacy

            return run_privacy(args, load_settings())
        if args.command in ("users", "invites", "usage"):
            from botkit.admin import run_command

            return run_command(args, load_settings())
        if args.command == "scheduled":
            from botkit.reminders.listing import cancel_scheduled, list_scheduled

            if args.action == "cancel":
                return cancel_scheduled(load_settings(), args.id)
            return list_scheduled(load_settings(), args.user, as_json=args.json)
        if args.command == "handoffs":
            from botkit.handoff.cli import run as list_handoffs

            return list_handoffs(args)
        if args.command == "sessions":
            return _sessions(args.action, args.directory, args.dsn)
        if args.command == "prune":
            return _prune(args.days, dry_run=args.dry_run)
        if args.command == "payments":
            from botkit.payments import cli as payments_cli

            return payments_cli.run(args)
    except ConfigError as e:
        print(f"botkit: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except BotkitError as e:  # e.g. Telegram unreachable at start, after retries
        print(f"botkit: {e}", file=sys.stderr)
        return EXIT_FAILURE
    return 0


def _run(target: str | None, *, queued: str | None = None, concurrency: int | None = None) -> int:
    """``run`` (one process; on the job queue with BOTKIT_DATABASE_URL), ``receive``, ``work``."""
    from botkit.log import configure_logging

    bot = load_bot(target)
    settings = bot.settings
    settings.require_telegram_token()
    if queued != "receive":
        _check_local_config(bot)
    if concurrency is not None and concurrency < 1:
        from botkit.errors import ConfigError

        raise ConfigError(f"--concurrency must be at least 1, got {concurrency}")
    configure_logging(settings.log_level, secrets=settings.secret_values())
    if queued != "work":  # the front that takes messages says how to get in, if nobody can
        from botkit.owner import announce_owner_link

        if queued is None and settings.database_url is None:
            with _data_folder(bot):  # a folder another process serves: refused, no link made
                pass
        announce_owner_link(settings)
    if queued is None and settings.database_url is None:
        # aiogram takes seconds to import: only once we will run
        from botkit.runtime.telegram import run_bot

        run_bot(bot)
        return 0
    require_postgres("BOTKIT_DATABASE_URL" if queued is None else f"{queued!r}")
    from botkit.runtime.cluster import check_webhook_settings, run_queued

    check_webhook_settings(settings)
    run_queued(bot, receive=queued != "work", work=queued != "receive", concurrency=concurrency)
    return 0


def _check_local_config(bot: Bot) -> None:
    """What can be checked before any network call: the MCP file, the key being set."""
    if bot.settings.mcp_config:  # a bad MCP file stops us here, with one clear line
        require_extra("mcp", "mcp", "BOTKIT_MCP_CONFIG")
        from botkit.tools.mcp import parse_mcp_config

        parse_mcp_config(bot.settings.mcp_config)
    bot.llm  # noqa: B018 - creating the client checks ANTHROPIC_API_KEY before we start


def _console(target: str | None, user_id: int, *, plain: bool) -> int:
    import asyncio
    from contextlib import suppress

    from botkit.log import configure_logging
    from botkit.runtime.console import ConsoleView, PlainView, RichView, run_console

    bot = load_bot(target)
    _check_local_config(bot)
    configure_logging("WARNING", secrets=bot.settings.secret_values())
    # The person at the terminal is the operator: admitted, and an admin.
    bot.settings.admins = bot.settings.admins | {user_id}
    view: ConsoleView = PlainView(sys.stdout) if plain else RichView()
    with _data_folder(bot), suppress(KeyboardInterrupt):  # Ctrl-C ends it like Ctrl-D
        asyncio.run(run_console(bot, user_id=user_id, view=view))
    return 0


def _data_folder(bot: Bot) -> AbstractContextManager[None]:
    """The console writes sessions: on files it holds the data folder as ``run`` does."""
    from contextlib import nullcontext

    from botkit.runtime.ownership import data_folder_held, settings_bot_id

    if bot.settings.database_url is not None:
        return nullcontext()
    return data_folder_held(bot.settings, settings_bot_id(bot.settings))


def _migrate(dsn: str | None, from_sqlite: str | None = None) -> int:
    import asyncio

    from botkit.errors import ConfigError, StoreError
    from botkit.log import configure_logging

    settings = load_settings()
    configure_logging(settings.log_level, secrets=settings.secret_values())  # JSON, as the rest
    url = dsn or settings.database_url
    if url is None:
        raise ConfigError("BOTKIT_DATABASE_URL is not set (the SQLite store needs no migrations)")
    require_postgres("'migrate'")
    from botkit.stores.migrate import migrate

    text = url if isinstance(url, str) else url.get_secret_value()
    try:
        applied = asyncio.run(migrate(text))
    except StoreError as e:
        raise ConfigError(str(e)) from e
    print("applied: " + ", ".join(applied) if applied else "nothing to apply: up to date")
    if from_sqlite is not None:
        _move_from_sqlite(text, from_sqlite)
    return 0


def _move_from_sqlite(dsn: str, path: str) -> None:
    """Copy the SQLite store at ``path`` (or the configured one) and the session files next to
    it into PostgreSQL; what is there already is kept, so a second run changes nothing."""
    import asyncio
    from pathlib import Path

    from botkit.errors import ConfigError, SessionError, StoreError
    from botkit.sessions.transfer import transfer
    from botkit.stores.from_sqlite import copy_from_sqlite

    settings = load_settings()
    source = Path(path) if path else settings.database_path or settings.sessions_dir / "botkit.db"
    try:
        print(asyncio.run(copy_from_sqlite(source, dsn)).summary)
        report = asyncio.run(transfer("import", dsn, source.parent))
    except (StoreError, SessionError) as e:
        raise ConfigError(str(e)) from e
    for note in report.notes:
        print(note, file=sys.stderr)
    print(report.summary)


def _sessions(action: str, directory: str, dsn: str | None) -> int:
    import asyncio
    from pathlib import Path

    from botkit.errors import ConfigError, SessionError

    url = dsn or load_settings().database_url
    if url is None:
        raise ConfigError("BOTKIT_DATABASE_URL is not set: sessions are JSONL files already")
    require_postgres("'sessions'")
    from botkit.sessions.transfer import transfer

    text = url if isinstance(url, str) else url.get_secret_value()
    try:
        report = asyncio.run(transfer(action, text, Path(directory)))
    except SessionError as e:
        raise ConfigError(f"cannot {action} sessions: {e}") from e
    for note in report.notes:
        print(note, file=sys.stderr)
    print(report.summary)
    return 0


def _prune(days: float | None, *, dry_run: bool) -> int:
    import asyncio

    from botkit.errors import ConfigError
    from botkit.sessions.retention import prune

    settings = load_settings()
    keep = settings.retention_days if days is None else days
    if keep is None:
        raise ConfigError("BOTKIT_RETENTION_DAYS is not set: pass --days N to say what to keep")
    if keep <= 0:
        raise ConfigError(f"--days must be more than 0, got {keep:g}")
    report = asyncio.run(prune(settings, keep, dry_run=dry_run))  # SessionError: exit 1
    for note in report.notes:
        print(note)
    print(report.summary)
    return 0


def _invite(role: str, uses: int, expires: str, bot_username: str | None) -> int:
    import asyncio
    from datetime import UTC, datetime

    from botkit.admin import cli_admin
    from botkit.bot import Bot
    from botkit.errors import ConfigError
    from botkit.invites import invite_link, parse_duration
    from botkit.log import configure_logging

    lifetime = parse_duration(expires)
    if uses < 1:
        raise ConfigError(f"--uses must be at least 1, got {uses}")
    settings = load_settings()
    configure_logging(settings.log_level, secrets=settings.secret_values())
    bot = Bot(settings=settings)

    async def create() -> str:
        try:
            username = bot_username or await _bot_username(bot)
            admin = cli_admin(await bot.access.user_store())
            invite = await admin.create_invite(role, uses, datetime.now(UTC) + lifetime)
            return invite_link(username, invite.code)
        finally:
            await bot.aclose()

    print(asyncio.run(create()))
    return 0


async def _bot_username(bot: Bot) -> str:
    from botkit.errors import ConfigError, MessengerError
    from botkit.messengers.flood import FloodControl
    from botkit.runtime.telegram import messenger_for

    messenger = messenger_for(bot.settings, flood=FloodControl(max_attempts=2), inbox=False)
    try:
        me = await messenger.start()
    except MessengerError as e:
        raise ConfigError(
            f"cannot ask Telegram for the bot's username ({e}); pass --bot-username"
        ) from e
    finally:
        await messenger.close()
    return me.username or ""
