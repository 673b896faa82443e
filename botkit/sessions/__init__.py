"""Session persistence: every context append, one JSON line each (in a file, or in PostgreSQL)."""

from typing import TYPE_CHECKING, Any

from botkit.sessions.base import (
    NumberedSessionFile,
    NumberedSessionStore,
    SessionStore,
    is_conversation_key,
)
from botkit.sessions.configured import session_store_for
from botkit.sessions.jsonl import (
    SCHEMA_VERSION,
    AnyEntry,
    CompactionEntry,
    FeedbackEntry,
    JsonlSessionStore,
    ResetEntry,
    SessionEntry,
    SessionFile,
    parse_entry,
    read_session_file,
)

if TYPE_CHECKING:
    from botkit.sessions.postgres import PostgresSessionStore

__all__ = [
    "SCHEMA_VERSION",
    "AnyEntry",
    "CompactionEntry",
    "FeedbackEntry",
    "JsonlSessionStore",
    "NumberedSessionFile",
    "NumberedSessionStore",
    "PostgresSessionStore",
    "ResetEntry",
    "SessionEntry",
    "SessionFile",
    "SessionStore",
    "is_conversation_key",
    "parse_entry",
    "read_session_file",
    "session_store_for",
]


def __getattr__(name: str) -> Any:
    # asyncpg is the postgres extra's: imported only when the PostgreSQL store is asked for.
    if name == "PostgresSessionStore":
        from botkit.extras import require_extra

        require_extra("asyncpg", "postgres", "PostgresSessionStore")
        from botkit.sessions.postgres import PostgresSessionStore

        return PostgresSessionStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
