"""Run a ``Bot`` in the test's own event loop against a ``FakeTelegramServer``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pydantic import SecretStr

from botkit.bot import Bot
from botkit.messengers.flood import FloodControl
from botkit.messengers.telegram import TelegramMessenger
from botkit.runtime.telegram import messenger_for, serve
from botkit.testing.telegram import FakeTelegramServer

__all__ = ["running"]


@asynccontextmanager
async def running(
    bot: Bot,
    telegram: FakeTelegramServer,
    *,
    grace_period: float = 10.0,
    flood: FloodControl | None = None,
) -> AsyncIterator[TelegramMessenger]:
    """Poll ``telegram`` with ``bot`` while the block runs; on exit, finish turns and stop.

    Sends are unpaced unless ``flood`` is given, so tests do not wait on Telegram's limits.
    """
    settings = bot.settings.model_copy(
        update={
            "telegram_bot_token": SecretStr(telegram.token),
            "telegram_api_base": telegram.base_url,
        }
    )
    messenger = messenger_for(settings, flood=flood or FloodControl.unlimited(), poll_timeout=1)
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(bot, stop, messenger=messenger, grace_period=grace_period), name="botkit-serve"
    )
    try:
        yield messenger
    finally:
        stop.set()
        await task
