"""A user's pending approvals and the messages held while one waits (``botkit.approvals``):
``<sessions_dir>/approvals.db`` with files, the ``botkit_approvals`` and ``botkit_held_messages``
tables with PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from botkit.config import Settings
from botkit.privacy.parts import Described, _has_sender, _per_user_keys, _pg, _write
from botkit.privacy.sqlite import leave_no_trace

__all__ = ["ApprovalsPart"]

_APPROVALS = "SELECT * FROM botkit_approvals WHERE user_id = {0}"
_HELD = "SELECT seq, conversation, update_json FROM botkit_held_messages"


class ApprovalsPart:
    """Approvals the user asked for (or that wait in their conversations) and their held
    messages, in private chats and groups."""

    name = "approvals"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def forget(self, user_id: int, *, keep_block: bool = False) -> int:
        """Delete them."""
        approvals, held = await self._theirs(user_id)
        ids = [row["id"] for row in approvals]
        seqs = [row["seq"] for row in held]
        if self.settings.database_url is None:
            await asyncio.to_thread(self._sqlite_delete, ids, seqs)
        else:
            async with _pg(self.settings) as conn, conn.transaction():
                await conn.execute("DELETE FROM botkit_approvals WHERE id = ANY($1)", ids)
                await conn.execute("DELETE FROM botkit_held_messages WHERE seq = ANY($1)", seqs)
        return len(ids) + len(seqs)

    async def export(self, user_id: int, folder: Path) -> Described:
        """``approvals/approvals.json`` and ``approvals/held_messages.json``."""
        approvals, held = await self._theirs(user_id)
        described: Described = {}
        for name, rows, text in (
            ("approvals.json", approvals, "tool calls waiting for (or given) a person's Allow"),
            ("held_messages.json", held, "your messages held while an approval waited"),
        ):
            if rows:
                target = folder / "approvals" / name
                _write(target, json.dumps(rows, indent=2, default=str).encode("utf-8"))
                described[str(target.relative_to(folder))] = text
        return described

    async def _theirs(self, user_id: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Their approvals, and the held messages they sent or that wait in their conversations."""
        if self.settings.database_url is None:
            approvals = await asyncio.to_thread(self._sqlite_rows, _APPROVALS, user_id)
            held = await asyncio.to_thread(self._sqlite_rows, _HELD)
        else:
            async with _pg(self.settings) as conn:
                approvals = [dict(r) for r in await conn.fetch(_APPROVALS.format("$1"), user_id)]
                held = [dict(r) for r in await conn.fetch(_HELD)]
        conversations = {row["conversation"] for row in held}
        own = set(_per_user_keys(sorted(conversations), user_id))
        theirs = [
            row
            for row in held
            if row["conversation"] in own or _has_sender(_loaded(row["update_json"]), user_id)
        ]
        return approvals, theirs

    @property
    def _path(self) -> Path:
        return self.settings.sessions_dir / "approvals.db"

    def _sqlite_rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        if not self._path.exists():
            return []
        db = sqlite3.connect(self._path)
        db.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in db.execute(query.format("?"), args).fetchall()]
        except sqlite3.OperationalError:  # no such table: nothing was ever held
            return []
        finally:
            db.close()

    def _sqlite_delete(self, ids: list[str], seqs: list[int]) -> None:
        if not ids and not seqs:
            return
        db = sqlite3.connect(self._path)
        try:
            db.execute("PRAGMA secure_delete = ON")  # the freed pages are zeroed
            with db:
                db.executemany("DELETE FROM botkit_approvals WHERE id = ?", [(i,) for i in ids])
                db.executemany(
                    "DELETE FROM botkit_held_messages WHERE seq = ?", [(s,) for s in seqs]
                )
            leave_no_trace(db)
        finally:
            db.close()


def _loaded(value: Any) -> Any:
    """A held update as stored: JSON text (SQLite, asyncpg without a codec) or parsed."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return None
    return value
