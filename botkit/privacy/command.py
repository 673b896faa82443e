"""``/forget_me``: a user erases what the bot holds about them, after a confirming button."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import structlog

from botkit.access import Access
from botkit.agent.pool import ContextPool
from botkit.commands import ButtonHandler, CommandHandler, PressAnswer
from botkit.config import Settings
from botkit.messengers.base import Button, ButtonPress, Incoming, Messenger, Reply
from botkit.options import BotOptions
from botkit.privacy.defaults import default_parts
from botkit.privacy.erase import forget_user

__all__ = ["BUTTON_PREFIX", "enable_forget_me"]

log = structlog.get_logger(__name__)

BUTTON_PREFIX = "forget_me"


class ForgetMeHost(Protocol):
    """What ``/forget_me`` needs of a bot."""

    settings: Settings
    options: BotOptions
    buttons: dict[str, ButtonHandler]
    access: Access
    contexts: ContextPool
    messenger: Messenger | None

    def command(
        self, name: str, description: str, *, admin_only: bool = False, hidden: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...


def enable_forget_me(bot: ForgetMeHost) -> None:
    """Offer ``/forget_me`` and its buttons, unless BOTKIT_FORGET_ME=false."""
    if not bot.settings.forget_me:
        return
    texts = bot.options.privacy_texts

    async def forget_me(message: Incoming, args: str) -> str | Reply:
        if message.chat_type != "private":
            return texts.private_only
        confirm = Button(texts.confirm_button, f"{BUTTON_PREFIX}:yes:{message.user_id}")
        cancel = Button(texts.cancel_button, f"{BUTTON_PREFIX}:no:{message.user_id}")
        return Reply(texts.confirm, ((confirm, cancel),))

    async def press(press: ButtonPress, payload: str) -> PressAnswer:
        answer, _, whose = payload.partition(":")
        if press.chat_type != "private" or whose != str(press.user_id):
            return PressAnswer(texts.not_yours)
        if answer != "yes":
            return PressAnswer(texts.cancelled, Reply(texts.cancelled))
        await erase(bot, press.user_id)
        return PressAnswer(texts.done, Reply(texts.done))

    bot.command("forget_me", texts.description)(forget_me)
    bot.buttons[BUTTON_PREFIX] = press


async def erase(bot: ForgetMeHost, user_id: int) -> dict[str, int]:
    """``users forget`` for ``user_id`` from inside the bot: a block stays; nothing cached stays."""
    record = await bot.access.known_user(user_id)
    blocked = record is not None and record.blocked
    counts = await forget_user(user_id, default_parts(bot.settings), keep_block=blocked)
    bot.contexts.drop(user_id)
    bot.access.forget(user_id)
    inbox = getattr(bot.messenger, "inbox", None)
    if inbox is not None:
        inbox.close()  # the journal was rewritten without their updates: write to the new file
    log.info("privacy.forget_me", user_id=user_id)
    return counts
