"""Serving the console beside the bot (``run``, and ``receive`` in a scale-out)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import structlog

from botkit._http import BoundedServer, HttpLimits
from botkit.access import Access
from botkit.approvals.service import Approvals
from botkit.config import Settings
from botkit.console.app import ConsoleApp
from botkit.console.conversations import conversations_of
from botkit.console.settings import ConsoleSettings
from botkit.errors import ConfigError
from botkit.sessions.base import SessionStore

__all__ = ["ConsoleHost", "console_server", "console_url"]

log = structlog.get_logger(__name__)


class ConsoleHost(Protocol):
    """What the console needs of a bot: its settings, users, sessions and approvals."""

    settings: Settings
    access: Access
    sessions: SessionStore
    approvals: Approvals
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


def console_app(bot: ConsoleHost) -> ConsoleApp:
    """The console of ``bot``, not served yet."""
    settings = ConsoleSettings.of(bot.settings)
    conversations = conversations_of(bot.sessions, bot.settings.sessions_dir)
    texts = getattr(getattr(bot, "options", None), "console_texts", None)
    return ConsoleApp(
        settings, bot.access, bot.sessions, conversations, _Deciding(bot.approvals), texts
    )


@asynccontextmanager
async def console_server(bot: ConsoleHost) -> AsyncIterator[ConsoleApp | None]:
    """Serve ``bot``'s console while the block runs (nothing with BOTKIT_CONSOLE_PORT unset);
    yields the console (its address in ``served_at``), also kept in ``bot.console``."""
    settings = bot.settings
    if settings.console_port is None:
        yield None
        return
    console = console_app(bot)
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
