"""Session persistence: every context append, one JSON line each."""

from botkit.sessions.base import SessionStore
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

__all__ = [
    "SCHEMA_VERSION",
    "AnyEntry",
    "CompactionEntry",
    "JsonlSessionStore",
    "ResetEntry",
    "SessionEntry",
    "SessionFile",
    "SessionStore",
    "parse_entry",
    "read_session_file",
]
