"""Running a bot on Telegram: polling, dispatching turns, shutting down cleanly.

The start-up steps the console shares (MCP tools, the Anthropic key check) live here too, so
both runtimes offer the same tools and fail the same way; aiogram is imported only to serve.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import TYPE_CHECKING

import structlog

from botkit.bot import Bot
from botkit.config import FREE_RATE
from botkit.dispatch import TurnDispatcher
from botkit.errors import LLMAuthError, MessengerError
from botkit.inbox import Inbox
from botkit.messengers.base import Messenger

if TYPE_CHECKING:
    from botkit.messengers.telegram import TelegramMessenger

__all__ = [
    "AUTH_FAILURE_TEXT",
    "check_llm",
    "mcp_tools",
    "messenger_for",
    "run_bot",
    "serve",
    "tell_admins",
]

log = structlog.get_logger(__name__)

INBOX_FILE = "inbox.jsonl"

AUTH_FAILURE_TEXT = (
    "Anthropic rejected ANTHROPIC_API_KEY, so I cannot answer anyone: set a valid key and "
    "restart me. Users are told I am unavailable meanwhile; I tell you this once."
)
"""What admins are told in Telegram when the key is rejected while serving."""


def messenger_for(bot: Bot) -> TelegramMessenger:
    """A Telegram messenger configured from the bot's settings."""
    from botkit.messengers.flood import FloodControl, FloodLimits
    from botkit.messengers.telegram import TelegramMessenger

    settings = bot.settings
    return TelegramMessenger(
        settings.require_telegram_token(),
        api_base=settings.telegram_api_base,
        poll_timeout=settings.poll_timeout,
        flood=FloodControl(FloodLimits(global_per_second=settings.send_rate)),
        inbox=Inbox(settings.sessions_dir / INBOX_FILE),
        answer_groups=settings.answer_groups,
        paid_broadcast=settings.paid_broadcast and settings.global_rate > FREE_RATE,
    )


async def serve(
    bot: Bot,
    stop: asyncio.Event,
    *,
    messenger: TelegramMessenger | None = None,
    grace_period: float | None = None,
) -> None:
    """Poll Telegram and answer until ``stop`` is set, then let running turns finish."""
    messenger = messenger or messenger_for(bot)
    bot.messenger = messenger
    inbox = messenger.inbox
    dispatcher = TurnDispatcher(
        lambda message: bot.handle_safely(message, messenger),
        max_concurrent=bot.settings.max_concurrent_turns,
        on_finished=(lambda message: inbox.done(message.update_id)) if inbox else None,
    )
    try:
        async with mcp_tools(bot):
            me = await messenger.start()
            await bot.on_start()
            await check_llm(bot, partial(tell_admins, bot, messenger))
            log.info("bot.started", username=me.username, model=bot.settings.model)
            await _publish_commands(bot, messenger)
            messenger.known_commands = frozenset(bot.commands) | {"start"}
            await messenger.poll(dispatcher.submit, bot.stop_turn, stop)
            log.info("bot.stopping", unfinished=len(dispatcher.unfinished))
            grace = bot.settings.grace_period if grace_period is None else grace_period
            if not await dispatcher.drain(grace):
                log.warning("bot.grace_period_over", unfinished=sorted(dispatcher.unfinished))
                await dispatcher.cancel_all()
    finally:
        await messenger.close()
        if inbox is not None:
            inbox.close()
        await bot.aclose()


@asynccontextmanager
async def mcp_tools(bot: Bot) -> AsyncIterator[None]:
    """Connect the MCP servers of BOTKIT_MCP_CONFIG and offer their tools inside the block."""
    if not bot.settings.mcp_config:
        yield
        return
    from botkit.tools.mcp import connect_mcp, parse_mcp_config

    async with connect_mcp(parse_mcp_config(bot.settings.mcp_config)) as tools:
        for tool in tools:
            bot.tools.register_tool(tool)
        yield


async def check_llm(
    bot: Bot, on_auth_failure: Callable[[LLMAuthError], Awaitable[None]] | None = None
) -> None:
    """Check the Anthropic key and model at no token cost (retried while unreachable), and
    have ``on_auth_failure`` told once if the key is rejected later.

    A rejected key or model raises ``ConfigError``; an LLM of another kind is left alone.
    """
    from botkit.llm.anthropic import AnthropicLLM

    llm = bot.llm
    if not isinstance(llm, AnthropicLLM):
        return
    if llm.on_auth_failure is None:
        llm.on_auth_failure = on_auth_failure
    await llm.verify()


async def tell_admins(bot: Bot, messenger: Messenger, error: LLMAuthError) -> None:
    """Tell every admin that the key was rejected; a failed send is logged, not raised."""
    for admin in sorted(bot.settings.admins):
        try:
            await messenger.send_text(admin, AUTH_FAILURE_TEXT)
        except MessengerError as e:
            log.warning("bot.admin_not_told", admin=admin, error=str(e))


async def _publish_commands(bot: Bot, messenger: TelegramMessenger) -> None:
    """Show the bot's commands in Telegram's menu; a failure here is not fatal."""
    try:
        changed = await messenger.sync_commands(bot.command_menu())
    except MessengerError as e:
        log.warning("bot.commands_not_set", error=str(e))
        return
    log.info("bot.commands", changed=changed, count=len(bot.commands))


def run_bot(bot: Bot) -> None:
    """Run ``bot`` until SIGINT or SIGTERM; a second signal stops at once."""
    asyncio.run(_main(bot))


async def _main(bot: Bot) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and main is not None:
            log.warning("bot.stopping_now")
            main.cancel()  # second signal: no more waiting
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    with suppress(asyncio.CancelledError):
        await serve(bot, stop)
