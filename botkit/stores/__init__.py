"""Users, invites and daily token usage: SQLite by default, PostgreSQL for many processes.

The PostgreSQL schema is applied by :func:`botkit.stores.migrate.migrate` (``python -m botkit
migrate``); it is not re-exported here, so that the name stays the module's.
"""

from typing import TYPE_CHECKING, Any

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
from botkit.stores.schedules import NewSchedule, Schedule, ScheduleStore
from botkit.stores.sqlite import SqliteUserStore

if TYPE_CHECKING:
    from botkit.stores.postgres import PostgresUserStore

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


def __getattr__(name: str) -> Any:
    # asyncpg is the postgres extra's: imported only when the PostgreSQL store is asked for.
    if name == "PostgresUserStore":
        from botkit.extras import require_extra

        require_extra("asyncpg", "postgres", "PostgresUserStore")
        from botkit.stores.postgres import PostgresUserStore

        return PostgresUserStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
