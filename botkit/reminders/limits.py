"""Whether a claimed schedule fires now: its owner may still use the bot, and a task is within
its user's runs for the day. Both runtimes ask here, just before delivery.

A schedule whose owner ``authorize`` refuses (removed from the allowlist, blocked, or any
refusal of a bot's own ``authorize``) is *paused*: it stays pending at the occurrence it was
due, is listed as paused, and is looked at again every :data:`PAUSED_RECHECK`. Once its owner
is admitted again it fires that occurrence, late (once, as after the bot was down), and then
keeps its times.

A task's runs are counted per user and UTC day (BOTKIT_MAX_TASK_RUNS); one past the count is
put off to its first occurrence the next UTC day (a one-off task: to the next UTC midnight),
its user told why in its chat and the operator in the log.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

import structlog

from botkit.config import Settings
from botkit.errors import BotkitError, MessengerError
from botkit.messengers.base import Incoming, Messenger
from botkit.metrics import Metrics
from botkit.options import BotOptions
from botkit.reminders.service import Reminders
from botkit.reminders.times import format_local, parse_repeat
from botkit.stores.schedules import Schedule

__all__ = ["PAUSED_RECHECK", "LimitsHost", "held_back", "owner_message"]

log = structlog.get_logger(__name__)

PAUSED_RECHECK = timedelta(minutes=5)
"""How often a paused schedule is looked at again (its owner may have been admitted again)."""


class LimitsHost(Protocol):
    """What the limits need of a bot: its settings, texts, schedules, metrics and gate."""

    settings: Settings
    options: BotOptions
    reminders: Reminders
    metrics: Metrics

    async def authorize(self, message: Incoming) -> str | None:
        """``None`` admits the message; a text rejects it."""
        ...


async def held_back(
    host: LimitsHost, messenger: Messenger, schedule: Schedule, zone: ZoneInfo, now: datetime
) -> bool:
    """``True`` if the claimed ``schedule`` does not fire now: it was paused or put off (and
    that recorded), so the caller delivers nothing."""
    if await host.authorize(owner_message(schedule, now)):
        await _pause(host, schedule, now)
        return True
    if schedule.kind == "task" and not await _run_counted(host, schedule, now):
        await _put_off(host, messenger, schedule, zone, now)
        return True
    return False


def owner_message(schedule: Schedule, now: datetime) -> Incoming:
    """The schedule as a message from its owner in its chat, for ``authorize`` to judge."""
    return Incoming(
        update_id=-(schedule.id * 1_000_000 + schedule.fired + 1),
        user_id=schedule.user_id,
        chat_id=schedule.chat_id,
        text=schedule.text,
        date=now,
        chat_type=schedule.chat_type,
        thread_id=schedule.thread_id,
        schedule_id=schedule.id,
    )


async def _pause(host: LimitsHost, schedule: Schedule, now: datetime) -> None:
    until = now + PAUSED_RECHECK
    paused = await (await host.reminders.store()).pause_schedule(schedule, until=until)
    host.metrics.schedule_fired(schedule.kind, "paused")
    log.info(
        "reminders.paused",
        id=schedule.id,
        user_id=schedule.user_id,
        kind=schedule.kind,
        why="its owner is not admitted",
        recheck_at=until.isoformat(),
        recorded=paused,
    )


async def _run_counted(host: LimitsHost, schedule: Schedule, now: datetime) -> bool:
    store = await host.reminders.store()
    day = now.astimezone(UTC).date()
    return await store.take_task_run(schedule, day, limit=host.settings.max_task_runs)


async def _put_off(
    host: LimitsHost, messenger: Messenger, schedule: Schedule, zone: ZoneInfo, now: datetime
) -> None:
    later = _first_time_tomorrow(schedule, zone, now)
    store = await host.reminders.store()
    recorded = await store.finish_schedule(schedule, next_due=later, fired_at=now, delivered=False)
    runs = host.settings.max_task_runs
    host.metrics.schedule_fired(schedule.kind, "put_off")
    log.warning(
        "reminders.task_put_off",
        id=schedule.id,
        user_id=schedule.user_id,
        why=f"the user's tasks ran {runs} times today (BOTKIT_MAX_TASK_RUNS)",
        next_due=later.isoformat(),
        recorded=recorded,
    )
    when = format_local(later, await host.reminders.zone(schedule.user_id))
    notice = host.options.task_put_off_text.format(id=schedule.id, when=when, runs=runs)
    try:
        await messenger.send_text(schedule.chat_id, notice, thread_id=schedule.thread_id)
    except MessengerError as e:
        log.warning("reminders.notice_not_sent", id=schedule.id, error=str(e))


def _first_time_tomorrow(schedule: Schedule, zone: ZoneInfo, now: datetime) -> datetime:
    """The task's first occurrence from the next UTC midnight on; that midnight for a one-off."""
    midnight = datetime.combine(now.astimezone(UTC).date() + timedelta(days=1), time(), UTC)
    try:
        rule = parse_repeat(schedule.repeat)
        if rule is None:
            return midnight
        return rule.next_after(schedule.due_at, zone, midnight - timedelta(microseconds=1))
    except (OverflowError, BotkitError):
        return midnight
