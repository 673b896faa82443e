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
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog

from botkit import tracing
from botkit.config import Settings
from botkit.errors import StoreError
from botkit.messengers.base import ButtonPress, Checkout, Incoming, Reaction
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
        return await self._retried(partial(self.take_once, update_id, raw), stop)

    async def take_all(self, updates: list[tuple[int, dict[str, Any]]], stop: asyncio.Event) -> int:
        """Take a ``getUpdates`` batch in order, the jobs of consecutive updates deferred in one
        statement, retrying while PostgreSQL is away; how many (from the first) were taken
        before ``stop``."""
        taken, jobs = 0, []
        for update_id, raw in updates:
            with tracing.tracer.span("receive update", "producer", {"botkit.update_id": update_id}):
                read = await self.messenger.read_update(raw)
                lock = self._lock_of(read)
                if lock is not None:
                    jobs.append(self.queue.job_for(self.bot_id, update_id, raw, lock))
            if lock is not None:
                continue
            if not await self._retried(partial(self.queue.defer_all, jobs), stop):
                return taken
            taken, jobs = taken + len(jobs), []
            if not await self._retried(partial(self._handle, update_id, raw, read), stop):
                return taken
            taken += 1
        if not await self._retried(partial(self.queue.defer_all, jobs), stop):
            return taken
        return taken + len(jobs)

    async def _retried(self, action: Callable[[], Awaitable[None]], stop: asyncio.Event) -> bool:
        """``action()`` done, retried while PostgreSQL is away; ``False`` if ``stop`` came first."""
        while True:
            try:
                await action()
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
            read = await self.messenger.read_update(raw)
            lock = self._lock_of(read)
            if lock is not None:
                await self.queue.defer(self.bot_id, update_id, raw, lock)
            else:
                await self._handle(update_id, raw, read)

    def _lock_of(self, read: Incoming | ButtonPress | Checkout | object) -> str | None:
        """The lock of the job an update read becomes (``None``: it is not queued)."""
        if isinstance(read, Incoming):
            return lock_for(read, self.settings.group_context)
        if isinstance(read, ButtonPress | Reaction):  # a worker takes it, behind their turns
            return f"user:{read.user_id}"
        if isinstance(read, Checkout) and self.checkouts is None:
            return f"checkout:{read.user_id}"  # not behind the user's turns: 10 s to answer
        return None

    async def _handle(self, update_id: int, raw: dict[str, Any], read: object) -> None:
        """An update that is not queued: journaled if unreadable, a checkout answered, a stop
        press passed on."""
        if isinstance(read, str):
            log.warning("receiver.update_unparseable", update_id=update_id, error=read)
            await self.queue.reject(self.bot_id, update_id, raw, read)
        elif isinstance(read, Checkout) and self.checkouts is not None:
            await self.checkouts(read)
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
    await messenger.poll_raw(partial(receiver.take_all, stop=stop), stop)


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
