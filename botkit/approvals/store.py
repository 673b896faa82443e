"""Where waiting approvals and the messages held behind them are kept, across restarts.

A decision is recorded once: ``decide`` changes a request that is still ``pending`` and no
other, so of two presses (or a press and the expiry) exactly one wins; ``claim`` does the
same for resuming the turn, so a decided call runs in one process only.

Resuming a turn and draining held messages are leased: the process doing it holds a time
(``resuming_until``, ``taken_until``) it keeps renewing; another process takes over only once
that time has passed (the first one died), so a live resumption is never ended or joined.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import aiosqlite

__all__ = ["ApprovalStore", "Decision", "HeldMessage", "PendingApproval", "SqliteApprovals"]

Decision = Literal["allowed", "denied", "expired"]
State = Literal["pending", "decided", "resuming", "done"]


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """One request for approval: whose turn, which calls, where it was asked, its state."""

    id: str
    conversation: str
    """The conversation it holds up (``<owner id>:<group key>``)."""
    user_id: int
    """Whose turn it is: they may press."""
    approvers: tuple[int, ...]
    """Others who may press (``Bot.approvers``)."""
    chat_id: int
    turn: dict[str, Any]
    """What the turn's message was (sender, chat, topic, date) to resume it."""
    calls: list[dict[str, Any]]
    """The calls waiting (``id``, ``name``, ``input``)."""
    deadline: float
    """When it expires (seconds since the epoch)."""
    message_id: int | None = None
    """The message with the buttons."""
    state: State = "pending"
    decision: Decision | None = None
    resuming_until: float = 0.0
    """While ``resuming``: until when the process resuming it holds it (renewed as it runs)."""

    def may_press(self, user_id: int) -> bool:
        """Whether ``user_id`` may decide it."""
        return user_id == self.user_id or user_id in self.approvers


@dataclass(frozen=True, slots=True)
class HeldMessage:
    """A message of a conversation that arrived while it waited, kept in order."""

    seq: int
    conversation: str
    update: dict[str, Any]
    """The raw update, read again when its turn comes."""


class ApprovalStore(Protocol):
    """Keeps approvals and held messages; every change is atomic."""

    shared: bool
    """Whether other processes use it too (then only a lease tells that one is alive)."""

    async def add(self, approval: PendingApproval) -> None:
        """Record a new request."""
        ...

    async def set_message(self, approval_id: str, message_id: int | None) -> None:
        """Note the message its buttons are under."""
        ...

    async def get(self, approval_id: str) -> PendingApproval | None:
        """The request ``approval_id``, if any."""
        ...

    async def decide(self, approval_id: str, decision: Decision) -> bool:
        """Record ``decision`` if the request is still pending; whether this call did."""
        ...

    async def claim(self, approval_id: str, until: float) -> bool:
        """Take a decided request for resuming its turn, leased ``until``; whether this call
        did."""
        ...

    async def renew(self, approval_id: str, until: float) -> bool:
        """Extend the lease of a request being resumed; whether it is still ``resuming``."""
        ...

    async def abandon(self, approval_id: str, at: float) -> bool:
        """End a resumption whose lease ran out by ``at`` (its process died); whether this
        call did."""
        ...

    async def finish(self, approval_id: str) -> None:
        """The turn resumed and ended (or cannot be resumed)."""
        ...

    async def waiting(self, conversation: str) -> bool:
        """Whether the conversation waits: an unfinished request, or messages held."""
        ...

    async def unfinished(self, conversation: str) -> PendingApproval | None:
        """The conversation's request not finished yet, if any."""
        ...

    async def hold(self, conversation: str, update: dict[str, Any]) -> None:
        """Keep a message until the conversation stops waiting."""
        ...

    async def next_held(self, conversation: str) -> HeldMessage | None:
        """The conversation's oldest held message."""
        ...

    async def take_held(self, conversation: str, at: float, until: float) -> HeldMessage | None:
        """Lease the conversation's oldest held message ``until``, unless it waits for a
        decision or another process holds that message (a lease not run out by ``at``)."""
        ...

    async def renew_held(self, seq: int, until: float) -> bool:
        """Extend the lease of a held message being run; whether it is still held."""
        ...

    async def release(self, seq: int) -> None:
        """A held message's turn ran."""
        ...

    async def open_approvals(self) -> list[PendingApproval]:
        """Every request not finished (for the sweeper)."""
        ...

    async def held_conversations(self) -> list[str]:
        """Conversations with held messages (for the sweeper)."""
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS botkit_approvals (
        id           TEXT    PRIMARY KEY,
        conversation TEXT    NOT NULL,
        user_id      INTEGER NOT NULL,
        approvers    TEXT    NOT NULL,
        chat_id      INTEGER NOT NULL,
        turn         TEXT    NOT NULL,
        calls        TEXT    NOT NULL,
        deadline     REAL    NOT NULL,
        message_id   INTEGER,
        state        TEXT    NOT NULL DEFAULT 'pending',
        decision     TEXT,
        resuming_until REAL  NOT NULL DEFAULT 0
    )""",
    """CREATE INDEX IF NOT EXISTS botkit_approvals_open_idx
        ON botkit_approvals (conversation) WHERE state <> 'done'""",
    """CREATE TABLE IF NOT EXISTS botkit_held_messages (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation TEXT    NOT NULL,
        update_json  TEXT    NOT NULL,
        taken_until  REAL    NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS botkit_held_conv_idx ON botkit_held_messages (conversation, seq)",
)

