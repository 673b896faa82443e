"""Running a bot on Telegram: polling, dispatching turns, shutting down cleanly."""

from __future__ import annotations

import asyncio
import signal
from contextlib import suppress

import structlog

from botkit.bot import Bot
from botkit.dispatch import TurnDispatcher
from botkit.messengers.telegram import TelegramMessenger

__all__ = ["run_bot", "serve"]

log = structlog.get_logger(__name__)

GRACE_PERIOD = 25.0


async def serve(
    bot: Bot,
    stop: asyncio.Event,
    *,
    messenger: TelegramMessenger | None = None,
    grace_period: float = GRACE_PERIOD,
) -> None:
    """Poll Telegram and answer until ``stop`` is set, then let running turns finish."""
    settings = bot.settings
    messenger = messenger or TelegramMessenger(
        settings.require_telegram_token(),
        api_base=settings.telegram_api_base,
        poll_timeout=settings.poll_timeout,
    )
    dispatcher = TurnDispatcher(
        lambda message: bot.handle_safely(message, messenger),
        max_concurrent=settings.max_concurrent_turns,
    )
    try:
        me = await messenger.api.get_me()
        log.info("bot.started", username=me.username, model=settings.model)
        await messenger.poll(dispatcher.submit, stop)
        log.info("bot.stopping", unfinished=len(dispatcher.unfinished))
        if not await dispatcher.drain(grace_period):
            log.warning("bot.grace_period_over", unfinished=sorted(dispatcher.unfinished))
            await dispatcher.cancel_all()
    finally:
        await messenger.close()
        await bot.aclose()


def run_bot(bot: Bot) -> None:
    """Run ``bot`` until SIGINT or SIGTERM; a second signal stops at once."""
    asyncio.run(_main(bot))


async def _main(bot: Bot) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and main is not None:
            main.cancel()  # second signal: no more waiting
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    with suppress(asyncio.CancelledError):
        await serve(bot, stop)
