"""The scale-out processes: ``receive``, ``work``, and ``run`` with BOTKIT_DATABASE_URL (both).

They share the job queue in PostgreSQL (``botkit.runtime.queue``), the bot's turn pipeline
and its stores; nothing is kept on the machine, so any of them may run anywhere, any number
of workers at once. PostgreSQL unreachable at start is one sentence and exit status 2.
"""

from __future__ import annotations

import asyncio
import logging
import re
from contextlib import AsyncExitStack
from functools import partial
from typing import TYPE_CHECKING

import structlog

from botkit.config import Settings
from botkit.console.server import console_server, queue_workers
from botkit.errors import ConfigError
from botkit.metrics import Metrics
from botkit.ops import ops_server
from botkit.runtime.base import ServedBot, freeze_startup_objects, until_signalled
from botkit.runtime.ownership import claim_database
from botkit.runtime.queue import QueueTimings, TurnQueue
from botkit.runtime.setup import mcp_tools

if TYPE_CHECKING:
    from botkit.messengers.flood import FloodControl
    from botkit.messengers.telegram import TelegramMessenger

__all__ = [
    "check_webhook_settings",
    "queue_for",
    "run_queued",
    "serve_queued",
    "shared_flood",
]

log = structlog.get_logger(__name__)

_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


def queue_for(settings: Settings, *, concurrency: int = 0) -> TurnQueue:
    """The job queue in BOTKIT_DATABASE_URL, with the heartbeats of BOTKIT_STALLED_TIMEOUT."""
    if settings.database_url is None:
        raise ConfigError("BOTKIT_DATABASE_URL is not set: receivers and workers share a queue")
    stalled = settings.stalled_timeout
    timings = QueueTimings(heartbeat=stalled / 4, stalled_after=stalled)
    pool_size = 4 + concurrency // 4
    return TurnQueue(settings.database_url.get_secret_value(), pool_size=pool_size, timings=timings)


def shared_flood(settings: Settings, queue: TurnQueue) -> FloodControl:
    """Pacing to Telegram's limits with the global rate and 429 holds shared in ``queue``'s
    database by every process of this bot."""
    from botkit.messengers.flood import FloodControl, FloodLimits
    from botkit.runtime.pacing import SharedPacing

    shared = SharedPacing(queue, settings.bot_id, settings.send_rate)
    return FloodControl(FloodLimits(global_per_second=settings.send_rate), shared=shared)


def check_webhook_settings(settings: Settings) -> None:
    """Webhook mode needs a secret Telegram will accept: ``ConfigError`` saying what to set."""
    if settings.webhook_url is None:
        return
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else ""
    if not secret:
        raise ConfigError(
            "BOTKIT_WEBHOOK_SECRET is not set: webhook mode needs a secret of 1-256 letters, "
            "digits, _ or - (e.g. from `openssl rand -hex 32`)."
        )
    if _SECRET.fullmatch(secret) is None:
        raise ConfigError("BOTKIT_WEBHOOK_SECRET may hold only 1-256 of A-Z a-z 0-9 _ -.")


async def serve_queued(
    bot: ServedBot,
    stop: asyncio.Event,
    *,
    receive: bool = True,
    work: bool = True,
    concurrency: int | None = None,
    messenger: TelegramMessenger | None = None,
    queue: TurnQueue | None = None,
    grace_period: float | None = None,
    freeze_startup: bool = False,
) -> None:
    """Receive into the queue, work from it, or both, until ``stop`` is set.

    ``freeze_startup`` (what ``run_queued`` does, owning its process) leaves the objects
    start-up made out of the garbage collector's full passes from then on.
    """
    from botkit.runtime.telegram import messenger_for, readiness

    settings = bot.settings
    check_webhook_settings(settings)
    # procrastinate says "job started/succeeded" at INFO for every turn: botkit logs turns.
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    # psycopg's pool warns at every reconnection attempt: an outage is logged once, by botkit.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    slots = concurrency or settings.max_concurrent_turns
    queue = queue or queue_for(settings, concurrency=slots if work else 0)
    await queue.open()
    messenger = messenger or messenger_for(
        settings, inbox=False, flood=shared_flood(settings, queue)
    )
    messenger.observe(bot.metrics)
    bot.metrics.watch_load(contexts=lambda: len(bot.contexts))
    bot.metrics.refresh_on_scrape(partial(_count_waiting, bot.metrics, queue))
    polling = receive and settings.webhook_url is None
    checks = [*readiness(bot, messenger, polling_too=polling), queue.check]
    async with AsyncExitStack() as stack:
        stack.push_async_callback(bot.aclose)
        stack.push_async_callback(queue.close)
        stack.push_async_callback(messenger.close)
        await claim_database(queue, settings.bot_id)
        await stack.enter_async_context(ops_server(settings, bot.metrics, checks))
        if receive:  # the receiver serves the console (workers come and go)
            await stack.enter_async_context(console_server(bot, messenger, queue_workers(queue)))
        jobs = []
        if receive:
            jobs.append(_receive(bot, messenger, queue, stop))
        if work:
            await stack.enter_async_context(mcp_tools(bot))
            jobs.append(_work(bot, messenger, queue, stop, slots, grace_period))
        if freeze_startup:
            freeze_startup_objects()
        await _together(jobs, stop)


async def _count_waiting(metrics: Metrics, queue: TurnQueue) -> None:
    """The queue's depth as ``botkit_turns_waiting`` (the same figure in every process)."""
    metrics.turns_waiting.set(await queue.waiting())


async def _receive(
    bot: ServedBot, messenger: TelegramMessenger, queue: TurnQueue, stop: asyncio.Event
) -> None:
    from botkit.runtime.receiver import receive
    from botkit.runtime.telegram import cancelled, publish_commands_soon

    messenger.known_commands = frozenset(bot.commands) | {"start"}
    await messenger.start()
    menus = publish_commands_soon(bot, messenger)
    checkouts = partial(bot.payments.answer_checkout, messenger=messenger)
    try:
        if bot.settings.webhook_url is None:
            await receive(messenger, queue, bot.settings, stop, checkouts)
            return
        from botkit.runtime.webhook import serve_webhook

        await serve_webhook(messenger, queue, bot.settings, stop, checkouts)
    finally:
        await cancelled(menus)


async def _work(
    bot: ServedBot,
    messenger: TelegramMessenger,
    queue: TurnQueue,
    stop: asyncio.Event,
    concurrency: int,
    grace: float | None,
) -> None:
    from botkit.approvals.service import sweeping
    from botkit.runtime.telegram import cancelled
    from botkit.runtime.worker import work

    approvals = sweeping(bot, messenger, stop)  # expiry, and what a dead worker left
    try:
        await work(bot, messenger, queue, stop, concurrency=concurrency, grace=grace)
    finally:
        await cancelled(approvals)


async def _together(jobs: list, stop: asyncio.Event) -> None:  # type: ignore[type-arg]
    """Run ``jobs`` until all end; one that fails stops the others, then its error is raised."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def run_queued(
    bot: ServedBot, *, receive: bool = True, work: bool = True, concurrency: int | None = None
) -> None:
    """Run until SIGINT or SIGTERM (running turns finish first); a second signal stops now."""
    served = partial(
        serve_queued,
        bot,
        receive=receive,
        work=work,
        concurrency=concurrency,
        freeze_startup=True,
    )
    asyncio.run(until_signalled(served))
