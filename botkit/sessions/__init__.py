"""Session persistence: every context append, one JSON line each."""

from botkit.sessions.base import SessionStore
from botkit.sessions.jsonl import (
    SCHEMA_VERSION,
    JsonlSessionStore,
    SessionEntry,
    SessionFile,
    read_session_file,
)

__all__ = [
    "SCHEMA_VERSION",
    "JsonlSessionStore",
    "SessionEntry",
    "SessionFile",
    "SessionStore",
    "read_session_file",
]
