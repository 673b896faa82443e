"""Serving the console beside the bot (``run``, and ``receive`` in a scale-out)."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from botkit._http import BoundedServer, HttpLimits
from botkit.access import Access
from botkit.admin import Admin
from botkit.approvals.service import Approvals
from botkit.config import Settings
from botkit.console.app import ConsoleApp, Worker
from botkit.console.conversations import conversations_of
from botkit.console.settings import ConsoleSettings
from botkit.errors import ConfigError
from botkit.metrics import Metrics
from botkit.options import BotOptions
from botkit.payments.service import Payments, RefundError
from botkit.payments.store import Grant
from botkit.sessions.base import SessionStore

if TYPE_CHECKING:
    from botkit.messengers.telegram import TelegramMessenger

__all__ = ["ConsoleHost", "Workers", "console_server", "console_url", "queue_workers"]

log = structlog.get_logger(__name__)


class ConsoleHost(Protocol):
    """What the console needs of a bot: its settings, users, sessions, approvals, metrics."""

    settings: Settings
    access: Access
    sessions: SessionStore
    approvals: Approvals
    metrics: Metrics
    options: BotOptions
    payments: Payments
    console: ConsoleApp | None
    """The console this process serves (set while it does)."""


Workers = Callable[[], Awaitable[list[Worker]]]
"""The health page's workers: the queue's (in a scale-out), else this process."""


class _Deciding:
    """Approvals as the console sees them: the waiting ones, and a press."""

    def __init__(self, approvals: Approvals) -> None:
        self.approvals = approvals

    async def waiting(self) -> list[Any]:
        return [a for a in await self.approvals.store.open_approvals() if a.state == "pending"]

    async def press(self, approval_id: str, choice: str, user_id: int) -> str:
        return await self.approvals.press(approval_id, choice, user_id)


class _Paying:
    """Payments as the console sees them: a page of them, a user's plan, a refund."""

    def __init__(self, payments: Payments, messenger: TelegramMessenger | None) -> None:
        self.payments = payments
        self.messenger = messenger

    async def recent(self, limit: int, offset: int) -> list[Grant]:
        return await (await self.payments.store()).recent(limit, offset)

    async def plan(self, user_id: int) -> Grant | None:
        return await self.payments.current_plan(user_id) if self.payments else None

    async def refund(self, charge_id: str, admin: Admin) -> Grant:
        if self.messenger is None:
            raise RefundError("this process has no Telegram connection to refund through")
        return await self.payments.refund(charge_id, self.messenger.stars, admin)


HEALTH = (
    ("botkit_turns_running", "turns running"),
    ("botkit_turns_waiting", "turns waiting (the queue's depth, in a scale-out)"),
    ("botkit_contexts_in_memory", "conversations in memory"),
    ("botkit_inbox_unfinished", "updates in the inbox not finished"),
    ("botkit_handoffs_open", "conversations with a person"),
    ("botkit_updates_given_up_total", "updates given up (poison)"),
)
"""The metrics the health page shows, and what it calls them."""
HEALTH_BY_LABEL = (("botkit_turns_total", "outcome", "turns"),)
"""Counters shown once per label value: (metric, label, what)."""


def console_app(
    bot: ConsoleHost, messenger: TelegramMessenger | None = None, workers: Workers | None = None
) -> ConsoleApp:
    """The console of ``bot``, not served yet (``messenger`` tells the bot's username and
    makes refunds; ``workers`` lists the queue's workers, else this process is the one)."""
    settings = ConsoleSettings.of(bot.settings)
    conversations = conversations_of(bot.sessions, bot.settings.sessions_dir)

    def username() -> str | None:
        me = messenger.me if messenger is not None else None
        return me.username if me is not None else None

    async def health() -> list[tuple[str, str]]:
        await bot.metrics.scrape()  # runs the refreshes (the queue's depth)
        return _readings(bot.metrics)

    return ConsoleApp(
        settings,
        bot.access,
        bot.sessions,
        conversations,
        _Deciding(bot.approvals),
        bot.options.console_texts,
        health=health,
        bot_username=username,
        payments=_Paying(bot.payments, messenger),
        workers=workers or partial(_this_process, bot.metrics, datetime.now(UTC)),
        failures=lambda: list(bot.metrics.last_failures),
    )


async def _this_process(metrics: Metrics, started: datetime) -> list[Worker]:
    """``run``: this process is the one worker."""
    running = metrics.registry.get_sample_value("botkit_turns_running") or 0
    name = f"this process (pid {os.getpid()} on {socket.gethostname()})"
    return [Worker(name, started, datetime.now(UTC), int(running))]


def queue_workers(queue: Any) -> Workers:
    """The workers registered in the job queue (``TurnQueue.workers``)."""

    async def listed() -> list[Worker]:
        return [
            Worker(f"worker {row['id']}", None, row["last_heartbeat"], int(row["running"]))
            for row in await queue.workers()
        ]

    return listed


def _readings(metrics: Metrics) -> list[tuple[str, str]]:
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
    }
    found = [
        (what, f"{samples[(name, ())]:,.0f}") for name, what in HEALTH if (name, ()) in samples
    ]
    for metric, label, what in HEALTH_BY_LABEL:
        for (name, labels), value in sorted(samples.items()):
            if name == metric and len(labels) == 1 and labels[0][0] == label:
                found.append((f"{what}: {labels[0][1]}", f"{value:,.0f}"))
    return found


@asynccontextmanager
async def console_server(
    bot: ConsoleHost, messenger: TelegramMessenger | None = None, workers: Workers | None = None
) -> AsyncIterator[ConsoleApp | None]:
    """Serve ``bot``'s console while the block runs (nothing with BOTKIT_CONSOLE_PORT unset);
    yields the console (its address in ``served_at``), also kept in ``bot.console``."""
    settings = bot.settings
    if settings.console_port is None:
        yield None
        return
    console = console_app(bot, messenger, workers)
    server = BoundedServer(console.application(), HttpLimits.of(settings), name="console")
    try:
        try:
            port = await server.start(settings.console_host, settings.console_port)
        except OSError as e:
            raise ConfigError(
                f"cannot serve the console on {settings.console_host}:{settings.console_port} "
                f"({e.strerror or e}): set BOTKIT_CONSOLE_PORT to a free port, or unset it."
            ) from e
        host = settings.console_host
        local = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        console.served_at = local
        bot.console = console
        log.info("console.listening", url=local, public_url=settings.console_url)
        yield console
    finally:
        bot.console = None
        await server.close()


def console_url(settings: Settings, served_at: str | None) -> str | None:
    """Where people reach the console: BOTKIT_CONSOLE_URL, else its own address."""
    if settings.console_url:
        return settings.console_url.rstrip("/")
    return served_at
