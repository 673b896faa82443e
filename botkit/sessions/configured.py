"""The session store a bot's settings ask for: PostgreSQL with BOTKIT_DATABASE_URL, else files."""

from __future__ import annotations

from botkit.config import Settings
from botkit.extras import require_extra
from botkit.sessions.base import SessionStore
from botkit.sessions.jsonl import JsonlSessionStore

__all__ = ["session_store_for"]


def session_store_for(settings: Settings) -> SessionStore:
    """PostgreSQL when BOTKIT_DATABASE_URL is set (connected on first use), else JSONL files."""
    if settings.database_url is None:
        return JsonlSessionStore(settings.sessions_dir)
    require_extra("asyncpg", "postgres", "BOTKIT_DATABASE_URL")
    from botkit.sessions.postgres import PostgresSessionStore

    return PostgresSessionStore.lazy(settings.database_url.get_secret_value())
