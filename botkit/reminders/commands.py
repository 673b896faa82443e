"""``/timezone`` and ``/scheduled``: a user's time zone and pending schedules, no LLM call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from botkit.access import Access
from botkit.commands import ButtonHandler, CommandHandler, PressAnswer
from botkit.errors import ToolError
from botkit.messengers.base import Button, ButtonPress, Incoming, Messenger, Reply
from botkit.reminders.service import Reminders

__all__ = [
    "BUTTON_PREFIX",
    "SchedulingCommandHost",
    "register_scheduling_commands",
    "scheduled_reply",
]

BUTTON_PREFIX = "sched"
"""Cancel buttons carry ``sched:cancel:<owner's user id>:<schedule id>``."""
MAX_TEXT = 3_500
"""Characters of the list shown at most (a message holds 4,096); the buttons cover all."""
BUTTONS_PER_ROW = 3


class SchedulingCommandHost(Protocol):
    """What the scheduling commands need of a bot: a way to register them, buttons, and what
    says who manages a group (its gates, its messenger)."""

    buttons: dict[str, ButtonHandler]
    access: Access
    messenger: Messenger | None

    def command(
        self, name: str, description: str, *, admin_only: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...


async def scheduled_reply(
    reminders: Reminders, user_id: int, chat_id: int | None = None, *, whole_chat: bool = False
) -> Reply:
    """The user's pending schedules, one a line, each with a cancel button under the list;
    asked in a group (``chat_id``), only those set in that group: never a private one there.
    ``whole_chat`` (a group's admin asking): every schedule of the group, whoever set it."""
    if whole_chat and chat_id is not None:
        pending = await reminders.in_chat(chat_id)
    else:
        pending = await reminders.pending(user_id)
        if chat_id is not None and chat_id != user_id:  # a private chat's id is its user's
            pending = [s for s in pending if s.chat_id == chat_id]
    if not pending:
        return Reply("Nothing is scheduled.")
    zone = await reminders.zone(user_id)
    lines = [reminders.describe(s, zone) + _set_by(s.user_id, user_id) for s in pending]
    text = "\n".join(["Scheduled:", *lines])
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT].rsplit("\n", 1)[0] + "\n…"
    buttons = [
        Button(f"Cancel #{s.id}", f"{BUTTON_PREFIX}:cancel:{s.user_id}:{s.id}") for s in pending
    ]
    rows = [buttons[i : i + BUTTONS_PER_ROW] for i in range(0, len(buttons), BUTTONS_PER_ROW)]
    return Reply(text, tuple(tuple(row) for row in rows))


def _set_by(owner: int, viewer: int) -> str:
    return "" if owner == viewer else f" (set by user {owner})"


def register_scheduling_commands(bot: SchedulingCommandHost, reminders: Reminders) -> None:
    """``/timezone [Area/City]`` and ``/scheduled``."""

    @bot.command("timezone", "Show or set your time zone, e.g. /timezone Europe/Berlin")
    async def timezone(message: Incoming, args: str) -> str:
        if not args.strip():
            now = await reminders.local_now(message.user_id)
            return f"Your time here: {now}. Set another with /timezone Europe/Berlin."
        try:
            await reminders.set_zone(message.user_id, args)
        except ToolError as e:
            return f"Sorry: {e}."
        return f"Time zone set. Your time: {await reminders.local_now(message.user_id)}."

    async def manages(message: Incoming) -> bool:
        """Whether the sender is a group's admin, asking in that group."""
        return message.in_group and await bot.access.is_group_admin(message, bot.messenger)

    @bot.command("scheduled", "Your pending reminders and scheduled tasks")
    async def scheduled(message: Incoming, args: str) -> Reply:
        whole = await manages(message)  # a group's admins see (and cancel) all of the group's
        return await scheduled_reply(reminders, message.user_id, message.chat_id, whole_chat=whole)

    async def press(press: ButtonPress, payload: str) -> PressAnswer:
        action, _, rest = payload.partition(":")
        owner, _, number = rest.partition(":")
        if action != "cancel" or not (owner.isdigit() and number.isdigit()):
            return PressAnswer("That button no longer works.")
        admin = await manages(press.as_incoming())
        if int(owner) == press.user_id:
            cancelled = await reminders.cancel(press.user_id, int(number))
        elif admin:
            cancelled = await reminders.cancel_in_chat(press.chat_id, int(number))
        else:
            return PressAnswer("Only the one who scheduled it can cancel it.")
        notice = f"Cancelled #{number}." if cancelled else f"#{number} was no longer pending."
        listing = await scheduled_reply(reminders, press.user_id, press.chat_id, whole_chat=admin)
        return PressAnswer(notice, listing)

    bot.buttons[BUTTON_PREFIX] = press
