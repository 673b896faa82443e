"""Run a ``Bot`` in the test's own event loop against a ``FakeTelegramServer``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from botkit.app import serve
from botkit.bot import Bot
from botkit.config import FREE_RATE
from botkit.inbox import Inbox
from botkit.messengers.flood import FloodControl
from botkit.messengers.telegram import TelegramMessenger
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
    messenger = TelegramMessenger(
        telegram.token,
        api_base=telegram.base_url,
        poll_timeout=1,
        flood=flood or FloodControl.unlimited(),
        inbox=Inbox(bot.settings.sessions_dir / "inbox.jsonl"),
        answer_groups=bot.settings.answer_groups,
        paid_broadcast=bot.settings.paid_broadcast and bot.settings.global_rate > FREE_RATE,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(bot, stop, messenger=messenger, grace_period=grace_period), name="botkit-serve"
    )
    try:
        yield messenger
    finally:
        stop.set()
        await task