_COLUMNS = "id, conversation, user_id, approvers, chat_id, turn, calls, deadline, message_id, "
_COLUMNS += "state, decision, resuming_until"
_ADDED = (
    ("botkit_approvals", "resuming_until", "REAL NOT NULL DEFAULT 0"),
    ("botkit_held_messages", "taken_until", "REAL NOT NULL DEFAULT 0"),
)
"""Columns a file made by an older botkit lacks: added on opening it."""
_TAKE_HELD = """UPDATE botkit_held_messages SET taken_until = ?
    WHERE seq = (SELECT min(seq) FROM botkit_held_messages WHERE conversation = ?)
    AND taken_until <= ?
    AND NOT EXISTS (SELECT 1 FROM botkit_approvals WHERE conversation = ? AND state <> 'done')
    RETURNING seq, conversation, update_json"""


def _approval(row: Sequence[Any]) -> PendingApproval:
    return PendingApproval(
        id=row[0],
        conversation=row[1],
        user_id=row[2],
        approvers=tuple(json.loads(row[3])),
        chat_id=row[4],
        turn=json.loads(row[5]),
        calls=json.loads(row[6]),
        deadline=row[7],
        message_id=row[8],
        state=row[9],
        decision=row[10],
        resuming_until=row[11],
    )


class SqliteApprovals:
    """Approvals in a SQLite file beside the sessions (``<sessions_dir>/approvals.db``)."""

    shared = False
    """The serving process owns the sessions folder (``botkit.lock``): at its start, nothing
    else is resuming a turn."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._busy: set[str] | None = None
        """Conversations that may wait (read once, then kept by this process, the only
        writer that adds): a turn of any other conversation asks the file nothing."""
        self._added: set[str] = set()
        """Conversations this process made wait while the first read was under way."""

    @asynccontextmanager
    async def _connected(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            if self._db is None:
                opening = asyncio.ensure_future(_open(self.path))
                try:
                    self._db = await asyncio.shield(opening)
                except asyncio.CancelledError:
                    # The open goes on in aiosqlite's thread: close what it opens, then stop.
                    with suppress(Exception):
                        await (await opening).close()
                    raise
            yield self._db

    async def _changed(self, sql: str, *params: Any) -> int:
        async with self._connected() as db:
            cursor = await db.execute(sql, params)
            return cursor.rowcount

    async def _rows(self, sql: str, *params: Any) -> list[Sequence[Any]]:
        async with self._connected() as db, db.execute(sql, params) as cursor:
            return list(await cursor.fetchall())

    async def add(self, approval: PendingApproval) -> None:
        """Record a new request."""
        await self._changed(
            f"INSERT INTO botkit_approvals ({_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            approval.id,
            approval.conversation,
            approval.user_id,
            json.dumps(list(approval.approvers)),
            approval.chat_id,
            json.dumps(approval.turn),
            json.dumps(approval.calls),
            approval.deadline,
            approval.message_id,
            approval.state,
            approval.decision,
            approval.resuming_until,
        )
        self._may_wait(approval.conversation)

    async def set_message(self, approval_id: str, message_id: int | None) -> None:
        """Note the message its buttons are under."""
        await self._changed(
            "UPDATE botkit_approvals SET message_id = ? WHERE id = ?", message_id, approval_id
        )

    async def get(self, approval_id: str) -> PendingApproval | None:
        """The request ``approval_id``, if any."""
        rows = await self._rows(
            f"SELECT {_COLUMNS} FROM botkit_approvals WHERE id = ?", approval_id
        )
        return _approval(rows[0]) if rows else None

    async def decide(self, approval_id: str, decision: Decision) -> bool:
        """Record ``decision`` if the request is still pending; whether this call did."""
        changed = await self._changed(
            "UPDATE botkit_approvals SET state = 'decided', decision = ? "
            "WHERE id = ? AND state = 'pending'",
            decision,
            approval_id,
        )
        return changed == 1

    async def claim(self, approval_id: str, until: float) -> bool:
        """Take a decided request for resuming its turn, leased ``until``; whether this call
        did."""
        changed = await self._changed(
            "UPDATE botkit_approvals SET state = 'resuming', resuming_until = ? "
            "WHERE id = ? AND state = 'decided'",
            until,
            approval_id,
        )
        return changed == 1

    async def renew(self, approval_id: str, until: float) -> bool:
        """Extend the lease of a request being resumed; whether it is still ``resuming``."""
        changed = await self._changed(
            "UPDATE botkit_approvals SET resuming_until = ? WHERE id = ? AND state = 'resuming'",
            until,
            approval_id,
        )
        return changed == 1

    async def abandon(self, approval_id: str, at: float) -> bool:
        """End a resumption whose lease ran out by ``at`` (its process died); whether this
        call did."""
        changed = await self._changed(
            "UPDATE botkit_approvals SET state = 'done' "
            "WHERE id = ? AND state = 'resuming' AND resuming_until <= ?",
            approval_id,
            at,
        )
        return changed == 1

    async def finish(self, approval_id: str) -> None:
        """The turn resumed and ended (or cannot be resumed)."""
        await self._changed("UPDATE botkit_approvals SET state = 'done' WHERE id = ?", approval_id)

    async def waiting(self, conversation: str) -> bool:
        """Whether the conversation waits: an unfinished request, or messages held."""
        if self._busy is None:
            rows = await self._rows(
                "SELECT conversation FROM botkit_approvals WHERE state <> 'done' "
                "UNION SELECT conversation FROM botkit_held_messages"
            )
            self._busy = {row[0] for row in rows} | self._added
            self._added.clear()
        if conversation not in self._busy:
            return False
        rows = await self._rows(
            "SELECT EXISTS (SELECT 1 FROM botkit_approvals WHERE conversation = ? "
            "AND state <> 'done') OR EXISTS (SELECT 1 FROM botkit_held_messages "
            "WHERE conversation = ?)",
            conversation,
            conversation,
        )
        if not rows[0][0]:
            self._busy.discard(conversation)  # finished, released or erased since
        return bool(rows[0][0])

    def _may_wait(self, conversation: str) -> None:
        (self._added if self._busy is None else self._busy).add(conversation)

    async def unfinished(self, conversation: str) -> PendingApproval | None:
        """The conversation's request not finished yet, if any."""
        rows = await self._rows(
            f"SELECT {_COLUMNS} FROM botkit_approvals WHERE conversation = ? "
            "AND state <> 'done' LIMIT 1",
            conversation,
        )
        return _approval(rows[0]) if rows else None

    async def hold(self, conversation: str, update: dict[str, Any]) -> None:
        """Keep a message until the conversation stops waiting."""
        await self._changed(
            "INSERT INTO botkit_held_messages (conversation, update_json) VALUES (?, ?)",
            conversation,
            json.dumps(update),
        )
        self._may_wait(conversation)

    async def next_held(self, conversation: str) -> HeldMessage | None:
        """The conversation's oldest held message."""
        rows = await self._rows(
            "SELECT seq, conversation, update_json FROM botkit_held_messages "
            "WHERE conversation = ? ORDER BY seq LIMIT 1",
            conversation,
        )
        return HeldMessage(rows[0][0], rows[0][1], json.loads(rows[0][2])) if rows else None

    async def take_held(self, conversation: str, at: float, until: float) -> HeldMessage | None:
        """Lease the conversation's oldest held message ``until``, unless it waits for a
        decision or another process holds that message (a lease not run out by ``at``)."""
        async with (
            self._connected() as db,
            db.execute(_TAKE_HELD, (until, conversation, at, conversation)) as cursor,
        ):
            rows = list(await cursor.fetchall())
        return HeldMessage(rows[0][0], rows[0][1], json.loads(rows[0][2])) if rows else None

    async def renew_held(self, seq: int, until: float) -> bool:
        """Extend the lease of a held message being run; whether it is still held."""
        changed = await self._changed(
            "UPDATE botkit_held_messages SET taken_until = ? WHERE seq = ?", until, seq
        )
        return changed == 1

    async def release(self, seq: int) -> None:
        """A held message's turn ran."""
        await self._changed("DELETE FROM botkit_held_messages WHERE seq = ?", seq)

    async def open_approvals(self) -> list[PendingApproval]:
        """Every request not finished (for the sweeper)."""
        rows = await self._rows(f"SELECT {_COLUMNS} FROM botkit_approvals WHERE state <> 'done'")
        return [_approval(row) for row in rows]

    async def held_conversations(self) -> list[str]:
        """Conversations with held messages (for the sweeper)."""
        rows = await self._rows("SELECT DISTINCT conversation FROM botkit_held_messages")
        return [row[0] for row in rows]

    async def close(self) -> None:
        """Release the connection."""
        async with self._lock:
            if self._db is not None:
                db, self._db = self._db, None
                await db.close()


async def _open(path: Path) -> aiosqlite.Connection:
    """A connection to ``path`` (made ``0600``: it holds tool arguments) with the schema."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    db = await aiosqlite.connect(path, timeout=30.0, isolation_level=None)
    try:
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA secure_delete=ON")  # deleted rows are zeroed, not left
        for statement in _SCHEMA:
            await db.execute(statement)
        for table, column, kind in _ADDED:
            async with db.execute(f"PRAGMA table_info({table})") as cursor:
                present = {row[1] for row in await cursor.fetchall()}
            if column not in present:
                await db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    except BaseException:
        await db.close()
        raise
    return db


def now() -> float:
    """Seconds since the epoch (deadlines survive restarts)."""
    return time.time()
