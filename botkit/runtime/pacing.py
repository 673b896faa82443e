"""Telegram's limits shared by every worker of one bot, kept in PostgreSQL.

The global rate (BOTKIT_GLOBAL_RATE) is one sequence of send slots for the whole bot: each
send moves ``botkit_send_pace.next_at`` on by ``1/rate`` in one statement and waits for the
slot it took, so N workers together send no faster than one would. A 429 for a chat is written
to ``botkit_chat_holds``; every worker's next send there waits until the hold ends. Times are
the database's clock, so machines whose clocks differ still agree. Per-chat pacing stays in
each process (one conversation's turns run one at a time anyway).
"""

from __future__ import annotations

from typing import Any

from botkit.runtime.queue import TurnQueue

__all__ = ["SharedPacing"]

_RESERVE = """
    WITH now AS (SELECT extract(epoch FROM clock_timestamp()) AS t),
    slot AS (
        INSERT INTO botkit_send_pace AS p (bot_id, next_at)
        SELECT %(bot_id)s, now.t + %(gap)s FROM now
        ON CONFLICT (bot_id) DO UPDATE
            SET next_at = greatest(p.next_at, (SELECT t FROM now)) + %(gap)s
        RETURNING next_at - %(gap)s AS at
    )
    SELECT slot.at, now.t AS now, (
        SELECT until FROM botkit_chat_holds WHERE bot_id = %(bot_id)s AND chat_id = %(chat_id)s
    ) AS held_until
    FROM slot, now"""
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

    async def reserve(self, chat_id: int) -> float:
        """Take the bot's next send slot; the seconds until it (and until any hold on the chat)."""
        row: dict[str, Any] = await self.queue.app.connector.execute_query_one_async(
            _RESERVE, bot_id=self.bot_id, chat_id=chat_id, gap=self.gap
        )
        start = max(float(row["at"]), float(row["held_until"] or 0.0))
        return max(start - float(row["now"]), 0.0)

    async def hold(self, chat_id: int, seconds: float) -> None:
        """Hold ``chat_id`` for ``seconds`` on every worker (Telegram answered 429 there)."""
        await self.queue.app.connector.execute_query_async(
            _HOLD, bot_id=self.bot_id, chat_id=chat_id, seconds=float(seconds)
        )
