"""``python -m botkit receive``: Telegram updates into the job queue; only checkouts are
answered here (Telegram waits 10 s for them, not for a worker to be free).

Each update is read once (an unreadable one is journaled in ``botkit_unparseable_updates``
and confirmed), then deferred as a job locked on its conversation. Telegram is told an
update arrived only after its job is in PostgreSQL: while the database is away the receiver
keeps trying with growing pauses (one log line per outage) and confirms nothing, so a
restart, or Telegram's re-delivery, brings the update back. Long polling by default (exactly
one receiver); webhooks with ``BOTKIT_WEBHOOK_URL`` (``botkit.runtime.webhook``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import structlog

from botkit import tracing
from botkit.config import Settings
from botkit.errors import StoreError
from botkit.messengers.base import ButtonPress, Checkout, Incoming
from botkit.runtime.queue import Outage, TurnQueue, lock_for

if TYPE_CHECKING:
    from botkit.messengers.telegram import TelegramMessenger

__all__ = ["AnswerCheckout", "Receiver", "receive"]

log = structlog.get_logger(__name__)

AnswerCheckout = Callable[[Checkout], Awaitable[None]]
"""Answers a ``pre_checkout_query`` (``Payments.answer_checkout`` with the messenger)."""


class Receiver:
    """Takes raw updates into the queue: read, journaled if unreadable, deferred on a lock."""

    def __init__(
        self,
        messenger: TelegramMessenger,
        queue: TurnQueue,
        settings: Settings,
        checkouts: AnswerCheckout | None = None,
    ) -> None:
        self.messenger = messenger
        self.queue = queue
        self.settings = settings
        self.checkouts = checkouts
        """Answers a checkout here (Telegram waits 10 s: not behind busy workers); without
        it a worker answers it."""
        self.outage = Outage("receiver")

    @property
    def bot_id(self) -> int:
        """The bot's own Telegram id: updates are numbered per bot."""
        assert self.messenger.me is not None, "start the messenger first"
        return self.messenger.me.id

    async def take(self, update_id: int, raw: dict[str, Any], stop: asyncio.Event) -> bool:
        """Take one update, retrying while PostgreSQL is away; ``False`` if ``stop`` came first."""
        while True:
            try:
                await self.take_once(update_id, raw)
            except StoreError as e:
                await _sleep_unless(stop, self.outage.failed(e))
                if stop.is_set():
                    return False
                continue
            self.outage.ok()
            return True

    async def take_once(self, update_id: int, raw: dict[str, Any]) -> None:
        """Take one update; raises ``StoreError`` if it could not be queued (or journaled)."""
        with tracing.tracer.span("receive update", "producer", {"botkit.update_id": update_id}):
            await self._take(update_id, raw)

    async def _take(self, update_id: int, raw: dict[str, Any]) -> None:
        read = await self.messenger.read_update(raw)
        if isinstance(read, str):
            log.warning("receiver.update_unparseable", update_id=update_id, error=read)
            await self.queue.reject(self.bot_id, update_id, raw, read)
        elif isinstance(read, Incoming):
            lock = lock_for(read, self.settings.group_context)
            await self.queue.defer(self.bot_id, update_id, raw, lock)
        elif isinstance(read, ButtonPress):  # a worker answers it, behind the user's turns
            await self.queue.defer(self.bot_id, update_id, raw, f"user:{read.user_id}")
        elif isinstance(read, Checkout) and self.checkouts is not None:
            await self.checkouts(read)
        elif isinstance(read, Checkout):  # not behind the user's turns: 10 s to answer it
            await self.queue.defer(self.bot_id, update_id, raw, f"checkout:{read.user_id}")
        elif read is not None:
            await self._stop_pressed(read)

    async def _stop_pressed(self, update: Any) -> None:
        """A stop button pressed: every worker hears it; the one running that draft stops."""
        stopped = update.stopped_message_generation
        await self.queue.notify_stop(stopped.chat.id, stopped.draft_id)


async def receive(
    messenger: TelegramMessenger,
    queue: TurnQueue,
    settings: Settings,
    stop: asyncio.Event,
    checkouts: AnswerCheckout | None = None,
) -> None:
    """Long-poll Telegram into ``queue`` until ``stop`` is set (webhook mode: ``webhook``)."""
    receiver = Receiver(messenger, queue, settings, checkouts)
    await messenger.start()
    log.info("receiver.started", mode="polling")
    await messenger.poll_raw(lambda update_id, raw: receiver.take(update_id, raw, stop), stop)


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
