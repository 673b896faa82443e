"""Invite links: durations, deep links, and the tool that lets an admin make one from chat.

The tool is offered only in an admin's private chat, never in a group turn (whose context holds
what any member wrote), and it checks that again itself. An invite with the admin role mints
admins, so it comes only from the command line or from an admin in BOTKIT_ADMINS; an admin by
role alone invites with any other role.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Protocol

from botkit.errors import ConfigError, ToolError
from botkit.messengers.base import Messenger
from botkit.stores.base import UserRecord, UserStore
from botkit.tools import Tool, ToolContext, tool

__all__ = ["InviteAccess", "InviteHost", "invite_link", "invite_tool", "parse_duration"]

_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$")


def parse_duration(text: str) -> timedelta:
    """``30m``, ``12h``, ``7d`` or ``2w`` as a timedelta."""
    match = _DURATION.match(text)
    if match is None:
        raise ConfigError(f"expected a duration like 30m, 12h, 7d or 2w, got {text!r}")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def invite_link(bot_username: str, code: str) -> str:
    """The deep link that starts the bot with ``code`` as the /start payload."""
    return f"https://t.me/{bot_username.lstrip('@')}?start={code}"


class InviteAccess(Protocol):
    """What the invite tool needs of a bot's access: who is an admin, and the user store."""

    def is_admin(self, user_id: int) -> bool:
        """Whether ``user_id`` is one of the bot's admins."""
        ...

    async def user_store(self) -> UserStore:
        """The users and invites store."""
        ...

    async def known_user(self, user_id: int) -> UserRecord | None:
        """The user's record, if registered."""
        ...


class InviteHost(Protocol):
    """What the invite tool needs of a bot."""

    messenger: Messenger | None

    @property
    def access(self) -> InviteAccess:
        """Who is an admin, and the user store."""
        ...


def invite_tool(bot: InviteHost) -> Tool:
    """``create_invite``: an admin asks for an invite link in chat."""

    @tool(name="create_invite")
    async def create_invite(
        ctx: ToolContext, role: str, uses: int = 1, expires_in_days: float = 7.0
    ) -> str:
        """Create an invite link that registers whoever opens it with a role.

        Args:
            role: The role new users get, e.g. "cleaner" or "manager".
            uses: How many people may use the link.
            expires_in_days: Days until the link stops working.
        """
        await _check_may_invite(bot, ctx, role)
        if uses < 1 or expires_in_days <= 0:
            raise ToolError("uses must be at least 1 and expires_in_days positive")
        me = getattr(bot.messenger, "me", None)
        username = getattr(me, "username", None)
        if not username:
            raise ToolError("the bot's username is not known yet")
        expires_at = datetime.now(UTC) + timedelta(days=expires_in_days)
        from botkit.admin import Admin

        admin = Admin(await bot.access.user_store(), ctx.user_id, via="chat")
        invite = await admin.create_invite(role, uses, expires_at)
        return (
            f"{invite_link(username, invite.code)} (role {role}, {uses} use(s), "
            f"expires {expires_at:%Y-%m-%d %H:%M} UTC)"
        )

    return create_invite


async def _check_may_invite(bot: InviteHost, ctx: ToolContext, role: str) -> None:
    """Raise ``ToolError`` unless the caller may create an invite with ``role`` here."""
    if ctx.chat_type != "private":
        raise ToolError("invites are created only in a private chat with the bot")
    if bot.access.is_admin(ctx.user_id):
        return
    record = await bot.access.known_user(ctx.user_id)
    if record is None or record.blocked or record.role != "admin":
        raise ToolError("only admins can create invites")
    if role.strip().casefold() == "admin":
        raise ToolError(
            "an invite with the admin role is created only from the command line "
            "or by an admin listed in BOTKIT_ADMINS"
        )
