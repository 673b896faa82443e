"""Run a ``Bot`` in the test's own event loop against a ``FakeTelegramServer``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from botkit.app import serve
from botkit.bot import Bot
from botkit.messengers.telegram import TelegramMessenger
from botkit.testing.telegram import FakeTelegramServer

__all__ = ["running"]


@asynccontextmanager
async def running(
    bot: Bot, telegram: FakeTelegramServer, *, grace_period: float = 10.0
) -> AsyncIterator[None]:
    """Poll ``telegram`` with ``bot`` while the block runs; on exit, finish turns and stop."""
    messenger = TelegramMessenger(telegram.token, api_base=telegram.base_url, poll_timeout=1)
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(bot, stop, messenger=messenger, grace_period=grace_period), name="botkit-serve"
    )
    try:
        yield
    finally:
        stop.set()
        await task
