"""Session persistence: every context append, one JSON line each (in a file, or in PostgreSQL)."""

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
    JsonlSessionStore,
    ResetEntry,
    SessionEntry,
    SessionFile,
    parse_entry,
    read_session_file,
)
from botkit.sessions.postgres import PostgresSessionStore

__all__ = [
    "SCHEMA_VERSION",
    "AnyEntry",
    "CompactionEntry",
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
