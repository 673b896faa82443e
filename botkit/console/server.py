"""Serving the console beside the bot (``run``, and ``receive`` in a scale-out)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from botkit._http import BoundedServer, HttpLimits
from botkit.access import Access
from botkit.approvals.service import Approvals
from botkit.config import Settings
from botkit.console.app import ConsoleApp
from botkit.console.conversations import conversations_of
from botkit.console.settings import ConsoleSettings
from botkit.errors import ConfigError
from botkit.metrics import Metrics
from botkit.options import BotOptions
from botkit.sessions.base import SessionStore

if TYPE_CHECKING:
    from botkit.messengers.telegram import TelegramMessenger

__all__ = ["ConsoleHost", "console_server", "console_url"]

log = structlog.get_logger(__name__)


class ConsoleHost(Protocol):
    """What the console needs of a bot: its settings, users, sessions, approvals, metrics."""

    settings: Settings
    access: Access
    sessions: SessionStore
    approvals: Approvals
    metrics: Metrics
    options: BotOptions
    console: ConsoleApp | None
    """The console this process serves (set while it does)."""


class _Deciding:
    """Approvals as the console sees them: the waiting ones, and a press."""

    def __init__(self, approvals: Approvals) -> None:
        self.approvals = approvals

    async def waiting(self) -> list[Any]:
        return [a for a in await self.approvals.store.open_approvals() if a.state == "pending"]

    async def press(self, approval_id: str, choice: str, user_id: int) -> str:
        return await self.approvals.press(approval_id, choice, user_id)


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


def console_app(bot: ConsoleHost, messenger: TelegramMessenger | None = None) -> ConsoleApp:
    """The console of ``bot``, not served yet (``messenger`` tells the bot's username)."""
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
    )


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
    bot: ConsoleHost, messenger: TelegramMessenger | None = None
) -> AsyncIterator[ConsoleApp | None]:
    """Serve ``bot``'s console while the block runs (nothing with BOTKIT_CONSOLE_PORT unset);
    yields the console (its address in ``served_at``), also kept in ``bot.console``."""
    settings = bot.settings
    if settings.console_port is None:
        yield None
        return
    console = console_app(bot, messenger)
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
