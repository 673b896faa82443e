"""``/console``: an admin (or a viewer) gets a one-time sign-in link, and in a private chat
served over HTTPS a button that opens the console as a Mini App."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import structlog

from botkit.access import Access
from botkit.commands import CommandHandler
from botkit.config import Settings
from botkit.console.settings import ConsoleSettings
from botkit.console.signin import make_link_token
from botkit.console.texts import ConsoleTexts
from botkit.messengers.base import Button, Incoming, Reply
from botkit.stores.console_links import ConsoleLinkStore

__all__ = ["ConsoleCommandHost", "register_console_command"]

log = structlog.get_logger(__name__)


class ConsoleCommandHost(Protocol):
    """What ``/console`` needs of a bot."""

    settings: Settings
    access: Access

    def command(
        self, name: str, description: str, *, admin_only: bool = False, hidden: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...


def register_console_command(bot: ConsoleCommandHost, texts: ConsoleTexts | None = None) -> None:
    """Add ``/console`` (admins and viewers get a link) when the console is configured."""
    settings = bot.settings
    if settings.console_port is None and settings.console_url is None:
        return
    said = texts or ConsoleTexts()
    console = ConsoleSettings.of(settings)

    async def handle(message: Incoming, args: str) -> str | Reply:
        if not await _may_enter(bot, message):
            log.info("console.command_refused", user_id=message.user_id)
            return said.refused
        if message.chat_type != "private":
            return said.private_only
        base = _base_url(bot, settings)
        if base is None:
            return said.not_served
        store: Any = await bot.access.user_store()
        if not isinstance(store, ConsoleLinkStore):
            return said.not_served
        token = await make_link_token(store, message.user_id, console.link_seconds)
        minutes = max(1, round(console.link_seconds / 60))
        text = said.link.format(url=f"{base}/signin/{token}", minutes=minutes)
        log.info("console.link_made", user_id=message.user_id)
        if base.startswith("https://"):
            return Reply(text, ((Button(said.open_here, web_app=f"{base}/app"),),))
        return text

    # Not hidden: viewers (a role, not BOTKIT_ADMINS) use it too; anyone else is refused.
    bot.command("console", "Operators: a sign-in link to the console")(handle)


async def _may_enter(bot: ConsoleCommandHost, message: Incoming) -> bool:
    if bot.access.is_admin(message.user_id):
        return True
    record = await (await bot.access.user_store()).get_user(message.user_id)
    return record is not None and not record.blocked and record.role in ("admin", "viewer")


def _base_url(bot: object, settings: Settings) -> str | None:
    """BOTKIT_CONSOLE_URL; else the console this process serves; else its host and port."""
    if settings.console_url:
        return settings.console_url.rstrip("/")
    served = getattr(getattr(bot, "console", None), "served_at", None)
    if isinstance(served, str):
        return served
    if settings.console_port:
        host = settings.console_host
        return (
            f"http://[{host}]:{settings.console_port}"
            if ":" in host
            else (f"http://{host}:{settings.console_port}")
        )
    return None
