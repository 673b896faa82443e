"""``python -m botkit scheduled [--user ID] [--json]``: pending schedules, for an operator;
``python -m botkit scheduled cancel ID``: cancel any of them."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any
from zoneinfo import ZoneInfo

from botkit.config import Settings
from botkit.reminders.times import format_local
from botkit.stores.schedules import Schedule

__all__ = ["cancel_scheduled", "list_scheduled", "schedule_json"]


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    """One schedule as a JSON object (times in ISO 8601, UTC)."""
    return {
        "id": schedule.id,
        "user_id": schedule.user_id,
        "chat_id": schedule.chat_id,
        "thread_id": schedule.thread_id,
        "kind": schedule.kind,
        "text": schedule.text,
        "due_at": schedule.due_at.isoformat(),
        "repeat": schedule.repeat,
        "timezone": schedule.timezone,
        "status": schedule.status,
        "fired": schedule.fired,
        "paused": schedule.paused,
    }


def _line(schedule: Schedule) -> str:
    where = f"chat {schedule.chat_id}" + (
        f" topic {schedule.thread_id}" if schedule.thread_id else ""
    )
    repeat = f", {schedule.repeat}" if schedule.repeat else ""
    firing = " (being delivered)" if schedule.status == "firing" else ""
    firing += " (paused: its owner may not use the bot now)" if schedule.paused else ""
    when = format_local(schedule.due_at, ZoneInfo(schedule.timezone))
    return (
        f"#{schedule.id} {schedule.kind} for user {schedule.user_id} in {where}: "
        f"{when}{repeat}{firing}: {schedule.text}"
    )


def list_scheduled(settings: Settings, user_id: int | None, *, as_json: bool) -> int:
    """Print the pending schedules (of one user, or everyone's), soonest first; exit status."""
    from botkit.access import open_user_store
    from botkit.log import configure_logging

    configure_logging(settings.log_level, secrets=settings.secret_values())

    async def pending() -> list[Schedule]:
        store = await open_user_store(settings, create=False)
        try:
            return await store.pending_schedules(user_id)
        finally:
            await store.close()

    schedules = asyncio.run(pending())
    for schedule in schedules:
        print(json.dumps(schedule_json(schedule)) if as_json else _line(schedule))
    if not schedules and not as_json:
        print("Nothing is scheduled.", file=sys.stderr)
    return 0


def cancel_scheduled(settings: Settings, schedule_id: int) -> int:
    """Cancel a pending schedule, whoever set it, and say so in one line; exit status 1 (and
    one line) when there is no such pending schedule."""
    from botkit.access import open_user_store
    from botkit.log import configure_logging

    configure_logging(settings.log_level, secrets=settings.secret_values())

    async def cancel() -> Schedule | None:
        store = await open_user_store(settings)
        try:
            return await store.cancel_schedule(schedule_id)
        finally:
            await store.close()

    cancelled = asyncio.run(cancel())
    if cancelled is None:
        print(f"botkit: no pending reminder or task #{schedule_id}", file=sys.stderr)
        return 1
    print(f"Cancelled {_line(cancelled)}")
    return 0
