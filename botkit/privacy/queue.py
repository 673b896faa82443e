"""The copies of a user's updates the scale-out runtimes keep in PostgreSQL: the jobs of
procrastinate's queue (``procrastinate_jobs.args``: waiting, failed or cancelled ones; a
successful job is deleted when it ends) and ``botkit_unparseable_updates``.

``botkit_updates`` holds no update, only which job claimed an update's id: it stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from botkit.config import Settings
from botkit.privacy.approvals import _loaded
from botkit.privacy.parts import Described, _pg

__all__ = ["QueuePart", "names_user"]

# A job being run now is left to its worker (deleted when it succeeds): taking its row away
# under the worker would fail the job's end. The user's id in the text picks candidates only.
_JOBS = """
    SELECT id, args FROM procrastinate_jobs
    WHERE status <> 'doing' AND args::text LIKE '%' || $1 || '%'"""
_UNPARSEABLE = """
    SELECT bot_id, update_id, payload FROM botkit_unparseable_updates
    WHERE payload LIKE '%' || $1 || '%'"""
_DELETE_JOBS = "DELETE FROM procrastinate_jobs WHERE id = ANY($1::bigint[]) AND status <> 'doing'"
_DELETE_UNPARSEABLE = """
    DELETE FROM botkit_unparseable_updates
    WHERE (bot_id, update_id) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[]))"""


class QueuePart:
    """The user's updates waiting in (or left failed by) the job queue, and those that could
    not be read; PostgreSQL only (the files runtime's inbox journal is ``InboxPart``'s)."""

    name = "queue"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def forget(self, user_id: int, *, keep_block: bool = False) -> int:
        """Delete the jobs and unreadable updates from the user or in their private chat."""
        if self.settings.database_url is None:
            return 0
        async with _pg(self.settings) as conn, conn.transaction():
            jobs = await _jobs(conn, user_id)
            unread = await _unparseable(conn, user_id)
            if jobs:
                await conn.execute(_DELETE_JOBS, jobs)
            if unread:
                bots, updates = zip(*unread, strict=True)
                await conn.execute(_DELETE_UNPARSEABLE, list(bots), list(updates))
        return len(jobs) + len(unread)

    async def export(self, user_id: int, folder: Path) -> Described:
        """Nothing of its own: an update's text is in the sessions once its turn ran."""
        return {}


async def _jobs(conn: Any, user_id: int) -> list[int]:
    """The ids of the queue's jobs (not running now) whose arguments hold the user's update."""
    if not await _exists(conn, "procrastinate_jobs"):
        return []
    rows = await conn.fetch(_JOBS, str(user_id))
    return [row["id"] for row in rows if names_user(_loaded(row["args"]), user_id)]


async def _unparseable(conn: Any, user_id: int) -> list[tuple[int, int]]:
    """``(bot_id, update_id)`` of the unreadable updates from the user."""
    if not await _exists(conn, "botkit_unparseable_updates"):
        return []
    rows = await conn.fetch(_UNPARSEABLE, str(user_id))
    return [
        (row["bot_id"], row["update_id"])
        for row in rows
        if names_user(_loaded(row["payload"]), user_id)
    ]


async def _exists(conn: Any, table: str) -> bool:
    return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table))


def names_user(value: Any, user_id: int) -> bool:
    """Whether an update (or any part of it) is from ``user_id`` or in their private chat."""
    if isinstance(value, Mapping):
        for field in ("from", "chat"):
            who = value.get(field)
            if isinstance(who, Mapping) and who.get("id") == user_id:
                return True
        return any(names_user(v, user_id) for v in value.values())
    if isinstance(value, list):
        return any(names_user(v, user_id) for v in value)
    return False
