"""Running a bot on Telegram in one process: polling, scheduling turns, shutting down cleanly."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import TYPE_CHECKING

import structlog

from botkit.approvals.service import sweeping
from botkit.chats import conversation_of
from botkit.commands import command_menu
from botkit.config import FREE_RATE, Settings
from botkit.console.server import console_server
from botkit.errors import LLMAuthError, MessengerError
from botkit.log import configure_logging
from botkit.messengers.base import ButtonPress, Checkout, Messenger, Reaction
from botkit.ops import ReadinessCheck, ops_server, stores_check
from botkit.reminders.firing import FiringLoop
from botkit.runtime.base import ServedBot, freeze_startup_objects, until_signalled
from botkit.runtime.inbox import Inbox
from botkit.runtime.ownership import data_folder_held
from botkit.runtime.poison import journaled_turns
from botkit.runtime.scheduler import TurnDispatcher
from botkit.runtime.setup import check_llm, mcp_tools

if TYPE_CHECKING:
    from botkit.messengers.flood import FloodControl
    from botkit.messengers.telegram import TelegramMessenger

__all__ = [
    "AUTH_FAILURE_TEXT",
    "INBOX_FILE",
    "cancelled",
    "messenger_for",
    "publish_commands",
    "publish_commands_soon",
    "readiness",
    "run_bot",
    "serve",
    "tell_admins",
]

log = structlog.get_logger(__name__)

INBOX_FILE = "inbox.jsonl"
POLL_SLACK = 15.0
"""Seconds past the long-poll timeout after which a silent ``getUpdates`` makes /readyz fail."""

AUTH_FAILURE_TEXT = (
    "Anthropic rejected ANTHROPIC_API_KEY, so I cannot answer anyone: set a valid key and "
    "restart me. Users are told I am unavailable meanwhile; I tell you this once."
)
"""What admins are told in Telegram when the key is rejected while serving."""


def messenger_for(
    settings: Settings,
    *,
    flood: FloodControl | None = None,
    poll_timeout: int | None = None,
    inbox: bool = True,
) -> TelegramMessenger:
    """A Telegram messenger configured from ``settings`` (the runtime's, the CLI's, the tests').

    ``flood`` replaces the pacing to Telegram's limits (tests pass an unlimited one);
    ``inbox=False`` leaves out the journal, for commands that only send.
    """
    from botkit.messengers.flood import FloodControl, FloodLimits
    from botkit.messengers.telegram import TelegramMessenger

    limits = FloodLimits(global_per_second=settings.send_rate)
    return TelegramMessenger(
        settings.require_telegram_token(),
        api_base=settings.telegram_api_base,
        poll_timeout=settings.poll_timeout if poll_timeout is None else poll_timeout,
        flood=flood or FloodControl(limits),
        inbox=Inbox(settings.sessions_dir / INBOX_FILE) if inbox else None,
        answer_groups=settings.answer_groups,
        paid_broadcast=settings.paid_broadcast and settings.global_rate > FREE_RATE,
        operators_chat=settings.operators_chat,
        listen_in_groups=settings.transcribe_url is not None,
        rich_messages=settings.rich_messages,
    )


async def serve(
    bot: ServedBot,
    stop: asyncio.Event,
    *,
    messenger: TelegramMessenger | None = None,
    grace_period: float | None = None,
    freeze_startup: bool = False,
) -> None:
    """Poll Telegram and answer until ``stop`` is set, then let running turns finish.

    The data folder is held meanwhile: another bot's, or one another process serves from, is
    a ``ConfigError`` before anything in it is read. ``freeze_startup`` (what ``run_bot``
    does, owning its process) leaves the objects start-up made out of the garbage collector's
    full passes from then on.
    """
    bot_id = messenger.api.id if messenger is not None else bot.settings.bot_id
    with data_folder_held(bot.settings, bot_id):  # before the inbox journal is read
        await _serve(bot, stop, messenger, grace_period, freeze_startup=freeze_startup)


async def _serve(
    bot: ServedBot,
    stop: asyncio.Event,
    messenger: TelegramMessenger | None,
    grace_period: float | None,
    *,
    freeze_startup: bool,
) -> None:
    messenger = messenger or messenger_for(bot.settings)
    bot.messenger = messenger
    inbox = messenger.inbox
    firing_task: asyncio.Task[None] | None = None
    menus: asyncio.Task[None] | None = None
    approvals: asyncio.Task[None] | None = None
    presses: set[asyncio.Task[None]] = set()

    def on_press(press: ButtonPress) -> None:
        task = asyncio.create_task(bot.turns.handle_press(press, messenger))
        presses.add(task)
        task.add_done_callback(presses.discard)

    def on_reaction(reaction: Reaction) -> None:  # recorded beside running turns
        task = asyncio.create_task(bot.turns.handle_reaction(reaction))
        presses.add(task)
        task.add_done_callback(presses.discard)

    def on_checkout(checkout: Checkout) -> None:  # answered at once, beside running turns
        task = asyncio.create_task(bot.payments.answer_checkout(checkout, messenger))
        presses.add(task)
        task.add_done_callback(presses.discard)

    dispatcher = TurnDispatcher(
        journaled_turns(bot, messenger, inbox),
        key=lambda message: conversation_of(message, bot.settings.group_context),
        max_concurrent=bot.settings.max_concurrent_turns,
        on_finished=(lambda message: inbox.done(message.update_id)) if inbox else None,
    )
    firing = FiringLoop(bot, messenger, run_turn=dispatcher.run)  # task turns take slots too
    messenger.observe(bot.metrics)
    bot.metrics.watch_load(
        running=lambda: dispatcher.running,
        waiting=lambda: dispatcher.waiting,
        contexts=lambda: len(bot.contexts),
        inbox=(lambda: len(inbox.pending())) if inbox else None,
    )
    try:
        async with (
            ops_server(bot.settings, bot.metrics, readiness(bot, messenger)),
            console_server(bot, messenger),
            mcp_tools(bot),
        ):
            me = await messenger.start()
            await bot.on_start()
            await check_llm(bot, partial(tell_admins, bot, messenger))
            log.info("bot.started", username=me.username, model=bot.settings.model)
            messenger.known_commands = frozenset(bot.commands) | {"start"}
            menus = publish_commands_soon(bot, messenger)
            firing_task = asyncio.create_task(firing.run(stop), name="firing")
            approvals = sweeping(bot, messenger, stop)
            if freeze_startup:
                freeze_startup_objects()
            await messenger.poll(
                dispatcher.submit,
                bot.turns.stop_turn,
                stop,
                on_press=on_press,
                on_checkout=on_checkout,
                on_reaction=on_reaction,
            )
            log.info("bot.stopping", unfinished=len(dispatcher.unfinished))
            grace = bot.settings.grace_period if grace_period is None else grace_period
            await firing_task
            if not await dispatcher.drain(grace):
                log.warning("bot.grace_period_over", unfinished=sorted(dispatcher.unfinished))
                await dispatcher.cancel_all()
            await firing.drain(grace)
    finally:
        await cancelled(menus)
        await cancelled(approvals)
        if firing_task is not None and not firing_task.done():
            firing_task.cancel()
            await asyncio.gather(firing_task, return_exceptions=True)
        await firing.drain(0)
        await dispatcher.cancel_all()  # a task turn whose firing was cut short above
        await asyncio.gather(*presses, return_exceptions=True)
        await messenger.close()
        if inbox is not None:
            inbox.close()
        await bot.aclose()


def readiness(
    bot: ServedBot, messenger: TelegramMessenger, *, polling_too: bool = True
) -> list[ReadinessCheck]:
    """What ``/readyz`` checks: the stores answer and (if this process polls) polling
    Telegram works, recently."""

    async def polling() -> str | None:
        if messenger.poll_failure is not None:
            return f"polling Telegram fails: {messenger.poll_failure}"
        if messenger.polled_at is None:
            return "not polling Telegram yet"
        quiet = time.monotonic() - messenger.polled_at
        if quiet > messenger.poll_timeout + POLL_SLACK:
            return f"no answer from Telegram's getUpdates for {quiet:.0f} s"
        return None

    async def read_user() -> object:
        return await (await bot.access.user_store()).get_user(0)

    async def read_session() -> object:
        return await bot.sessions.load(0)

    stores = stores_check(read_user, read_session)
    return [polling, stores] if polling_too else [stores]


async def tell_admins(bot: ServedBot, messenger: Messenger, error: LLMAuthError) -> None:
    """Tell every admin that the key was rejected; a failed send is logged, not raised."""
    for admin in sorted(bot.settings.admins):
        try:
            await messenger.send_text(admin, AUTH_FAILURE_TEXT)
        except MessengerError as e:
            log.warning("bot.admin_not_told", admin=admin, error=str(e))


def publish_commands_soon(bot: ServedBot, messenger: TelegramMessenger) -> asyncio.Task[None]:
    """Publish the command menus in the background, so taking updates never waits for them
    (with hundreds of admins that is minutes of paced calls); cancel the task at exit."""
    return asyncio.create_task(_publish_safely(bot, messenger), name="command-menus")


async def cancelled(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` (if any) and wait until it has ended."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _publish_safely(bot: ServedBot, messenger: TelegramMessenger) -> None:
    try:
        await publish_commands(bot, messenger)
    except Exception as e:  # the menus are a convenience: the bot serves without them
        log.warning("bot.commands_not_set", error=f"{type(e).__name__}: {e}")


async def publish_commands(bot: ServedBot, messenger: TelegramMessenger) -> None:
    """Show the bot's commands in Telegram's menu, and admins the hidden ones in their own
    chats; only menus that differ are set, each call paced by the messenger's flood control.

    A failure is one log line (all the admins it concerns in one), never a stop.
    """
    try:
        changed = await messenger.sync_commands(command_menu(bot.commands))
    except MessengerError as e:
        log.warning("bot.commands_not_set", error=str(e))
        return
    log.info("bot.commands", changed=changed, count=len(bot.commands))
    admin_menu = command_menu(bot.commands, admin=True)
    if admin_menu == command_menu(bot.commands):
        return
    failed: dict[int, str] = {}
    admins = sorted(bot.settings.admins)
    for admin in admins:  # hidden commands: only in admins' own menus
        try:
            await messenger.sync_commands(admin_menu, chat_id=admin)
        except MessengerError as e:
            failed[admin] = str(e)
            if not _this_chat_only(e):  # Telegram unreachable: the others would fail alike
                break
    if failed:
        log.warning(
            "bot.admin_commands_not_set",
            admins=sorted(failed)[:20],
            count=len(failed),
            not_tried=len(admins) - admins.index(max(failed)) - 1,
            error=failed[min(failed)],
        )


def _this_chat_only(error: MessengerError) -> bool:
    """Whether Telegram refused the request for that chat alone (an admin who never opened a
    chat with the bot, or blocked it), not for every chat (unreachable, flooded)."""
    from aiogram.exceptions import TelegramBadRequest, TelegramForbiddenError, TelegramNotFound

    return isinstance(
        error.__cause__, TelegramBadRequest | TelegramForbiddenError | TelegramNotFound
    )


def run_bot(bot: ServedBot) -> None:
    """Run ``bot`` until SIGINT or SIGTERM; a second signal stops at once. Logs as
    ``python -m botkit run`` does (JSON, secrets redacted) unless the caller configured it."""
    if not structlog.is_configured():
        configure_logging(bot.settings.log_level, secrets=bot.settings.secret_values())
    asyncio.run(until_signalled(partial(serve, bot, freeze_startup=True)))
