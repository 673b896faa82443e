"""The tools that let the model set, list and cancel reminders and scheduled tasks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from botkit.errors import ToolError
from botkit.messengers.base import Incoming
from botkit.plugins import Plugin
from botkit.reminders.service import Place, Reminders
from botkit.reminders.times import format_local
from botkit.tools import Tool, ToolContext, tool

__all__ = ["SCHEDULING_TOOLS", "SchedulingPlugin", "scheduling_tools"]

SCHEDULING_TOOLS = ("remind", "schedule_task", "list_scheduled", "cancel_scheduled", "set_timezone")
"""The names of the tools :func:`scheduling_tools` makes (filter them out to leave them out)."""
SCHEDULING_ONLY_BY_USERS = frozenset({"remind", "schedule_task"})
"""Left out of a scheduled task's own turn: a task never schedules more work by itself."""

PROMPT = (
    "You can set reminders and scheduled tasks that survive restarts. Use `remind` when the "
    "user wants to be told something at a time: the text reaches them verbatim, nobody "
    "rewrites or answers it. Use `schedule_task` when something must be done at a time "
    "(look something up, summarise, write): you run the instruction then and your answer is "
    "sent. Never claim a reminder is set unless the tool said so. The user's time zone is "
    "{zone}; times without an offset are read in it, and each of their messages starts with "
    "their local date and time in brackets."
)


def _place(ctx: ToolContext) -> Place:
    return Place(ctx.user_id, ctx.chat_id, ctx.thread_id, ctx.chat_type)


RERUN_TEXT = "Not done: this is a re-run of a recorded conversation (replay --rerun)."
"""What a scheduling tool that would change the schedule answers in a re-run."""


def scheduling_tools(reminders: Reminders) -> list[Tool]:
    """``remind``, ``schedule_task``, ``list_scheduled``, ``cancel_scheduled``, ``set_timezone``."""

    async def confirmation(what: str, ctx: ToolContext, due: datetime, repeat: str | None) -> str:
        zone = await reminders.zone(ctx.user_id)
        then = f" and then {repeat}" if repeat else ""
        return f"{what} set for {format_local(due, zone)}{then}."

    @tool(name="remind")
    async def remind(ctx: ToolContext, when: str, text: str, repeat: str | None = None) -> str:
        """Remind the user of something at a given time, in this chat, word for word.

        Args:
            when: ISO 8601 with an offset ("2026-11-24T09:00:00+01:00", "...Z"), a local time
                without one ("2026-11-24T09:00", "09:00"), or from now ("10m", "in 90 minutes").
            text: The reminder exactly as the user should read it, e.g. "Call the plumber".
            repeat: Leave out for once; or "daily", "weekly", "every 2h", or cron "0 9 * * 1-5".
        """
        if ctx.rerun:
            return RERUN_TEXT
        made = await reminders.add(_place(ctx), "reminder", text, when, repeat)
        return await confirmation(f"Reminder #{made.id}", ctx, made.due_at, made.repeat)

    @tool(name="schedule_task")
    async def schedule_task(
        ctx: ToolContext,
        when: str,
        instruction: str,
        repeat: str | None = None,
        urgent: bool = True,
    ) -> str:
        """Do something for the user at a given time: you will run the instruction then and
        your answer is sent to this chat.

        Args:
            when: ISO 8601 with an offset ("2026-11-24T09:00:00+01:00", "...Z"), a local time
                without one ("2026-11-24T09:00", "09:00"), or from now ("10m", "in 90 minutes").
            instruction: What to do then, written to yourself, e.g. "Summarise my open tasks".
            repeat: Leave out for once; or "daily", "weekly", "every 2h", or cron "0 8 * * 1".
            urgent: Leave true when the answer matters at that time; false when it may come
                later (minutes, at most a day), e.g. a weekly digest: it then costs half.
        """
        if ctx.rerun:
            return RERUN_TEXT
        made = await reminders.add(_place(ctx), "task", instruction, when, repeat, urgent=urgent)
        return await confirmation(f"Task #{made.id}", ctx, made.due_at, made.repeat)

    @tool(name="list_scheduled")
    async def list_scheduled(ctx: ToolContext) -> str:
        """List the user's pending reminders and scheduled tasks, with their ids."""
        pending = await reminders.pending(ctx.user_id)
        if ctx.chat_type != "private":  # in a group, never what the user set in private
            pending = [s for s in pending if s.chat_id == ctx.chat_id]
        if not pending:
            return "Nothing is scheduled."
        zone = await reminders.zone(ctx.user_id)
        return "\n".join(reminders.describe(s, zone) for s in pending)

    @tool(name="cancel_scheduled")
    async def cancel_scheduled(ctx: ToolContext, id: int) -> str:
        """Cancel one of the user's pending reminders or scheduled tasks.

        Args:
            id: Its number, as list_scheduled shows it (without the #).
        """
        if ctx.rerun:
            return RERUN_TEXT
        cancelled = await reminders.cancel(ctx.user_id, id)
        if cancelled is None:
            raise ToolError(f"the user has no pending reminder or task #{id}: see list_scheduled.")
        return f"Cancelled #{id}: it will not fire."

    @tool(name="set_timezone")
    async def set_timezone(ctx: ToolContext, name: str) -> str:
        """Set the user's time zone, used for every time they give without an offset.

        Args:
            name: An IANA time zone name, e.g. "Europe/Berlin", "America/New_York", "UTC".
        """
        if ctx.rerun:
            return RERUN_TEXT
        zone = await reminders.set_zone(ctx.user_id, name)
        return f"Time zone set to {zone.key}; it is now {await reminders.local_now(ctx.user_id)}."

    return [remind, schedule_task, list_scheduled, cancel_scheduled, set_timezone]


class SchedulingPlugin(Plugin):
    """Offers the scheduling tools, tells the model the user's zone, stamps their local time."""

    def __init__(self, reminders: Reminders) -> None:
        self.reminders = reminders
        self._tools = scheduling_tools(reminders)
        self._task_tools = [t for t in self._tools if t.name not in SCHEDULING_ONLY_BY_USERS]

    async def prompt(self, message: Incoming) -> str | None:
        """How to use the tools, and the user's zone (stable, so the prompt cache holds)."""
        zone = await self.reminders.zone(message.user_id)
        return PROMPT.format(zone=zone.key)

    def tools(self, message: Incoming) -> Sequence[Tool]:
        """The five scheduling tools; in a scheduled task's turn only listing, cancelling and
        the time zone (a task that scheduled tasks would run the model without end)."""
        if message.schedule_id is None:
            return self._tools
        return self._task_tools

    async def turn_note(self, message: Incoming) -> str | None:
        """The sender's local date and time, to the minute, e.g. ``[Tue 24 Nov 2026 09:00 CET
        (Europe/Berlin)]``."""
        # a scheduled task's as of its message (a batched one's turn is built twice, alike)
        at = message.date if message.schedule_id is not None else None
        return f"[{await self.reminders.local_now(message.user_id, at)}]"
