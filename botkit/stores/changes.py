"""Changes to a few PostgreSQL tables, as they happen, for what a process keeps in memory.

Migration 029's triggers notify the ``botkit_changes`` channel with ``<table> <conversation>``
whenever a row of the approvals, held messages or choices tables is written or deleted, by any
process (a worker, ``python -m botkit users``, an erasure). A :class:`ChangeFeed` listens on a
connection of its own; a store keeps what it read only while the feed is live, and forgets a
conversation's when the feed names it. When the connection is lost the feed's ``epoch`` moves
on, which tells every store to forget all it kept; the feed connects again on a later look.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

__all__ = ["CHANNEL", "ChangeFeed", "KeptRows"]

CHANNEL = "botkit_changes"
"""The channel migration 029's triggers notify."""

_TRIGGERS_THERE = "SELECT to_regprocedure('botkit_note_change()') IS NOT NULL"

RETRY_AFTER = 5.0
"""Seconds between attempts to listen again after the connection was lost or refused."""

log = structlog.get_logger(__name__)

Listener = Callable[[str], None]


class ChangeFeed:
    """Notifications of changed rows, by table, from one listening connection (lazily made)."""

    def __init__(self, dsn: str | None) -> None:
        self._dsn = dsn
        """Where to listen; ``None`` (a pool passed in, its address unknown): never live."""
        self._conn: Any = None
        self._listeners: dict[str, list[Listener]] = {}
        self._next_try = 0.0
        self.epoch = 0
        """Moves on whenever the feed starts or stops: what was kept under another is stale."""

    def on(self, table: str, listener: Listener) -> None:
        """Call ``listener`` with the conversation of each changed row of ``table``."""
        self._listeners.setdefault(table, []).append(listener)

    @property
    def live(self) -> bool:
        """Whether every change is heard now."""
        return self._conn is not None and not self._conn.is_closed()

    async def watching(self) -> bool:
        """Whether the feed is live, listening first if it can (at most every few seconds)."""
        if self.live:
            return True
        if self._conn is not None:
            self._lost(self._conn)
        if self._dsn is None or time.monotonic() < self._next_try:
            return False
        self._next_try = time.monotonic() + RETRY_AFTER
        try:
            await self._listen(self._dsn)
        except Exception as e:  # no feed: stores ask every time, as without one
            log.warning("store.change_feed_unavailable", error=f"{type(e).__name__}: {e}")
            return False
        return True

    async def _listen(self, dsn: str) -> None:
        import asyncpg  # type: ignore[import-untyped]

        conn = await asyncpg.connect(dsn)
        try:
            if not await conn.fetchval(_TRIGGERS_THERE):
                raise LookupError("migration 029 (the change feed's triggers) is not applied")
            await conn.add_listener(CHANNEL, self._heard)
            conn.add_termination_listener(self._lost)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self.epoch += 1

    def _heard(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        table, _, conversation = payload.partition(" ")
        for listener in self._listeners.get(table, ()):
            listener(conversation)

    def _lost(self, conn: Any) -> None:
        if conn is self._conn:
            self._conn = None
            self.epoch += 1
            log.warning("store.change_feed_lost")

    async def close(self) -> None:
        """Stop listening."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self.epoch += 1
            await conn.close()


class KeptRows:
    """What a store read of each conversation, kept while its :class:`ChangeFeed` is live (or,
    with ``alone``, when there is no feed: this process is the only writer, which forgets a
    conversation's row whenever it writes it)."""

    def __init__(self, feed: ChangeFeed | None, *tables: str, alone: bool = False) -> None:
        self.feed = feed
        self.alone = alone and feed is None
        self._rows: dict[str, Any] = {}
        self._epoch = -1
        self.changes = 0
        """Changes heard so far: a read that saw this move while it ran is not kept."""
        if feed is not None:
            for table in tables:
                feed.on(table, self.forget)

    async def usable(self) -> bool:
        """Whether what is kept can stand for a read now (it is cleared when it cannot)."""
        if self.alone:
            return True
        if self.feed is None or not await self.feed.watching():
            self._rows.clear()
            return False
        if self._epoch != self.feed.epoch:
            self._rows.clear()
            self._epoch = self.feed.epoch
        return True

    def get(self, conversation: str) -> tuple[bool, Any]:
        """Whether ``conversation``'s row is kept, and the row (``None``: it has none)."""
        if conversation in self._rows:
            return True, self._rows[conversation]
        return False, None

    def keep(self, conversation: str, row: Any, read_at: int) -> None:
        """Keep ``row``, read when :attr:`changes` was ``read_at``, unless a change came since."""
        live = self.alone or (self.feed is not None and self._epoch == self.feed.epoch)
        if self.changes == read_at and live:
            if len(self._rows) >= 100_000:
                self._rows.clear()
            self._rows[conversation] = row

    def forget(self, conversation: str) -> None:
        """Forget ``conversation``'s row (it changed)."""
        self.changes += 1
        self._rows.pop(conversation, None)
