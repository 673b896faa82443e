"""Fair turn slots: a busy group holds one slot, not all of them, and scheduled task turns take
the same slots as users' messages (#26)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from test_scaleout import db, queued, queued_bot

from botkit import Bot
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    make_bot,
    running,
)

__all__ = ["db"]  # the fixture: a migrated database, for the queued runtime's test

MEMBERS = list(range(1201, 1209))
ALONE = 1300
GROUP = -100_1200
BOT = "botkit_test_bot"
LATENCY = 1.0
"""Seconds the fake Messages API waits before each answer."""


def slotted_bot(claude: FakeAnthropicServer, tmp_path: Path, **settings: Any) -> Bot:
    values: dict[str, Any] = {
        "allowed_users": frozenset({*MEMBERS, ALONE}),
        "max_concurrent_turns": 4,
        **settings,
    }
    return make_bot(claude, tmp_path, **values)


async def timed_private_reply(telegram: FakeTelegramServer, text: str) -> float:
    """Seconds from sending ``text`` in private to the bot's reply."""
    before = len(telegram.sent_messages(ALONE))
    started = time.monotonic()
    telegram.send_text(ALONE, text)
    await telegram.wait_for_messages(ALONE, before + 1, timeout=30)
    return time.monotonic() - started


async def taken(telegram: FakeTelegramServer, update_id: int) -> None:
    """Wait until the bot's poller confirmed ``update_id`` (it was handed to the runtime)."""
    while telegram.confirmed_offset <= update_id:
        await telegram.wait_for_requests("getUpdates", len(telegram.requests_for("getUpdates")) + 1)


async def test_a_busy_group_does_not_delay_a_private_reply(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    claude.latency = LATENCY
    bot = slotted_bot(claude, tmp_path)
    async with running(bot, telegram, grace_period=60):
        await timed_private_reply(telegram, "warming up")  # connections, session file
        idle = await timed_private_reply(telegram, "alone, first")
        sent = [
            telegram.send_text(
                member, f"@{BOT} question {n}", chat_id=GROUP, chat_type="supergroup"
            )
            for n, member in enumerate(MEMBERS)
        ]
        await taken(telegram, sent[-1])
        busy = await timed_private_reply(telegram, "alone, second")
        answers = await telegram.wait_for_messages(GROUP, len(MEMBERS), timeout=60)
    print(f"private reply: idle {idle:.2f} s, after the group wrote {busy:.2f} s")
    assert busy < 1.5 * idle, f"idle {idle:.2f} s, busy {busy:.2f} s"
    assert len(answers) == len(MEMBERS), "every member was answered"
    group_turns = [r.last_user_text() for r in claude.requests if "question" in r.last_user_text()]
    asked = [int(text.rsplit(" ", 1)[1]) for text in group_turns]
    assert asked == list(range(len(MEMBERS))), "the group's turns in the order they were written"
    assert all(f"(id {member})" in text for member, text in zip(MEMBERS, group_turns, strict=True))


async def test_a_busy_group_does_not_delay_a_private_reply_in_the_queued_runtime(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, db: str
) -> None:
    # procrastinate fetches no job whose lock (its conversation's) a running job holds, so the
    # group's waiting turns take none of the worker's slots: this holds without a change.
    claude.latency = LATENCY
    bot = queued_bot(claude, telegram, tmp_path, db, max_concurrent_turns=4)
    async with queued(bot, concurrency=4):
        await timed_private_reply(telegram, "warming up")  # connections, session file
        idle = await timed_private_reply(telegram, "alone, first")
        sent = [
            telegram.send_text(
                member, f"@{BOT} question {n}", chat_id=GROUP, chat_type="supergroup"
            )
            for n, member in enumerate(MEMBERS)
        ]
        await taken(telegram, sent[-1])
        busy = await timed_private_reply(telegram, "alone, second")
        answers = await telegram.wait_for_messages(GROUP, len(MEMBERS), timeout=60)
    print(f"queued: private reply idle {idle:.2f} s, after the group wrote {busy:.2f} s")
    assert busy < 1.5 * idle, f"idle {idle:.2f} s, busy {busy:.2f} s"
    assert len(answers) == len(MEMBERS)


async def test_in_a_shared_group_only_one_members_burst_is_gathered(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    alice, bob = MEMBERS[0], MEMBERS[1]
    release, started = asyncio.Event(), asyncio.Event()

    async def model(request: FakeRequest) -> FakeReply:
        text = request.last_user_text()
        if text.endswith("slow"):
            started.set()
            await release.wait()
        return FakeReply.text("ok")

    claude.responder = model
    bot = slotted_bot(claude, tmp_path, answer_groups="all")
    async with running(bot, telegram):
        telegram.send_text(alice, "slow", chat_id=GROUP, chat_type="supergroup")
        await asyncio.wait_for(started.wait(), 10)
        sent = [
            telegram.send_text(sender, text, chat_id=GROUP, chat_type="supergroup")
            for sender, text in ((bob, "b1"), (alice, "a1"), (alice, "a2"), (bob, "b2"))
        ]
        await taken(telegram, sent[-1])
        release.set()
        await telegram.wait_for_messages(GROUP, 4)
    turns = [r.last_user_text() for r in claude.requests][1:]
    assert len(turns) == 3, turns
    assert turns == [
        f"[User (id {bob}) wrote:]\nb1",
        f"[User (id {alice}) wrote:]\na1\n\na2",  # Alice's two, sent during her turn, as one
        f"[User (id {bob}) wrote:]\nb2",
    ]
