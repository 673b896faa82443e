"""Telegram's limits shared by every worker of one bot, kept in PostgreSQL.

The global rate (BOTKIT_GLOBAL_RATE) is one sequence of send slots for the whole bot. A worker
leases the next ``LEASE_SECONDS`` of them in one statement (it moves
``botkit_send_pace.next_at`` on past them) and hands them to its own sends, each waiting for
its slot; slots whose time passed unused are dropped, so N workers together send no faster than
one would, and a busy worker pays one round trip per lease, not per send. A 429 for a chat is
written to ``botkit_chat_holds``; every lease reads the holds in force, so another worker's
next send there waits until the hold ends (a hold written while a worker's lease lasts counts
there from its next lease). Times are the database's clock, so machines whose clocks
differ still agree. Per-chat pacing stays in each process (one conversation's turns run one at
a time anyway).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from botkit.runtime.queue import TurnQueue

__all__ = ["LEASE_SECONDS", "SharedPacing"]

LEASE_SECONDS = 0.1
"""How far ahead a worker takes the bot's send slots at a time (at least one slot)."""

_LEASE = """
    WITH now AS (SELECT extract(epoch FROM clock_timestamp()) AS t),
    lease AS (
        INSERT INTO botkit_send_pace AS p (bot_id, next_at)
        SELECT %(bot_id)s, now.t + %(span)s FROM now
        ON CONFLICT (bot_id) DO UPDATE
            SET next_at = greatest(p.next_at, (SELECT t FROM now)) + %(span)s
        RETURNING next_at - %(span)s AS at
    )
    SELECT lease.at, now.t AS now, (
        SELECT coalesce(json_object_agg(chat_id, until), '{}')
        FROM botkit_chat_holds WHERE bot_id = %(bot_id)s AND until > now.t
    ) AS holds
    FROM lease, now"""
_HOLD = """
    INSERT INTO botkit_chat_holds AS h (bot_id, chat_id, until)
    VALUES (%(bot_id)s, %(chat_id)s, extract(epoch FROM clock_timestamp()) + %(seconds)s)
    ON CONFLICT (bot_id, chat_id) DO UPDATE SET until = greatest(h.until, EXCLUDED.until)"""


class SharedPacing:
    """A :class:`~botkit.messengers.flood.SharedLimits` in the job queue's database."""

    def __init__(self, queue: TurnQueue, bot_id: int, rate: float) -> None:
        self.queue = queue
        self.bot_id = bot_id
        self.gap = 1.0 / rate
        self.per_lease = max(1, round(rate * LEASE_SECONDS))
        self._slots: deque[float] = deque()  # leased send times, the database's clock
        self._holds: dict[int, float] = {}  # chat -> until, as of the last lease
        self._offset = 0.0  # the database's clock minus the event loop's
        self._leasing = asyncio.Lock()

    async def reserve(self, chat_id: int) -> float:
        """Take the bot's next send slot; the seconds until it (and until any hold on the chat)."""
        loop = asyncio.get_running_loop()
        if not self._usable(loop.time()):
            async with self._leasing:  # one lease at a time: the others wait for its slots
                if not self._usable(loop.time()):
                    await self._lease()  # its first slot is ours, even if it passed meanwhile
        now = loop.time() + self._offset
        start = max(self._slots.popleft(), self._holds.get(chat_id, 0.0))
        return max(start - now, 0.0)

    async def hold(self, chat_id: int, seconds: float) -> None:
        """Hold ``chat_id`` for ``seconds`` on every worker (Telegram answered 429 there)."""
        until = asyncio.get_running_loop().time() + self._offset + seconds
        self._holds[chat_id] = max(self._holds.get(chat_id, 0.0), until)
        await self.queue.app.connector.execute_query_async(
            _HOLD, bot_id=self.bot_id, chat_id=chat_id, seconds=float(seconds)
        )

    def _usable(self, now: float) -> bool:
        """Whether a leased slot is left; those whose time passed unused are dropped (sent
        late, they would add to the rate of the slots other workers hold now)."""
        late = now + self._offset - self.gap
        while self._slots and self._slots[0] < late:
            self._slots.popleft()
        return bool(self._slots)

    async def _lease(self) -> None:
        """Take the next ``per_lease`` slots of the bot and the chat holds in force."""
        row: dict[str, Any] = await self.queue.app.connector.execute_query_one_async(
            _LEASE, bot_id=self.bot_id, span=self.per_lease * self.gap
        )
        at, db_now = float(row["at"]), float(row["now"])
        self._offset = db_now - asyncio.get_running_loop().time()
        self._slots = deque(at + n * self.gap for n in range(self.per_lease))
        self._holds = {int(chat): float(until) for chat, until in row["holds"].items()}
