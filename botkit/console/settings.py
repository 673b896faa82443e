"""The console's own settings, taken from the bot's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from botkit.config import Settings

__all__ = ["ConsoleSettings"]

LINK_SECONDS = 300.0
"""How long a ``/console`` sign-in link works."""
SESSION_SECONDS = 8 * 3600.0
"""How long a session lasts from its sign-in."""
INIT_DATA_SECONDS = 600.0
"""The oldest Mini App ``initData`` (by its ``auth_date``) that still signs in."""
PAGE_SIZE = 50
"""Rows on one page of a listing."""
MAX_SESSIONS = 1000
"""Sessions kept at once; the oldest goes first beyond it."""


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """Where the console is served, who gets in, and what they see."""

    port: int | None
    host: str = "127.0.0.1"
    public_url: str | None = None
    """BOTKIT_CONSOLE_URL, without a trailing slash."""
    content: Literal["admins", "all", "none"] = "admins"
    bot_token: str = ""
    """Checks the Mini App's ``initData``."""
    admins: frozenset[int] = frozenset()
    """BOTKIT_ADMINS: admins whatever the user store says."""
    link_seconds: float = LINK_SECONDS
    session_seconds: float = SESSION_SECONDS
    init_data_seconds: float = INIT_DATA_SECONDS
    page_size: int = PAGE_SIZE
    max_sessions: int = MAX_SESSIONS

    @classmethod
    def of(cls, settings: Settings) -> ConsoleSettings:
        """The console's settings in the bot's ``settings``."""
        url = settings.console_url.rstrip("/") if settings.console_url else None
        token = settings.telegram_bot_token
        return cls(
            port=settings.console_port,
            host=settings.console_host,
            public_url=url,
            content=settings.console_content,
            bot_token=token.get_secret_value() if token is not None else "",
            admins=frozenset(settings.admins),
        )

    @property
    def secure(self) -> bool:
        """Served over HTTPS (behind a proxy): cookies are marked ``Secure``."""
        return bool(self.public_url and self.public_url.startswith("https://"))
