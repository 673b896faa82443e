"""Erasing from SQLite without traces: deleted rows are zeroed, and the write-ahead log that
still holds their old pages is written back and emptied at once, not at the next checkpoint."""

from __future__ import annotations

import sqlite3

import structlog

__all__ = ["leave_no_trace"]

log = structlog.get_logger(__name__)


def leave_no_trace(db: sqlite3.Connection) -> None:
    """After an erasure committed on ``db`` (with ``secure_delete`` on): copy the log into the
    database and truncate it, so no old page of the erased rows stays in ``-wal``."""
    busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:  # a reader held an old snapshot: the next checkpoint will finish it
        log.warning(
            "privacy.wal_not_emptied", path=db.execute("PRAGMA database_list").fetchone()[2]
        )
