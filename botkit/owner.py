"""The first owner: a one-time link that makes whoever opens it the bot's admin.

A bot with no admin (none in BOTKIT_ADMINS, none in the user store) and no allowlist turns
everyone away, its owner included, and nothing says why. While that is so, ``run`` prints,
and ``doctor`` shows, a link ``https://t.me/<bot>?start=<code>``: an ordinary invite of role
admin, single use, valid for an hour, so redeeming it is logged like any invite.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import structlog

from botkit.access import open_user_store
from botkit.admin import cli_admin
from botkit.config import Settings
from botkit.invites import invite_link

__all__ = ["OWNER_LINK_LIFETIME", "needs_owner", "owner_link", "owner_notice"]

log = structlog.get_logger(__name__)

OWNER_LINK_LIFETIME = timedelta(hours=1)


async def needs_owner(settings: Settings) -> bool:
    """Whether nobody can use the bot yet: no admin anywhere, no allowlist, not open."""
    if settings.admins or settings.allowed_users or settings.access == "open":
        return False
    store = await open_user_store(settings)
    try:
        return not await store.list_users("admin")
    finally:
        await store.close()


async def owner_link(settings: Settings, bot_username: str) -> str | None:
    """A fresh single-use admin invite link valid for an hour, when ``needs_owner``."""
    if not await needs_owner(settings):
        return None
    store = await open_user_store(settings)
    try:
        expires = datetime.now(UTC) + OWNER_LINK_LIFETIME
        invite = await cli_admin(store).create_invite("admin", 1, expires)
    finally:
        await store.close()
    log.info("owner.link_created", invite=invite.prefix, expires_at=expires.isoformat())
    return invite_link(bot_username, invite.code)


def owner_notice(link: str) -> str:
    """What ``run`` prints: the link, and what it does."""
    return (
        f"No admin yet: open {link} within an hour to become this bot's admin "
        "(single use; or set BOTKIT_ADMINS to your Telegram user id)."
    )


def announce_owner_link(settings: Settings) -> None:
    """``run``: print the owner link when the bot has no admin yet (nothing otherwise)."""
    import asyncio

    from botkit.errors import BotkitError

    try:
        link = asyncio.run(_fresh_link(settings))
    except (BotkitError, OSError):  # the store or Telegram: start-up reports it in one line
        return
    if link is not None:
        print(owner_notice(link), flush=True)


async def _fresh_link(settings: Settings) -> str | None:
    if not await needs_owner(settings):  # no getMe when an admin exists
        return None
    username = await _bot_username(settings)
    return await owner_link(settings, username) if username else None


async def _bot_username(settings: Settings) -> str | None:
    """The bot's username from getMe; ``None`` (logged) when Telegram cannot say."""
    from botkit.errors import MessengerError
    from botkit.messengers.flood import FloodControl
    from botkit.runtime.telegram import messenger_for

    messenger = messenger_for(settings, flood=FloodControl(max_attempts=2), inbox=False)
    try:
        return (await messenger.start()).username
    except MessengerError as e:
        log.warning("owner.no_username", error=str(e))
        return None
    finally:
        await messenger.close()
