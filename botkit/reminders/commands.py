"""``/timezone`` and ``/scheduled``: a user's time zone and pending schedules, no LLM call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from botkit.commands import CommandHandler
from botkit.errors import ToolError
from botkit.messengers.base import Incoming
from botkit.reminders.service import Reminders

__all__ = ["SchedulingCommandHost", "register_scheduling_commands", "scheduled_text"]


class SchedulingCommandHost(Protocol):
    """What the scheduling commands need of a bot: a way to register them."""

    def command(
        self, name: str, description: str, *, admin_only: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...


async def scheduled_text(reminders: Reminders, user_id: int) -> str:
    """The user's pending schedules, one a line, or a sentence saying there are none."""
    pending = await reminders.pending(user_id)
    if not pending:
        return "Nothing is scheduled."
    zone = await reminders.zone(user_id)
    lines = [reminders.describe(s, zone) for s in pending]
    return "\n".join(["Scheduled:", *lines])


def register_scheduling_commands(bot: SchedulingCommandHost, reminders: Reminders) -> None:
    """``/timezone [Area/City]`` and ``/scheduled``."""

    @bot.command("timezone", "show or set your time zone, e.g. /timezone Europe/Berlin")
    async def timezone(message: Incoming, args: str) -> str:
        if not args.strip():
            now = await reminders.local_now(message.user_id)
            return f"Your time here: {now}. Set another with /timezone Europe/Berlin."
        try:
            await reminders.set_zone(message.user_id, args)
        except ToolError as e:
            return f"Sorry: {e}."
        return f"Time zone set. Your time: {await reminders.local_now(message.user_id)}."

    @bot.command("scheduled", "your pending reminders and scheduled tasks")
    async def scheduled(message: Incoming, args: str) -> str:
        return await scheduled_text(reminders, message.user_id)
