"""``python -m botkit scheduled [--user ID] [--json]``: pending schedules, for an operator."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any
from zoneinfo import ZoneInfo

from botkit.config import Settings
from botkit.reminders.times import format_local
from botkit.stores.schedules import Schedule

__all__ = ["list_scheduled", "schedule_json"]


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
    }


def _line(schedule: Schedule) -> str:
    where = f"chat {schedule.chat_id}" + (
        f" topic {schedule.thread_id}" if schedule.thread_id else ""
    )
    repeat = f", {schedule.repeat}" if schedule.repeat else ""
    firing = " (being delivered)" if schedule.status == "firing" else ""
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
        store = await open_user_store(settings)
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
