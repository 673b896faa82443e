"""Reminders and scheduled tasks for a bot's users: time zones, adding, listing, cancelling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import structlog

from botkit import tracing
from botkit.config import Settings
from botkit.errors import ToolError
from botkit.reminders.times import (
    Repeat,
    describe_duration,
    format_local,
    parse_repeat,
    parse_when,
    zone_named,
)
from botkit.stores.base import UserStore
from botkit.stores.schedules import NewSchedule, Schedule, ScheduleKind

__all__ = ["Clock", "Place", "Reminders", "utc_now"]

log = structlog.get_logger(__name__)

Clock = Callable[[], datetime]
"""Tells the time (timezone-aware); tests pass a fixed one."""

ZONE_CACHE_SECONDS = 10.0
_MINUTES_KEPT = 256
"""Local times kept formatted (zone and minute); all are dropped when there are more."""
"""How long a user's time zone is trusted from memory (another process may change it)."""


def utc_now() -> datetime:
    """The current time, in UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a schedule was asked for, so it is delivered there: chat, topic, kind of chat."""

    user_id: int
    chat_id: int
    thread_id: int | None = None
    chat_type: str = "private"


class Reminders:
    """The schedules of a bot's users, kept in its user store; every time in the user's zone."""

    def __init__(
        self,
        store: Callable[[], Awaitable[UserStore]],
        settings: Settings,
        *,
        clock: Clock = utc_now,
    ) -> None:
        self.store = store
        """Opens (or returns) the bot's user store."""
        self.settings = settings
        self.clock = clock
        """What "now" is; a fixed clock in tests."""
        self.default_zone = zone_named(settings.timezone)
        self.wake: Callable[[], None] | None = None
        """Called when a schedule is added, so a firing loop in this process looks again."""
        self._zones: dict[int, tuple[ZoneInfo, float]] = {}
        self._minutes: dict[tuple[str, datetime], str] = {}

    async def zone(self, user_id: int) -> ZoneInfo:
        """The user's time zone: theirs if they set one, else BOTKIT_TIMEZONE."""
        cached = self._zones.get(user_id)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        return self.note_zone(user_id, await (await self.store()).get_timezone(user_id))

    def note_zone(self, user_id: int, name: str | None) -> ZoneInfo:
        """Take ``name`` (``None``: none set), just read from the store by someone else, as
        the user's cached zone: the next look needs no read of its own."""
        zone = self.default_zone
        if name is not None:
            try:
                zone = zone_named(name)
            except ToolError:
                log.warning("reminders.unknown_zone_stored", user_id=user_id, zone=name)
        self._zones[user_id] = (zone, time.monotonic() + ZONE_CACHE_SECONDS)
        return zone

    async def set_zone(self, user_id: int, name: str) -> ZoneInfo:
        """Make ``name`` (an IANA zone) the user's; a ToolError if there is no such zone."""
        zone = zone_named(name)
        await (await self.store()).set_timezone(user_id, zone.key)
        self._zones[user_id] = (zone, time.monotonic() + ZONE_CACHE_SECONDS)
        log.info("reminders.zone_set", user_id=user_id, zone=zone.key)
        return zone

    async def local_now(self, user_id: int, at: datetime | None = None) -> str:
        """The user's local date and time (now, or ``at``), to the minute:
        ``Tue 24 Nov 2026 09:00 CET``."""
        zone = await self.zone(user_id)
        moment = (at or self.clock()).replace(second=0, microsecond=0)
        key = (zone.key, moment)
        shown = self._minutes.get(key)
        if shown is None:  # most turns of a minute share a few zones: formatted once each
            if len(self._minutes) >= _MINUTES_KEPT:
                self._minutes.clear()
            shown = self._minutes[key] = f"{format_local(moment, zone)} ({zone.key})"
        return shown

    async def add(
        self,
        place: Place,
        kind: ScheduleKind,
        text: str,
        when: str,
        repeat: str | None = None,
        *,
        urgent: bool = True,
    ) -> Schedule:
        """Schedule ``text`` for ``when`` (and per ``repeat``); ToolError on anything unclear.

        A task with ``urgent=False`` may wait for a Message Batch at half price (when
        BOTKIT_TASK_BATCHES is ``marked``, the default)."""
        if not text.strip():
            raise ToolError("the text is empty: say what should be delivered or done.")
        zone = await self.zone(place.user_id)
        due = parse_when(when, self.clock(), zone)
        rule = parse_repeat(repeat)
        if kind == "task" and rule is not None:
            # a cron expression's occurrences are walked: tens of ms, off the event loop
            await asyncio.to_thread(self._check_task_repeat, rule)
        new = NewSchedule(
            user_id=place.user_id,
            chat_id=place.chat_id,
            thread_id=place.thread_id,
            chat_type=place.chat_type,
            kind=kind,
            text=text.strip(),
            due_at=due,
            timezone=zone.key,
            repeat=None if rule is None else rule.text,
            urgent=urgent,
            # its turns link to the one that scheduled it (this tool call's span)
            traceparent=tracing.tracer.carrier().get("traceparent") if kind == "task" else None,
        )
        made = await (await self.store()).add_schedule(new, max_pending=self.settings.max_scheduled)
        if made is None:
            raise ToolError(
                f"the user already has {self.settings.max_scheduled} reminders and tasks "
                "pending, the most allowed: cancel one first (list_scheduled shows them)."
            )
        log.info(
            "reminders.added", user_id=place.user_id, id=made.id, kind=kind, due=due, urgent=urgent
        )
        if self.wake is not None:
            self.wake()
        return made

    def _check_task_repeat(self, rule: Repeat) -> None:
        """A task runs the model each time: it may not repeat more often than
        BOTKIT_MIN_TASK_INTERVAL (a reminder, which costs no model call, may)."""
        minimum = timedelta(seconds=self.settings.min_task_interval)
        gap = rule.shortest_gap(minimum)
        if gap is not None and gap < minimum:
            shortest = describe_duration(minimum)
            raise ToolError(
                f"{rule.text!r} is too often for a scheduled task: a task may repeat at most "
                f"once every {shortest}. Repeat it every {shortest} or less often, or use "
                "remind for a plain reminder (those may repeat every minute)."
            )

    async def pending(self, user_id: int) -> list[Schedule]:
        """The user's schedules that will still fire, soonest first."""
        return await (await self.store()).pending_schedules(user_id)

    async def cancel(self, user_id: int, schedule_id: int) -> Schedule | None:
        """Cancel one of the user's schedules; ``None`` if they have no such pending one."""
        cancelled = await (await self.store()).cancel_schedule(schedule_id, user_id)
        if cancelled is not None:
            log.info("reminders.cancelled", user_id=user_id, id=schedule_id)
        return cancelled

    async def in_chat(self, chat_id: int) -> list[Schedule]:
        """Every schedule of a chat that will still fire, whoever set it (for its admins)."""
        return await (await self.store()).pending_schedules(chat_id=chat_id)

    async def cancel_in_chat(self, chat_id: int, schedule_id: int) -> Schedule | None:
        """Cancel a chat's schedule, whoever set it; ``None`` if it has no such pending one."""
        cancelled = await (await self.store()).cancel_schedule(schedule_id, chat_id=chat_id)
        if cancelled is not None:
            log.info("reminders.cancelled", user_id=cancelled.user_id, id=schedule_id, by="chat")
        return cancelled

    def describe(self, schedule: Schedule, zone: ZoneInfo | None = None) -> str:
        """One line: ``#3 reminder, Tue 24 Nov 2026 09:00 CET, daily: call the plumber``
        (`` (not urgent)`` after a task that may wait for a batch, `` (paused)`` while its
        owner may not use the bot)."""
        when = format_local(schedule.due_at, zone or ZoneInfo(schedule.timezone))
        repeat = f", {schedule.repeat}" if schedule.repeat else ""
        paused = " (paused)" if schedule.paused else ""
        waits = " (not urgent)" if schedule.kind == "task" and not schedule.urgent else ""
        return f"#{schedule.id} {schedule.kind}, {when}{repeat}: {schedule.text}{waits}{paused}"
