"""Approvals in PostgreSQL (migrations 011 and 015), shared by every worker of a scale-out."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from botkit.approvals.store import Decision, HeldMessage, PendingApproval
from botkit.stores.changes import ChangeFeed, KeptRows
from botkit.stores.postgres import own_queries

__all__ = ["PostgresApprovals"]

_COLUMNS = "id, conversation, user_id, approvers, chat_id, turn, calls, deadline, message_id, "
_COLUMNS += "state, decision, resuming_until"
_TAKE_HELD = """UPDATE botkit_held_messages SET taken_until = $2
    WHERE seq = (SELECT min(seq) FROM botkit_held_messages WHERE conversation = $1)
    AND taken_until <= $3
    AND NOT EXISTS (SELECT 1 FROM botkit_approvals WHERE conversation = $1 AND state <> 'done')
    RETURNING seq, conversation, update_json"""


def _approval(row: Any) -> PendingApproval:
    return PendingApproval(
        id=row["id"],
        conversation=row["conversation"],
        user_id=row["user_id"],
        approvers=tuple(json.loads(row["approvers"])),
        chat_id=row["chat_id"],
        turn=json.loads(row["turn"]),
        calls=json.loads(row["calls"]),
        deadline=row["deadline"],
        message_id=row["message_id"],
        state=row["state"],
        decision=row["decision"],
        resuming_until=row["resuming_until"],
    )


class PostgresApprovals:
    """Approvals in the bot's PostgreSQL database, over the user store's pool."""

    shared = True
    """Every worker of the bot uses it: a resumption is another's until its lease runs out."""

    def __init__(
        self,
        pool: Callable[[], Awaitable[Any]],
        changes: Callable[[], Awaitable[ChangeFeed | None]] | None = None,
    ) -> None:
        self._pool = pool
        """Gives the ``asyncpg.Pool`` (the user store's, opened on first use)."""
        self._changes = changes
        """Gives the user store's change feed: with it live, a conversation found not waiting
        is not asked again until anyone writes its approvals or held messages."""
        self._idle: KeptRows | None = None

    async def _execute(self, sql: str, *params: Any) -> str:
        pool = await self._pool()
        with own_queries():  # one statement each: nothing for the pool's reset to undo
            status: str = await pool.execute(sql, *params)
        return status

    async def _fetch(self, sql: str, *params: Any) -> list[Any]:
        pool = await self._pool()
        with own_queries():
            return list(await pool.fetch(sql, *params))

    async def add(self, approval: PendingApproval) -> None:
        """Record a new request."""
        (await self._idle_kept()).forget(approval.conversation)
        await self._execute(
            f"INSERT INTO botkit_approvals ({_COLUMNS}) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
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

    async def set_message(self, approval_id: str, message_id: int | None) -> None:
        """Note the message its buttons are under."""
        await self._execute(
            "UPDATE botkit_approvals SET message_id = $1 WHERE id = $2", message_id, approval_id
        )

    async def get(self, approval_id: str) -> PendingApproval | None:
        """The request ``approval_id``, if any."""
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM botkit_approvals WHERE id = $1", approval_id
        )
        return _approval(rows[0]) if rows else None

    async def decide(self, approval_id: str, decision: Decision) -> bool:
        """Record ``decision`` if the request is still pending; whether this call did."""
        status = await self._execute(
            "UPDATE botkit_approvals SET state = 'decided', decision = $1 "
            "WHERE id = $2 AND state = 'pending'",
            decision,
            approval_id,
        )
        return status == "UPDATE 1"

    async def claim(self, approval_id: str, until: float) -> bool:
        """Take a decided request for resuming its turn, leased ``until``; whether this call
        did."""
        status = await self._execute(
            "UPDATE botkit_approvals SET state = 'resuming', resuming_until = $2 "
            "WHERE id = $1 AND state = 'decided'",
            approval_id,
            until,
        )
        return status == "UPDATE 1"

    async def renew(self, approval_id: str, until: float) -> bool:
        """Extend the lease of a request being resumed; whether it is still ``resuming``."""
        status = await self._execute(
            "UPDATE botkit_approvals SET resuming_until = $2 WHERE id = $1 AND state = 'resuming'",
            approval_id,
            until,
        )
        return status == "UPDATE 1"

    async def abandon(self, approval_id: str, at: float) -> bool:
        """End a resumption whose lease ran out by ``at`` (its process died); whether this
        call did."""
        status = await self._execute(
            "UPDATE botkit_approvals SET state = 'done' "
            "WHERE id = $1 AND state = 'resuming' AND resuming_until <= $2",
            approval_id,
            at,
        )
        return status == "UPDATE 1"

    async def finish(self, approval_id: str) -> None:
        """The turn resumed and ended (or cannot be resumed)."""
        await self._execute("UPDATE botkit_approvals SET state = 'done' WHERE id = $1", approval_id)

    async def waiting(self, conversation: str) -> bool:
        """Whether the conversation waits: an unfinished request, or messages held."""
        idle = await self._idle_kept()
        if await idle.usable() and idle.get(conversation)[0]:
            return False  # found not waiting, and no one wrote its rows since
        read_at = idle.changes
        rows = await self._fetch(
            "SELECT EXISTS (SELECT 1 FROM botkit_approvals WHERE conversation = $1 "
            "AND state <> 'done') OR EXISTS (SELECT 1 FROM botkit_held_messages "
            "WHERE conversation = $1)",
            conversation,
        )
        waiting = bool(rows[0][0])
        if not waiting:  # "waiting" is always asked again: a decision may have ended it
            idle.keep(conversation, False, read_at)
        return waiting

    async def _idle_kept(self) -> KeptRows:
        if self._idle is None:
            feed = await self._changes() if self._changes is not None else None
            self._idle = KeptRows(feed, "botkit_approvals", "botkit_held_messages")
        return self._idle

    async def unfinished(self, conversation: str) -> PendingApproval | None:
        """The conversation's request not finished yet, if any."""
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM botkit_approvals WHERE conversation = $1 "
            "AND state <> 'done' LIMIT 1",
            conversation,
        )
        return _approval(rows[0]) if rows else None

    async def hold(self, conversation: str, update: dict[str, Any]) -> None:
        """Keep a message until the conversation stops waiting."""
        (await self._idle_kept()).forget(conversation)
        await self._execute(
            "INSERT INTO botkit_held_messages (conversation, update_json) VALUES ($1, $2)",
            conversation,
            json.dumps(update),
        )

    async def next_held(self, conversation: str) -> HeldMessage | None:
        """The conversation's oldest held message."""
        rows = await self._fetch(
            "SELECT seq, conversation, update_json FROM botkit_held_messages "
            "WHERE conversation = $1 ORDER BY seq LIMIT 1",
            conversation,
        )
        if not rows:
            return None
        return HeldMessage(rows[0]["seq"], rows[0]["conversation"], json.loads(rows[0][2]))

    async def take_held(self, conversation: str, at: float, until: float) -> HeldMessage | None:
        """Lease the conversation's oldest held message ``until``, unless it waits for a
        decision or another worker holds that message (a lease not run out by ``at``)."""
        rows = await self._fetch(_TAKE_HELD, conversation, until, at)
        if not rows:
            return None
        return HeldMessage(rows[0]["seq"], rows[0]["conversation"], json.loads(rows[0][2]))

    async def renew_held(self, seq: int, until: float) -> bool:
        """Extend the lease of a held message being run; whether it is still held."""
        status = await self._execute(
            "UPDATE botkit_held_messages SET taken_until = $2 WHERE seq = $1", seq, until
        )
        return status == "UPDATE 1"

    async def release(self, seq: int) -> None:
        """A held message's turn ran."""
        await self._execute("DELETE FROM botkit_held_messages WHERE seq = $1", seq)

    async def open_approvals(self) -> list[PendingApproval]:
        """Every request not finished (for the sweeper)."""
        rows = await self._fetch(f"SELECT {_COLUMNS} FROM botkit_approvals WHERE state <> 'done'")
        return [_approval(row) for row in rows]

    async def held_conversations(self) -> list[str]:
        """Conversations with held messages (for the sweeper)."""
        rows = await self._fetch("SELECT DISTINCT conversation FROM botkit_held_messages")
        return [row[0] for row in rows]

    async def close(self) -> None:
        """Nothing of its own: the pool is the user store's."""
