"""Users, invites and daily token usage: SQLite by default, PostgreSQL for many processes.

The PostgreSQL schema is applied by :func:`botkit.stores.migrate.migrate` (``python -m botkit
migrate``); it is not re-exported here, so that the name stays the module's.
"""

from botkit.stores.base import (
    INVITE_CODE_PATTERN,
    INVITE_PREFIX_LENGTH,
    DailyUsage,
    Invite,
    RedeemFailure,
    RedeemResult,
    RevokeResult,
    StoredInvite,
    UserRecord,
    UserStore,
    hash_invite_code,
    new_invite_code,
)
from botkit.stores.postgres import PostgresUserStore
from botkit.stores.schedules import NewSchedule, Schedule, ScheduleStore
from botkit.stores.sqlite import SqliteUserStore

__all__ = [
    "INVITE_CODE_PATTERN",
    "INVITE_PREFIX_LENGTH",
    "DailyUsage",
    "Invite",
    "NewSchedule",
    "PostgresUserStore",
    "RedeemFailure",
    "RedeemResult",
    "RevokeResult",
    "Schedule",
    "ScheduleStore",
    "SqliteUserStore",
    "StoredInvite",
    "UserRecord",
    "UserStore",
    "hash_invite_code",
    "new_invite_code",
]
